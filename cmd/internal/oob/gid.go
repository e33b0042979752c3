package oob

import (
	"strconv"
)

// GIDString formats a GID as glibc's inet_ntop(AF_INET6) does, which is
// how the pingpong tools print it: lower-case hex groups without leading
// zeros, the first longest run of two or more zero groups as "::", and
// the last 32 bits dotted when the address is IPv4-mapped (::ffff:a.b.c.d)
// or IPv4-compatible (::a.b.c.d). Go's net and netip differ on the last
// point (netip prints ::c000:20b for ::192.0.2.11).
func GIDString(gid [16]byte) string {
	var w [8]int
	for i := range w {
		w[i] = int(gid[2*i])<<8 | int(gid[2*i+1])
	}
	// The longest run of zero words; the first wins a tie.
	bestBase, bestLen := -1, 0
	curBase, curLen := -1, 0
	for i := range w {
		if w[i] == 0 {
			if curBase == -1 {
				curBase, curLen = i, 1
			} else {
				curLen++
			}
			continue
		}
		if curBase != -1 {
			if bestBase == -1 || curLen > bestLen {
				bestBase, bestLen = curBase, curLen
			}
			curBase = -1
		}
	}
	if curBase != -1 && (bestBase == -1 || curLen > bestLen) {
		bestBase, bestLen = curBase, curLen
	}
	if bestBase != -1 && bestLen < 2 {
		bestBase = -1
	}
	b := make([]byte, 0, 46)
	for i := 0; i < 8; i++ {
		if bestBase != -1 && i >= bestBase && i < bestBase+bestLen {
			if i == bestBase {
				b = append(b, ':')
			}
			continue
		}
		if i != 0 {
			b = append(b, ':')
		}
		if i == 6 && bestBase == 0 && (bestLen == 6 || bestLen == 5 && w[5] == 0xffff) {
			for j, o := range gid[12:] {
				if j > 0 {
					b = append(b, '.')
				}
				b = strconv.AppendUint(b, uint64(o), 10)
			}
			return string(b)
		}
		b = strconv.AppendUint(b, uint64(w[i]), 16)
	}
	if bestBase != -1 && bestBase+bestLen == 8 {
		b = append(b, ':')
	}
	return string(b)
}
