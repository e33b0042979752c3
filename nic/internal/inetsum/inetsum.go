// Package inetsum computes the Internet checksum (RFC 1071) of IPv4 headers
// and of UDP/ICMPv6 segments with their IPv4 or IPv6 pseudo-header. The
// network stack uses it to build and check packets; the raw link uses it to
// finish checksums the kernel left partial.
package inetsum

import (
	"encoding/binary"
	"net/netip"
)

// Sum adds b to the running ones'-complement sum acc, 8 bytes at a time;
// odd lengths pad with a zero byte. The result is unfolded.
func Sum(acc uint64, b []byte) uint64 {
	for len(b) >= 32 {
		a0 := uint64(binary.BigEndian.Uint32(b[0:]))
		a1 := uint64(binary.BigEndian.Uint32(b[4:]))
		a2 := uint64(binary.BigEndian.Uint32(b[8:]))
		a3 := uint64(binary.BigEndian.Uint32(b[12:]))
		a4 := uint64(binary.BigEndian.Uint32(b[16:]))
		a5 := uint64(binary.BigEndian.Uint32(b[20:]))
		a6 := uint64(binary.BigEndian.Uint32(b[24:]))
		a7 := uint64(binary.BigEndian.Uint32(b[28:]))
		acc += a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7
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

// Fold reduces a sum to 16 bits and complements it.
func Fold(acc uint64) uint16 {
	for acc > 0xffff {
		acc = acc>>16 + acc&0xffff
	}
	return ^uint16(acc)
}

// Checksum is the Internet checksum of b.
func Checksum(b []byte) uint16 { return Fold(Sum(0, b)) }

// Pseudo is the sum of the IPv4 or IPv6 pseudo-header for an upper-layer
// packet of length n with protocol proto.
func Pseudo(src, dst netip.Addr, proto uint8, n int) uint64 {
	var acc uint64
	if src.Is4() {
		s, d := src.As4(), dst.As4()
		acc = Sum(acc, s[:])
		acc = Sum(acc, d[:])
	} else {
		s, d := src.As16(), dst.As16()
		acc = Sum(acc, s[:])
		acc = Sum(acc, d[:])
	}
	return acc + uint64(proto) + uint64(n)
}

// L4 is the UDP/ICMPv6 checksum of seg (its checksum field must be zero or
// hold the value being verified: a correct one yields 0).
func L4(src, dst netip.Addr, proto uint8, seg []byte) uint16 {
	return Fold(Sum(Pseudo(src, dst, proto, len(seg)), seg))
}
