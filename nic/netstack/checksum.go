package netstack

import (
	"net/netip"

	"github.com/vrnic/vrnicd/nic/internal/inetsum"
)

// Checksum is the Internet checksum of b.
func Checksum(b []byte) uint16 { return inetsum.Checksum(b) }

// l4Checksum is the UDP/ICMPv6 checksum of seg (its checksum field must be
// zero or hold the value being verified: a correct one yields 0).
func l4Checksum(src, dst netip.Addr, proto uint8, seg []byte) uint16 {
	return inetsum.L4(src, dst, proto, seg)
}
