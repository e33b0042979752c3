package netstack

import (
	"encoding/binary"
	"net/netip"

	"github.com/vrnic/vrnicd/header"
	"github.com/vrnic/vrnicd/nic/link"
	"github.com/vrnic/vrnicd/transport/wire"
)

// RxPacket is one received RoCEv2 packet that passed every link-layer check:
// addressed to one of our MACs/addresses, well-formed IP and UDP, correct IPv4
// header checksum, correct UDP checksum when non-zero, correct ICRC.
//
// Ownership: every slice aliases the Run loop's receive buffer. It is valid
// only until the Deliver call that carries it returns; the buffer is then
// reused for the next read. A receiver that needs bytes later (e.g. a UD
// payload or GRH for a receive WQE) copies them before returning.
type RxPacket struct {
	Frame     []byte // the whole Ethernet frame (without padding)
	IPHeader  []byte // 20 (IPv4) or 40 (IPv6) bytes, for the UD GRH
	Transport []byte // the UDP payload: BTH through ICRC
	Src, Dst  netip.Addr
	SrcPort   uint16
	// TrafficClass (IPv4 TOS), HopLimit (TTL) and FlowLabel (IPv6) as
	// received.
	TrafficClass uint8
	HopLimit     uint8
	FlowLabel    uint32

	dup bool // an impairment duplicates it: delivered twice (impair.go)
}

// SrcGID and DstGID are the packet's addresses as 16-byte GIDs.
func (p *RxPacket) SrcGID() [16]byte { return p.Src.As16() }
func (p *RxPacket) DstGID() [16]byte { return p.Dst.As16() }

var be = binary.BigEndian

// input handles one frame; it returns a RoCE packet to deliver, or false
// when the frame was consumed (control traffic) or dropped (counted).
func (s *Stack) input(f []byte) (RxPacket, bool) {
	if len(f) < link.EthernetHeaderLen {
		s.ctr.Malformed.Add(1)
		return RxPacket{}, false
	}
	if f[0]&1 == 0 && [6]byte(f[0:6]) != s.mac {
		s.ctr.NotForUs.Add(1)
		return RxPacket{}, false
	}
	switch be.Uint16(f[12:]) {
	case header.EtherTypeARP:
		if s.cfg.Mode == ModeTAP {
			s.arpInput(f)
			return RxPacket{}, false
		}
	case header.EtherTypeIPv4:
		return s.ipv4Input(f)
	case header.EtherTypeIPv6:
		return s.ipv6Input(f)
	}
	s.ctr.NonRoCE.Add(1)
	return RxPacket{}, false
}

func (s *Stack) ipv4Input(f []byte) (RxPacket, bool) {
	ip := header.IPv4(f[link.EthernetHeaderLen:])
	if len(ip) < header.IPv4HeaderLen || ip.Version() != 4 {
		s.ctr.Malformed.Add(1)
		return RxPacket{}, false
	}
	ihl := ip.HeaderLen()
	tot := int(ip.TotalLen())
	if ihl < header.IPv4HeaderLen || tot < ihl || tot > len(ip) {
		s.ctr.Malformed.Add(1)
		return RxPacket{}, false
	}
	ip = ip[:tot] // drop Ethernet padding
	if !ip.ChecksumValid() {
		s.ctr.BadIPChecksum.Add(1)
		return RxPacket{}, false
	}
	src, dst := ip.Src(), ip.Dst()
	if !s.addrs.Load().has(dst) && !dst.IsMulticast() {
		if dst == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
			s.ctr.NonRoCE.Add(1)
		} else {
			s.ctr.NotForUs.Add(1)
		}
		return RxPacket{}, false
	}
	if ip.Flags()&(header.IPv4MoreFragments|header.IPv4FragOffset) != 0 {
		s.ctr.Fragments.Add(1)
		return RxPacket{}, false
	}
	if dst.IsMulticast() {
		return s.ipv4Multicast(f[:link.EthernetHeaderLen+tot], ip, ihl, src, dst)
	}
	switch ip.Protocol() {
	case header.IPProtoUDP:
		if ihl != header.IPv4HeaderLen {
			// The ICRC cannot cover options; rxe never sends them.
			s.ctr.Malformed.Add(1)
			return RxPacket{}, false
		}
		return s.udpInput(f[:link.EthernetHeaderLen+tot], ip, ihl, src, dst, ip.TOS(), ip.TTL(), 0)
	case header.IPProtoICMP:
		if s.cfg.Mode == ModeTAP {
			s.icmp4Input(f[:link.EthernetHeaderLen+tot], ip, ihl)
			return RxPacket{}, false
		}
	}
	s.ctr.NonRoCE.Add(1)
	return RxPacket{}, false
}

// ipv4Multicast handles a datagram to a multicast group: RoCEv2 to a
// joined group as to our own address, IGMP queries (TAP mode), the rest
// counted.
func (s *Stack) ipv4Multicast(f []byte, ip header.IPv4, ihl int, src, dst netip.Addr) (RxPacket, bool) {
	switch ip.Protocol() {
	case header.IPProtoUDP:
		if !s.mcastUDP(ip[ihl:], dst) {
			return RxPacket{}, false
		}
		if ihl != header.IPv4HeaderLen {
			s.ctr.Malformed.Add(1)
			return RxPacket{}, false
		}
		return s.udpInput(f, ip, ihl, src, dst, ip.TOS(), ip.TTL(), 0)
	case ipProtoIGMP:
		if s.cfg.Mode == ModeTAP {
			s.igmpInput(ip[ihl:], dst)
			return RxPacket{}, false
		}
	}
	s.ctr.NonRoCE.Add(1)
	return RxPacket{}, false
}

// mcastUDP says whether a UDP datagram to multicast dst goes on to
// udpInput: only to a joined group. RoCEv2 to another group is counted
// (mcast_not_joined), other UDP is not RoCE.
func (s *Stack) mcastUDP(udp []byte, dst netip.Addr) bool {
	if s.mc.joined(dst) {
		return true
	}
	if len(udp) >= header.UDPHeaderLen && header.UDP(udp).DstPort() == RoCEPort {
		s.ctr.McastNotJoined.Add(1)
	} else {
		s.ctr.NonRoCE.Add(1)
	}
	return false
}

func (s *Stack) ipv6Input(f []byte) (RxPacket, bool) {
	ip := header.IPv6(f[link.EthernetHeaderLen:])
	if len(ip) < header.IPv6HeaderLen || ip.Version() != 6 {
		s.ctr.Malformed.Add(1)
		return RxPacket{}, false
	}
	plen := int(ip.PayloadLen())
	if header.IPv6HeaderLen+plen > len(ip) {
		s.ctr.Malformed.Add(1)
		return RxPacket{}, false
	}
	ip = ip[:header.IPv6HeaderLen+plen]
	f = f[:link.EthernetHeaderLen+len(ip)]
	src, dst := ip.Src(), ip.Dst()
	mine := s.addrs.Load().has(dst)
	switch ip.NextHeader() {
	case header.IPProtoUDP:
		if mine || (dst.IsMulticast() && s.mcastUDP(ip[header.IPv6HeaderLen:], dst)) {
			return s.udpInput(f, ip, header.IPv6HeaderLen, src, dst, ip.TrafficClass(), ip.HopLimit(), ip.FlowLabel())
		}
		if dst.IsMulticast() {
			return RxPacket{}, false // counted by mcastUDP
		}
	case header.IPProtoICMPv6:
		if s.cfg.Mode == ModeTAP && (mine || dst.IsMulticast()) {
			s.icmp6Input(f, ip, src, dst, mine)
			return RxPacket{}, false
		}
	case ipProtoHopByHop:
		if s.cfg.Mode == ModeTAP && dst.IsMulticast() {
			s.hopByHopInput(ip, src, dst) // MLD
			return RxPacket{}, false
		}
	}
	if !mine && !dst.IsMulticast() {
		s.ctr.NotForUs.Add(1)
	} else {
		s.ctr.NonRoCE.Add(1)
	}
	return RxPacket{}, false
}

// udpInput checks a UDP datagram to one of our addresses (or a joined
// group) and returns it if it is a good RoCEv2 packet. ip ends where the
// datagram ends.
func (s *Stack) udpInput(f, ip []byte, ihl int, src, dst netip.Addr, tc, hop uint8, flow uint32) (RxPacket, bool) {
	udp := header.UDP(ip[ihl:])
	if len(udp) < header.UDPHeaderLen || int(udp.Length()) != len(udp) {
		s.ctr.Malformed.Add(1)
		return RxPacket{}, false
	}
	if udp.DstPort() != RoCEPort {
		s.ctr.NonRoCE.Add(1)
		return RxPacket{}, false
	}
	if s.cfg.Tap != nil {
		_ = s.cfg.Tap.WriteFrame(f)
	}
	drop, dup := s.rxVerdict(udp[header.UDPHeaderLen:])
	if drop {
		return RxPacket{}, false
	}
	// A zero checksum means none (IPv4; IPv6 too, as rxe's tunnel socket
	// sets no_check6_rx).
	if udp.Checksum() != 0 && header.L4Checksum(src, dst, header.IPProtoUDP, udp) != 0 {
		s.ctr.BadUDPChecksum.Add(1)
		return RxPacket{}, false
	}
	if len(udp) < header.UDPHeaderLen+wire.BTHLen+wire.ICRCLen {
		s.ctr.Malformed.Add(1)
		return RxPacket{}, false
	}
	if wire.VerifyICRC(ip) != nil {
		s.ctr.ICRCErrors.Add(1)
		return RxPacket{}, false
	}
	s.ctr.RoCEIn.Add(1)
	return RxPacket{
		Frame:        f,
		IPHeader:     ip[:ihl:ihl],
		Transport:    udp[header.UDPHeaderLen:],
		Src:          src,
		Dst:          dst,
		SrcPort:      udp.SrcPort(),
		TrafficClass: tc,
		HopLimit:     hop,
		FlowLabel:    flow,
		dup:          dup,
	}, true
}
