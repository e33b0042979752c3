package nic

import (
	"encoding/binary"
	"net/netip"

	"github.com/vrnic/vrnicd/header"
	"github.com/vrnic/vrnicd/nic/gid"
)

// loopback synthesises the IP header a packet between two of the device's
// own GIDs would have had, and delivers it without the wire (rxe does the
// same for packets to its own MAC).
func (d *Device) loopback(tp []byte, src, dst gid.GID, tclass, hop uint8, sport uint16) {
	var h [header.IPv6HeaderLen]byte
	var iphdr []byte
	if netip.AddrFrom16(dst).Is4In6() {
		iphdr = h[:header.IPv4HeaderLen]
		iphdr[0], iphdr[1] = 0x45, tclass
		binary.BigEndian.PutUint16(iphdr[2:], uint16(header.IPv4HeaderLen+header.UDPHeaderLen+len(tp)))
		binary.BigEndian.PutUint16(iphdr[6:], 0x4000)
		iphdr[8], iphdr[9] = hop, 17
		copy(iphdr[12:16], src[12:])
		copy(iphdr[16:20], dst[12:])
		binary.BigEndian.PutUint16(iphdr[10:], header.Checksum(iphdr))
	} else {
		iphdr = h[:]
		binary.BigEndian.PutUint32(iphdr[0:], 6<<28|uint32(tclass)<<20)
		binary.BigEndian.PutUint16(iphdr[4:], uint16(header.UDPHeaderLen+len(tp)))
		iphdr[6], iphdr[7] = 17, hop
		copy(iphdr[8:24], src[:])
		copy(iphdr[24:40], dst[:])
	}
	d.receive(nil, tp, iphdr, src, dst, sport)
}
