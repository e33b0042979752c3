package netstack

import (
	"net/netip"

	"github.com/vrnic/vrnicd/nic/link"
)

// Control plane of TAP mode: ARP, IPv6 neighbour discovery, echo.

const minFrame = 60 // Ethernet minimum without FCS

var broadcastMAC = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

func (s *Stack) ethHeader(f []byte, dst [6]byte, etype uint16) {
	copy(f[0:6], dst[:])
	copy(f[6:12], s.mac[:])
	be.PutUint16(f[12:], etype)
}

// arpInput handles an ARP packet (RFC 826, with Linux's learning rules).
func (s *Stack) arpInput(f []byte) {
	a := f[link.EthernetHeaderLen:]
	if len(a) < 28 || be.Uint16(a[0:]) != 1 || be.Uint16(a[2:]) != 0x0800 || a[4] != 6 || a[5] != 4 {
		s.ctr.Malformed.Add(1)
		return
	}
	op := be.Uint16(a[6:])
	sha := [6]byte(a[8:14])
	spa := netip.AddrFrom4([4]byte(a[14:18]))
	tpa := netip.AddrFrom4([4]byte(a[24:28]))
	if sha[0]&1 != 0 || sha == s.mac {
		s.ctr.Malformed.Add(1)
		return
	}
	set := s.addrs.Load()
	mine := set.has(tpa)
	learn := spa.IsValid() && !spa.IsUnspecified() && !set.has(spa)
	switch op {
	case 1:
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
		s.ethHeader(r, sha, 0x0806)
		p := r[link.EthernetHeaderLen:]
		be.PutUint16(p[0:], 1)
		be.PutUint16(p[2:], 0x0800)
		p[4], p[5] = 6, 4
		be.PutUint16(p[6:], 2)
		copy(p[8:14], s.mac[:])
		copy(p[14:18], a[24:28]) // the address asked for
		copy(p[18:24], sha[:])
		copy(p[24:28], a[14:18])
		s.write(r)
		s.ctr.ARPRepliesOut.Add(1)
	case 2:
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
	m := ip[ihl:]
	if len(m) < 8 {
		s.ctr.Malformed.Add(1)
		return
	}
	if Checksum(m) != 0 {
		s.ctr.BadICMPChecksum.Add(1)
		return
	}
	if m[0] != 8 || m[1] != 0 {
		s.ctr.NonRoCE.Add(1)
		return
	}
	m[0] = 0
	m[2], m[3] = 0, 0
	be.PutUint16(m[2:], Checksum(m))
	var a [4]byte
	copy(a[:], ip[12:16])
	copy(ip[12:16], ip[16:20])
	copy(ip[16:20], a[:])
	ip[8] = 64
	ip[10], ip[11] = 0, 0
	be.PutUint16(ip[10:], Checksum(ip[:ihl]))
	s.ethHeader(f, [6]byte(f[6:12]), 0x0800)
	s.write(f)
	s.ctr.EchoReplies.Add(1)
}

// ndOption finds a link-layer address option (1 source, 2 target) in ND
// options; bad is set for a zero-length option (RFC 4861 says drop).
func ndOption(opts []byte, typ byte) (mac [6]byte, found, bad bool) {
	for len(opts) > 0 {
		if len(opts) < 2 || opts[1] == 0 || int(opts[1])*8 > len(opts) {
			return mac, false, true
		}
		l := int(opts[1]) * 8
		if opts[0] == typ && l >= 8 {
			copy(mac[:], opts[2:8])
			found = true
		}
		opts = opts[l:]
	}
	return mac, found, false
}

// icmp6Input handles echo, NS and NA. mine says dst is one of our unicast
// addresses (else it is multicast).
func (s *Stack) icmp6Input(f, ip []byte, src, dst netip.Addr, mine bool) {
	m := ip[40:]
	if len(m) < 4 {
		s.ctr.Malformed.Add(1)
		return
	}
	if l4Checksum(src, dst, 58, m) != 0 {
		s.ctr.BadICMPChecksum.Add(1)
		return
	}
	set := s.addrs.Load()
	switch m[0] {
	case 128: // echo request
		if !mine || m[1] != 0 || len(m) < 8 {
			s.ctr.NonRoCE.Add(1)
			return
		}
		m[0] = 129
		copy(ip[8:24], ip[24:40])
		s16 := src.As16()
		copy(ip[24:40], s16[:])
		ip[7] = 64
		m[2], m[3] = 0, 0
		be.PutUint16(m[2:], l4Checksum(dst, src, 58, m))
		s.ethHeader(f, [6]byte(f[6:12]), 0x86dd)
		s.write(f)
		s.ctr.EchoReplies.Add(1)
	case 135: // neighbour solicitation
		if ip[7] != 255 || m[1] != 0 || len(m) < 24 {
			s.ctr.Malformed.Add(1)
			return
		}
		target := netip.AddrFrom16([16]byte(m[8:24]))
		if target.IsMulticast() {
			s.ctr.Malformed.Add(1)
			return
		}
		if !set.has(target) {
			s.ctr.NonRoCE.Add(1)
			return
		}
		sll, hasSLL, bad := ndOption(m[24:], 1)
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
	case 136: // neighbour advertisement
		if ip[7] != 255 || m[1] != 0 || len(m) < 24 {
			s.ctr.Malformed.Add(1)
			return
		}
		target := netip.AddrFrom16([16]byte(m[8:24]))
		tll, hasTLL, bad := ndOption(m[24:], 2)
		if bad || target.IsMulticast() {
			s.ctr.Malformed.Add(1)
			return
		}
		s.ctr.NDAdvertsIn.Add(1)
		if !hasTLL || tll[0]&1 != 0 || set.has(target) {
			return
		}
		if m[4]&0x40 != 0 { // solicited: reachability confirmed
			s.neigh.confirm(target, tll, false)
		} else {
			s.neigh.setState(target, tll, nStale, false)
		}
	default:
		s.ctr.NonRoCE.Add(1)
	}
}

var allNodes = netip.MustParseAddr("ff02::1")

func solicitedNode(a netip.Addr) netip.Addr {
	b := a.As16()
	return netip.AddrFrom16([16]byte{0xff, 0x02, 11: 0x01, 12: 0xff, 13: b[13], 14: b[14], 15: b[15]})
}

// icmp6Frame builds an Ethernet+IPv6 frame around an ICMPv6 message of
// length n (hop limit 255, for ND) and returns it and the message slice.
func (s *Stack) icmp6Frame(src, dst netip.Addr, mac [6]byte, n int) ([]byte, []byte) {
	f := make([]byte, max(link.EthernetHeaderLen+40+n, minFrame))
	s.ethHeader(f, mac, 0x86dd)
	ip := f[link.EthernetHeaderLen:]
	ip[0] = 0x60
	be.PutUint16(ip[4:], uint16(n))
	ip[6] = 58
	ip[7] = 255
	a, b := src.As16(), dst.As16()
	copy(ip[8:24], a[:])
	copy(ip[24:40], b[:])
	return f[:link.EthernetHeaderLen+40+n], ip[40 : 40+n]
}

// sendNA advertises target (ours) to dst with our MAC as the target
// link-layer address, override set.
func (s *Stack) sendNA(target, dst netip.Addr, mac [6]byte, solicited bool) {
	f, m := s.icmp6Frame(target, dst, mac, 32)
	m[0] = 136
	m[4] = 0x20 // O
	if solicited {
		m[4] |= 0x40 // S
	}
	t := target.As16()
	copy(m[8:24], t[:])
	m[24], m[25] = 2, 1
	copy(m[26:32], s.mac[:])
	be.PutUint16(m[2:], l4Checksum(target, dst, 58, m))
	s.write(f)
	s.ctr.NDAdvertsOut.Add(1)
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
		s.write(f)
		s.ctr.ARPRequestsOut.Add(1)
		return
	}
	dst, mac := solicitedNode(p.ip), multicastMAC(solicitedNode(p.ip))
	if p.unicast {
		dst, mac = p.ip, p.mac
	}
	f, m := s.icmp6Frame(src, dst, mac, 32)
	m[0] = 135
	t := p.ip.As16()
	copy(m[8:24], t[:])
	m[24], m[25] = 1, 1
	copy(m[26:32], s.mac[:])
	be.PutUint16(m[2:], l4Checksum(src, dst, 58, m))
	s.write(f)
	s.ctr.NDSolicitsOut.Add(1)
}

func (s *Stack) arpRequest(f []byte, to [6]byte, spa, tpa netip.Addr) {
	s.ethHeader(f, to, 0x0806)
	p := f[link.EthernetHeaderLen:]
	be.PutUint16(p[0:], 1)
	be.PutUint16(p[2:], 0x0800)
	p[4], p[5] = 6, 4
	be.PutUint16(p[6:], 1)
	copy(p[8:14], s.mac[:])
	a, b := spa.As4(), tpa.As4()
	copy(p[14:18], a[:])
	clear(p[18:24])
	copy(p[24:28], b[:])
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
			s.write(f)
			s.ctr.ARPRequestsOut.Add(1)
		} else {
			s.sendNA(a, allNodes, multicastMAC(allNodes), false)
		}
	}
}
