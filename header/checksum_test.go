package header

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// naive is RFC 1071's reference loop, 16 bits at a time.
func naive(b []byte) uint16 {
	var acc uint32
	for i := 0; i+1 < len(b); i += 2 {
		acc += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		acc += uint32(b[len(b)-1]) << 8
	}
	for acc > 0xffff {
		acc = acc>>16 + acc&0xffff
	}
	return ^uint16(acc)
}

func TestChecksumMatchesRFC1071Loop(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 300 {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		if got, want := Checksum(b), naive(b); got != want {
			t.Fatalf("len %d: Checksum = %#04x, want %#04x", n, got, want)
		}
	}
}

// RFC 1071 §3's numerical example: the bytes 00 01 f2 03 f4 f5 f6 f7 sum to
// ddf2 whether added 16 or 32 bits at a time, so the checksum is 220d; the
// sum is the same however the message is cut into even pieces (§2 (B)).
func TestChecksumRFC1071Example(t *testing.T) {
	b := []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}
	if got := Checksum(b); got != 0x220d {
		t.Errorf("Checksum = %#04x, want 0x220d", got)
	}
	for cut := 0; cut <= len(b); cut += 2 {
		if got := ChecksumFold(ChecksumAdd(ChecksumAdd(0, b[:cut]), b[cut:])); got != 0x220d {
			t.Errorf("cut at %d: %#04x, want 0x220d", cut, got)
		}
	}
	// An odd last byte counts as the high byte of a word (§4.1's C loop).
	if got := Checksum([]byte{0x00, 0x01, 0xf2}); got != ^uint16(0x0001+0xf200) {
		t.Errorf("odd length: %#04x", got)
	}
	// A header holding its own checksum sums to all ones: 0 complemented.
	h := []byte{0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7}
	if got := Checksum(h); got != 0 {
		t.Errorf("header with its checksum: %#04x, want 0", got)
	}
	h[10], h[11] = 0, 0
	if got := Checksum(h); got != 0xb861 {
		t.Errorf("header checksum %#04x, want 0xb861", got)
	}
}

func TestL4ChecksumVerifiesWhatItComputes(t *testing.T) {
	for _, pair := range [][2]string{{"192.0.2.1", "192.0.2.2"}, {"fe80::1", "2001:db8::2"}} {
		src, dst := netip.MustParseAddr(pair[0]), netip.MustParseAddr(pair[1])
		seg := []byte{0xc0, 0x00, 0x12, 0xb7, 0, 13, 0, 0, 'h', 'e', 'l', 'l', 'o'}
		binary.BigEndian.PutUint16(seg[6:], L4Checksum(src, dst, 17, seg))
		if L4Checksum(src, dst, 17, seg) != 0 {
			t.Errorf("%v→%v: checksum does not verify", src, dst)
		}
		seg[9] ^= 1
		if L4Checksum(src, dst, 17, seg) == 0 {
			t.Errorf("%v→%v: a flipped bit still verifies", src, dst)
		}
	}
}
