package header

import (
	"encoding/binary"
	"net/netip"
)

// ChecksumAdd adds b to the running ones'-complement sum acc (RFC 1071) and
// returns the sum unfolded: 32-bit words are added into 64 bits, which is
// the 16-bit sum once folded (RFC 1071 §2 (B), (C)). An odd length pads with
// a zero byte, so only the last piece of a message may be odd.
func ChecksumAdd(acc uint64, b []byte) uint64 {
	for len(b) >= 32 {
		acc += uint64(binary.BigEndian.Uint32(b[0:])) + uint64(binary.BigEndian.Uint32(b[4:])) +
			uint64(binary.BigEndian.Uint32(b[8:])) + uint64(binary.BigEndian.Uint32(b[12:])) +
			uint64(binary.BigEndian.Uint32(b[16:])) + uint64(binary.BigEndian.Uint32(b[20:])) +
			uint64(binary.BigEndian.Uint32(b[24:])) + uint64(binary.BigEndian.Uint32(b[28:]))
		b = b[32:]
	}
	for len(b) >= 4 {
		acc += uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		acc += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint64(b[0]) << 8
	}
	return acc
}

// ChecksumFold folds a ChecksumAdd sum to 16 bits and complements it: the
// value that goes in a checksum field.
func ChecksumFold(acc uint64) uint16 {
	for acc > 0xffff {
		acc = acc>>16 + acc&0xffff
	}
	return ^uint16(acc)
}

// Checksum is the Internet checksum of b: over a header whose checksum
// field is zero, the field's value; over one that holds it, 0 when right.
func Checksum(b []byte) uint16 { return ChecksumFold(ChecksumAdd(0, b)) }

// PseudoHeaderSum is the unfolded sum of the pseudo-header of an upper-layer
// packet of n bytes with protocol proto: RFC 768's for IPv4 addresses,
// RFC 8200 §8.1's for IPv6 ones (the sum is the same for both layouts).
func PseudoHeaderSum(src, dst netip.Addr, proto uint8, n int) uint64 {
	var acc uint64
	if src.Is4() {
		s, d := src.As4(), dst.As4()
		acc = ChecksumAdd(ChecksumAdd(acc, s[:]), d[:])
	} else {
		s, d := src.As16(), dst.As16()
		acc = ChecksumAdd(ChecksumAdd(acc, s[:]), d[:])
	}
	return acc + uint64(proto) + uint64(n)
}

// L4Checksum is the UDP/ICMPv6 checksum of seg behind the pseudo-header of
// src, dst and proto; seg's checksum field must be zero (the result is the
// field's value; UDP sends a computed 0 as 0xFFFF) or hold the value being
// verified (a right one gives 0).
func L4Checksum(src, dst netip.Addr, proto uint8, seg []byte) uint16 {
	return ChecksumFold(ChecksumAdd(PseudoHeaderSum(src, dst, proto, len(seg)), seg))
}
