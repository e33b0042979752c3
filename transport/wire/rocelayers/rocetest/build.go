package rocetest

import (
	"net/netip"

	"github.com/vrnic/vrnicd/header"
	"github.com/vrnic/vrnicd/transport/wire"
)

// FrameSpec describes one RoCEv2 frame for BuildFrame. Zero fields take
// the defaults their comments give.
type FrameSpec struct {
	DstMAC, SrcMAC [6]byte
	Src, Dst       netip.Addr // both IPv4 or both IPv6; unset: 192.0.2.1 to 192.0.2.2
	V6             bool       // with Src and Dst unset: 2001:db8::1 to 2001:db8::2
	SrcPort        uint16     // unset: 49152
	IPID           uint16     // IPv4's identification
	Packet         wire.PacketFields
}

// BuildFrame builds the Ethernet frame of s as a RoCEv2 NIC puts it on the
// wire (kernel rxe's prepare_ipv4_hdr / prepare_ipv6_hdr): IPv4 with DF
// and TTL 64, or IPv6 with hop limit 64; UDP to 4791 without a checksum;
// the transport packet encoded with wire's field setters, and its ICRC.
// Tests build frames here so that there is one layout to get right.
func BuildFrame(s *FrameSpec) []byte {
	src, dst := s.Src, s.Dst
	if !src.IsValid() {
		src, dst = netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
		if s.V6 {
			src, dst = netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
		}
	}
	sport := s.SrcPort
	if sport == 0 {
		sport = 49152
	}
	tl := s.Packet.EncodedLen()
	if tl == 0 {
		panic("rocetest: BuildFrame of an unknown opcode")
	}
	ipLen, etype := header.IPv4HeaderLen, uint16(header.EtherTypeIPv4)
	if src.Is6() {
		ipLen, etype = header.IPv6HeaderLen, header.EtherTypeIPv6
	}
	f := make([]byte, header.EthernetHeaderLen+ipLen+header.UDPHeaderLen+tl)
	header.Ethernet(f).Encode(s.DstMAC, s.SrcMAC, etype)
	ip := f[header.EthernetHeaderLen:]
	if src.Is6() {
		header.IPv6(ip).Encode(&header.IPv6Fields{PayloadLen: uint16(header.UDPHeaderLen + tl),
			NextHeader: header.IPProtoUDP, HopLimit: 64, Src: src.As16(), Dst: dst.As16()})
	} else {
		header.IPv4(ip).Encode(&header.IPv4Fields{TotalLen: uint16(len(ip)), ID: s.IPID, Flags: header.IPv4DontFragment,
			TTL: 64, Protocol: header.IPProtoUDP, Src: src.As4(), Dst: dst.As4()})
	}
	udp := ip[ipLen:]
	header.UDP(udp).Encode(sport, wire.RoCEv2Port, uint16(header.UDPHeaderLen+tl))
	s.Packet.Encode(udp[header.UDPHeaderLen:])
	if err := wire.PutICRC(ip); err != nil {
		panic("rocetest: " + err.Error()) // the headers above are always RoCEv2's
	}
	return f
}
