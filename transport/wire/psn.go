package wire

// PSNMask keeps the 24 bits of a packet sequence number.
const PSNMask = 0xFFFFFF

// PSN is a 24-bit packet sequence number. Arithmetic wraps modulo 2^24 and
// comparison is circular: a is before b when b-a, taken modulo 2^24, is in
// (0, 2^23). This is kernel rxe's psn_compare().
type PSN uint32

// Add returns p + n modulo 2^24.
func (p PSN) Add(n uint32) PSN { return PSN((uint32(p) + n) & PSNMask) }

// Sub returns p - n modulo 2^24.
func (p PSN) Sub(n uint32) PSN { return PSN((uint32(p) - n) & PSNMask) }

// Diff returns the signed circular distance p - q in (-2^23, 2^23].
func (p PSN) Diff(q PSN) int32 { return int32((uint32(p)-uint32(q))<<8) >> 8 }

// Before reports whether p comes strictly before q.
func (p PSN) Before(q PSN) bool { return p.Diff(q) < 0 }

// After reports whether p comes strictly after q.
func (p PSN) After(q PSN) bool { return p.Diff(q) > 0 }

// Compare returns -1, 0 or +1 as p is before, equal to or after q.
func (p PSN) Compare(q PSN) int {
	switch d := p.Diff(q); {
	case d < 0:
		return -1
	case d > 0:
		return 1
	}
	return 0
}

// Distance is the number of PSNs from p forward to q, modulo 2^24.
func (p PSN) Distance(q PSN) uint32 { return (uint32(q) - uint32(p)) & PSNMask }
