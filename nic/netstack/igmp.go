package netstack

import (
	"net/netip"
	"time"

	"github.com/vrnic/vrnicd/header"
	"github.com/vrnic/vrnicd/nic/link"
)

// IGMP in TAP mode: IGMPv3 reports (RFC 3376) with IGMPv2 (RFC 2236)
// compatibility when a v1/v2 querier is heard.

const ipProtoIGMP = 2

// IGMP message types.
const (
	igmpQuery    = 0x11
	igmpV1Report = 0x12
	igmpV2Report = 0x16
	igmpV2Leave  = 0x17
	igmpV3Report = 0x22
)

var (
	allSystems    = netip.AddrFrom4([4]byte{224, 0, 0, 1})
	allRouters4   = netip.AddrFrom4([4]byte{224, 0, 0, 2})
	igmpv3Routers = netip.AddrFrom4([4]byte{224, 0, 0, 22})
)

// igmpIPHeaderLen: a 20-byte header plus the 4-byte Router Alert option
// every IGMP message carries (RFC 2113; RFC 3376 §4, RFC 2236 §2).
const igmpIPHeaderLen = header.IPv4HeaderLen + 4

// igmpFrame builds Ethernet + IPv4 (TTL 1, Router Alert, TOS 0xc0 as
// Linux) around an IGMP message of n bytes to dst, and returns the frame
// and the message slice. The source is one of our IPv4 addresses, or
// 0.0.0.0 when we have none (RFC 3376 §4.2.13 allows it).
func (s *Stack) igmpFrame(dst netip.Addr, n int) ([]byte, []byte) {
	f := make([]byte, link.EthernetHeaderLen+igmpIPHeaderLen+n)
	s.ethHeader(f, multicastMAC(dst), header.EtherTypeIPv4)
	ip := header.IPv4(f[link.EthernetHeaderLen:])
	src := netip.IPv4Unspecified()
	for _, a := range s.addrs.Load().list {
		if a.Is4() {
			src = a
			break
		}
	}
	ip.Encode(&header.IPv4Fields{TOS: 0xc0, TotalLen: uint16(igmpIPHeaderLen + n), Flags: header.IPv4DontFragment,
		TTL: 1, Protocol: ipProtoIGMP, Src: src.As4(), Dst: dst.As4()})
	ip[0] = 4<<4 | igmpIPHeaderLen/4
	copy(ip[header.IPv4HeaderLen:], []byte{0x94, 0x04, 0, 0}) // Router Alert: every router examines it
	ip.UpdateChecksum()
	return f, f[link.EthernetHeaderLen+igmpIPHeaderLen:]
}

// igmpv3Frames packs records into as few IGMPv3 reports to 224.0.0.22 as
// the MTU allows (8 bytes a record: no sources).
func (s *Stack) igmpv3Frames(recs []record) [][]byte {
	per := max((s.link.MTU()-igmpIPHeaderLen-8)/8, 1)
	var frames [][]byte
	for len(recs) > 0 {
		chunk := recs[:min(per, len(recs))]
		recs = recs[len(chunk):]
		f, m := s.igmpFrame(igmpv3Routers, 8+8*len(chunk))
		m[0] = igmpV3Report
		be.PutUint16(m[6:], uint16(len(chunk)))
		for i, r := range chunk {
			rec := m[8+8*i:]
			rec[0] = r.typ // aux data length and source count stay 0
			a := r.g.As4()
			copy(rec[4:8], a[:])
		}
		be.PutUint16(m[2:], header.Checksum(m))
		frames = append(frames, f)
	}
	s.ctr.IGMPReportsOut.Add(uint64(len(frames)))
	return frames
}

// igmpv2Frames turns records into IGMPv2 messages: a report to the group
// for a join or current state, a leave to all-routers for a leave. v1:
// IGMPv1 reports, and no leaves, which v1 does not have (RFC 3376 §7.2.1).
func (s *Stack) igmpv2Frames(recs []record, v1 bool) [][]byte {
	frames := make([][]byte, 0, len(recs))
	for _, r := range recs {
		typ, dst := uint8(igmpV2Report), r.g
		switch {
		case r.typ == recToInclude && v1:
			continue
		case r.typ == recToInclude:
			typ, dst = igmpV2Leave, allRouters4
		case v1:
			typ = igmpV1Report
		}
		f, m := s.igmpFrame(dst, 8)
		m[0] = typ
		a := r.g.As4()
		copy(m[4:8], a[:])
		be.PutUint16(m[2:], header.Checksum(m))
		frames = append(frames, f)
	}
	s.ctr.IGMPReportsOut.Add(uint64(len(frames)))
	return frames
}

// igmpInput handles an IGMP message to a multicast address (TAP mode):
// queries are answered, other hosts' reports ignored, anything malformed
// counted. msg is the IGMP message, the IP datagram's payload.
func (s *Stack) igmpInput(msg []byte, dst netip.Addr) {
	if len(msg) < 8 || header.Checksum(msg) != 0 {
		s.ctr.Malformed.Add(1)
		return
	}
	switch msg[0] {
	case igmpQuery:
	case igmpV1Report, igmpV2Report:
		if g := netip.AddrFrom4([4]byte(msg[4:8])); g == dst {
			s.reportHeard(g)
		}
		s.ctr.NonRoCE.Add(1)
		return
	default: // leaves, v3 reports: other members' business
		s.ctr.NonRoCE.Add(1)
		return
	}
	group, maxResp, ver, ok := parseIGMPQuery(msg)
	if !ok || (group.IsValid() && !group.IsMulticast()) {
		s.ctr.Malformed.Add(1)
		return
	}
	if (!group.IsValid() && dst != allSystems) || (group.IsValid() && dst != group) {
		s.ctr.NonRoCE.Add(1) // RFC 3376 §4.1.12: general to all-systems, specific to the group
		return
	}
	m := s.mc
	m.mu.Lock()
	s.queryLocked(&m.v4, s.clock.Now(), group, maxResp, ver)
	m.mu.Unlock()
	s.ctr.IGMPQueriesIn.Add(1)
}

// parseIGMPQuery reads a membership query (RFC 3376 §7.1: its version is
// told by its length and Max Resp Code). group is invalid for a general
// query. A v3 query's sources are checked to
// fit and otherwise ignored: a group-and-source-specific query is answered
// as group-specific (our state has no sources, so IS_EX {} is the answer
// for any source list).
func parseIGMPQuery(msg []byte) (group netip.Addr, maxResp time.Duration, ver querierVersion, ok bool) {
	code := msg[1]
	if a := [4]byte(msg[4:8]); a != [4]byte{} {
		group = netip.AddrFrom4(a)
	}
	switch {
	case len(msg) == 8 && code == 0: // IGMPv1: 10 s (RFC 2236 §4)
		return group, 10 * time.Second, querierV1, true
	case len(msg) == 8:
		return group, time.Duration(code) * 100 * time.Millisecond, querierOlder, true
	case len(msg) < 12:
		return group, 0, 0, false
	}
	if n := int(be.Uint16(msg[10:])); len(msg) < 12+4*n {
		return group, 0, 0, false
	}
	return group, igmpMaxResp(code), querierV3, true
}

// igmpMaxResp decodes an IGMPv3 Max Resp Code (RFC 3376 §4.1.1), in
// tenths of a second, with the floating-point form from 128 up.
func igmpMaxResp(code uint8) time.Duration {
	v := uint32(code)
	if code >= 128 {
		v = (uint32(code&0x0f) | 0x10) << ((code>>4)&7 + 3)
	}
	return time.Duration(v) * 100 * time.Millisecond
}
