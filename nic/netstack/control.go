package netstack

import (
	"net/netip"

	"github.com/vrnic/vrnicd/header"
	"github.com/vrnic/vrnicd/nic/link"
)

// Control plane of TAP mode: ARP, IPv6 neighbour discovery, echo.

const minFrame = 60 // Ethernet minimum without FCS

var broadcastMAC = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

func (s *Stack) ethHeader(f []byte, dst [6]byte, etype uint16) {
	header.Ethernet(f).Encode(dst, s.mac, etype)
}

// arpInput handles an ARP packet (RFC 826, with Linux's learning rules).
func (s *Stack) arpInput(f []byte) {
	a := header.ARP(f[link.EthernetHeaderLen:])
	if !a.IsIPv4OverEthernet() {
		s.ctr.Malformed.Add(1)
		return
	}
	sha, spa, tpa := a.SenderMAC(), a.SenderIP(), a.TargetIP()
	if sha[0]&1 != 0 || sha == s.mac {
		s.ctr.Malformed.Add(1)
		return
	}
	set := s.addrs.Load()
	mine := set.has(tpa)
	learn := spa.IsValid() && !spa.IsUnspecified() && !set.has(spa)
	switch a.Op() {
	case header.ARPRequest:
		if !mine {
			if learn { // refresh an existing entry only
				s.neigh.setState(spa, sha, nStale, false)
			}
			s.ctr.NonRoCE.Add(1)
			return
		}
		s.ctr.ARPRequestsIn.Add(1)
		if learn {
			s.neigh.setState(spa, sha, nStale, true)
		}
		r := make([]byte, minFrame)
		s.ethHeader(r, sha, header.EtherTypeARP)
		header.ARP(r[link.EthernetHeaderLen:]).Encode(&header.ARPFields{Op: header.ARPReply,
			SenderMAC: s.mac, SenderIP: tpa.As4(), // the address asked for
			TargetMAC: sha, TargetIP: spa.As4()})
		s.ctr.ARPRepliesOut.Add(1)
		s.write(r)
	case header.ARPReply:
		s.ctr.ARPRepliesIn.Add(1)
		if learn {
			s.neigh.confirm(spa, sha, false)
		}
	default:
		s.ctr.Malformed.Add(1)
	}
}

// icmp4Input answers echo requests in place.
func (s *Stack) icmp4Input(f, ip []byte, ihl int) {
	m := header.ICMPv4(ip[ihl:])
	if len(m) < header.ICMPHeaderLen {
		s.ctr.Malformed.Add(1)
		return
	}
	if header.Checksum(m) != 0 {
		s.ctr.BadICMPChecksum.Add(1)
		return
	}
	if m.Type() != header.ICMPv4EchoRequest || m.Code() != 0 {
		s.ctr.NonRoCE.Add(1)
		return
	}
	m.SetType(header.ICMPv4EchoReply)
	m.UpdateChecksum()
	h := header.IPv4(ip)
	src, dst := h.Src(), h.Dst()
	h.SetSrc(dst.As4())
	h.SetDst(src.As4())
	h.SetTTL(64)
	h.UpdateChecksum()
	s.ethHeader(f, [6]byte(f[6:12]), header.EtherTypeIPv4)
	s.ctr.EchoReplies.Add(1)
	s.write(f)
}

// icmp6Input handles echo, NS and NA. mine says dst is one of our unicast
// addresses (else it is multicast).
func (s *Stack) icmp6Input(f, ip []byte, src, dst netip.Addr, mine bool) {
	h := header.IPv6(ip)
	m := header.ICMPv6(ip[header.IPv6HeaderLen:])
	if len(m) < 4 {
		s.ctr.Malformed.Add(1)
		return
	}
	if !m.ChecksumValid(src, dst) {
		s.ctr.BadICMPChecksum.Add(1)
		return
	}
	switch m.Type() {
	case header.ICMPv6EchoRequest:
		if !mine || m.Code() != 0 || len(m) < header.ICMPHeaderLen {
			s.ctr.NonRoCE.Add(1)
			return
		}
		m.SetType(header.ICMPv6EchoReply)
		h.SetSrc(dst.As16())
		h.SetDst(src.As16())
		h.SetHopLimit(64)
		m.UpdateChecksum(dst, src)
		s.ethHeader(f, [6]byte(f[6:12]), header.EtherTypeIPv6)
		s.ctr.EchoReplies.Add(1)
		s.write(f)
	case header.ICMPv6NeighborSolicit:
		s.nsInput(f, h, m, src, dst)
	case header.ICMPv6NeighborAdvert:
		s.naInput(h, m)
	case mldQuery, mldV1Report: // without the Router Alert they should have; accepted as Linux does
		if !mine {
			s.mldInput(m, src, dst)
			return
		}
		s.ctr.NonRoCE.Add(1)
	default:
		s.ctr.NonRoCE.Add(1)
	}
}

// ndValid checks what RFC 4861 §7.1 requires of every NS and NA: hop limit
// 255 (so it came from the link), code 0, room for the target.
func ndValid(h header.IPv6, m header.ICMPv6) bool {
	return h.HopLimit() == 255 && m.Code() == 0 && len(m) >= header.NDHeaderLen
}

// nsInput answers a neighbour solicitation for one of our addresses
// (RFC 4861 §7.2.3), learning the sender's MAC when it gives one, and
// defends an address another node probes for (duplicate address detection).
func (s *Stack) nsInput(f []byte, h header.IPv6, m header.ICMPv6, src, dst netip.Addr) {
	if !ndValid(h, m) {
		s.ctr.Malformed.Add(1)
		return
	}
	target := m.Target()
	if target.IsMulticast() {
		s.ctr.Malformed.Add(1)
		return
	}
	if !s.addrs.Load().has(target) {
		s.ctr.NonRoCE.Add(1)
		return
	}
	sll, hasSLL, bad := header.NDLinkAddr(m.NDOptions(), header.NDOptSourceLinkAddr)
	if bad || (hasSLL && sll[0]&1 != 0) {
		s.ctr.Malformed.Add(1)
		return
	}
	s.ctr.NDSolicitsIn.Add(1)
	if src.IsUnspecified() {
		// Duplicate address detection by another node: defend.
		if dst != solicitedNode(target) || hasSLL {
			s.ctr.Malformed.Add(1)
			return
		}
		s.sendNA(target, allNodes, multicastMAC(allNodes), false)
		return
	}
	to := [6]byte(f[6:12])
	if hasSLL {
		to = sll
		s.neigh.setState(src, sll, nStale, true)
	}
	s.sendNA(target, src, to, true)
}

// naInput learns a neighbour's MAC from its advertisement (RFC 4861
// §7.2.5): reachable if solicited, else stale.
func (s *Stack) naInput(h header.IPv6, m header.ICMPv6) {
	if !ndValid(h, m) {
		s.ctr.Malformed.Add(1)
		return
	}
	target := m.Target()
	tll, hasTLL, bad := header.NDLinkAddr(m.NDOptions(), header.NDOptTargetLinkAddr)
	if bad || target.IsMulticast() {
		s.ctr.Malformed.Add(1)
		return
	}
	s.ctr.NDAdvertsIn.Add(1)
	if !hasTLL || tll[0]&1 != 0 || s.addrs.Load().has(target) {
		return
	}
	if m.NAFlags()&header.NASolicited != 0 { // reachability confirmed
		s.neigh.confirm(target, tll, false)
	} else {
		s.neigh.setState(target, tll, nStale, false)
	}
}

var allNodes = netip.MustParseAddr("ff02::1")

func solicitedNode(a netip.Addr) netip.Addr {
	b := a.As16()
	return netip.AddrFrom16([16]byte{0xff, 0x02, 11: 0x01, 12: 0xff, 13: b[13], 14: b[14], 15: b[15]})
}

// icmp6Frame builds an Ethernet+IPv6 frame around an ICMPv6 message of
// length n (hop limit 255, for ND) and returns it and the message slice.
func (s *Stack) icmp6Frame(src, dst netip.Addr, mac [6]byte, n int) ([]byte, header.ICMPv6) {
	f := make([]byte, max(link.EthernetHeaderLen+header.IPv6HeaderLen+n, minFrame))
	s.ethHeader(f, mac, header.EtherTypeIPv6)
	ip := f[link.EthernetHeaderLen:]
	header.IPv6(ip).Encode(&header.IPv6Fields{PayloadLen: uint16(n), NextHeader: header.IPProtoICMPv6, HopLimit: 255,
		Src: src.As16(), Dst: dst.As16()})
	return f[:link.EthernetHeaderLen+header.IPv6HeaderLen+n], header.ICMPv6(ip[header.IPv6HeaderLen : header.IPv6HeaderLen+n])
}

// ndLen is the length of the NS and NA this stack sends: the message and
// one link-layer address option.
const ndLen = header.NDHeaderLen + 8

// sendNA advertises target (ours) to dst with our MAC as the target
// link-layer address, override set.
func (s *Stack) sendNA(target, dst netip.Addr, mac [6]byte, solicited bool) {
	f, m := s.icmp6Frame(target, dst, mac, ndLen)
	m.SetType(header.ICMPv6NeighborAdvert)
	flags := uint8(header.NAOverride)
	if solicited {
		flags |= header.NASolicited
	}
	m.SetNAFlags(flags)
	m.SetTarget(target.As16())
	header.PutNDLinkAddr(m.NDOptions(), header.NDOptTargetLinkAddr, s.mac)
	m.UpdateChecksum(target, dst)
	s.ctr.NDAdvertsOut.Add(1)
	s.write(f)
}

// sendSolicit sends an ARP request or an NS for p.ip: broadcast/solicited-
// node multicast for a new entry, unicast to the known MAC for a stale one.
func (s *Stack) sendSolicit(p probe) {
	set := s.addrs.Load()
	src, ok := set.sourceFor(p.ip)
	if !ok {
		return
	}
	if p.ip.Is4() {
		f := make([]byte, minFrame)
		to := broadcastMAC
		if p.unicast {
			to = p.mac
		}
		s.arpRequest(f, to, src, p.ip)
		s.ctr.ARPRequestsOut.Add(1)
		s.write(f)
		return
	}
	dst, mac := solicitedNode(p.ip), multicastMAC(solicitedNode(p.ip))
	if p.unicast {
		dst, mac = p.ip, p.mac
	}
	f, m := s.icmp6Frame(src, dst, mac, ndLen)
	m.SetType(header.ICMPv6NeighborSolicit)
	m.SetTarget(p.ip.As16())
	header.PutNDLinkAddr(m.NDOptions(), header.NDOptSourceLinkAddr, s.mac)
	m.UpdateChecksum(src, dst)
	s.ctr.NDSolicitsOut.Add(1)
	s.write(f)
}

func (s *Stack) arpRequest(f []byte, to [6]byte, spa, tpa netip.Addr) {
	s.ethHeader(f, to, header.EtherTypeARP)
	header.ARP(f[link.EthernetHeaderLen:]).Encode(&header.ARPFields{Op: header.ARPRequest,
		SenderMAC: s.mac, SenderIP: spa.As4(), TargetIP: tpa.As4()})
}

// sourceFor picks our address to solicit ip from: one whose prefix holds
// ip, else any of the family (link-local for link-local targets).
func (s *addrSet) sourceFor(ip netip.Addr) (netip.Addr, bool) {
	for _, p := range s.prefixes {
		if p.Contains(ip) {
			return p.Addr(), true
		}
	}
	return s.source(ip)
}

// announce sends a gratuitous ARP for each IPv4 address and an unsolicited
// NA for each IPv6 one, so peers with stale entries learn our MAC.
func (s *Stack) announce() {
	for _, a := range s.addrs.Load().list {
		if a.Is4() {
			f := make([]byte, minFrame)
			s.arpRequest(f, broadcastMAC, a, a)
			s.ctr.ARPRequestsOut.Add(1)
			s.write(f)
		} else {
			s.sendNA(a, allNodes, multicastMAC(allNodes), false)
		}
	}
}
