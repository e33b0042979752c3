package inetsum

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
	// RFC 1071 section 3's example: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
	if got := Checksum([]byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}); got != ^uint16(0xddf2) {
		t.Errorf("RFC 1071 example = %#04x", got)
	}
}

func TestL4VerifiesWhatItComputes(t *testing.T) {
	for _, pair := range [][2]string{{"192.0.2.1", "192.0.2.2"}, {"fe80::1", "2001:db8::2"}} {
		src, dst := netip.MustParseAddr(pair[0]), netip.MustParseAddr(pair[1])
		seg := []byte{0xc0, 0x00, 0x12, 0xb7, 0, 13, 0, 0, 'h', 'e', 'l', 'l', 'o'}
		binary.BigEndian.PutUint16(seg[6:], L4(src, dst, 17, seg))
		if L4(src, dst, 17, seg) != 0 {
			t.Errorf("%v→%v: checksum does not verify", src, dst)
		}
		seg[9] ^= 1
		if L4(src, dst, 17, seg) == 0 {
			t.Errorf("%v→%v: a flipped bit still verifies", src, dst)
		}
	}
}
