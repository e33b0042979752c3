// Package inetsum is the Internet checksum under its old names, kept for
// nic/link while that package is being rewritten; the one implementation
// is transport/wire's (Checksum, ChecksumAdd, L4Checksum). New code uses
// wire's; this package goes once nic/link does.
package inetsum

import (
	"net/netip"

	"github.com/vrnic/vrnicd/transport/wire"
)

// Sum is wire.ChecksumAdd.
func Sum(acc uint64, b []byte) uint64 { return wire.ChecksumAdd(acc, b) }

// Fold is wire.ChecksumFold.
func Fold(acc uint64) uint16 { return wire.ChecksumFold(acc) }

// Checksum is wire.Checksum.
func Checksum(b []byte) uint16 { return wire.Checksum(b) }

// Pseudo is wire.PseudoHeaderSum.
func Pseudo(src, dst netip.Addr, proto uint8, n int) uint64 {
	return wire.PseudoHeaderSum(src, dst, proto, n)
}

// L4 is wire.L4Checksum.
func L4(src, dst netip.Addr, proto uint8, seg []byte) uint16 {
	return wire.L4Checksum(src, dst, proto, seg)
}
