package netstack

import (
	"net/netip"
	"time"

	"github.com/vrnic/vrnicd/header"
	"github.com/vrnic/vrnicd/nic/link"
)

// MLD in TAP mode: MLDv2 reports (RFC 3810) with MLDv1 (RFC 2710)
// compatibility when a v1 querier is heard. Messages go from the
// link-local address with hop limit 1 and a Hop-by-Hop Router Alert.

// MLD message types (ICMPv6).
const (
	mldQuery    = 130
	mldV1Report = 131
	mldV1Done   = 132
	mldV2Report = 143
)

const ipProtoHopByHop = 0

var (
	allRouters6   = netip.MustParseAddr("ff02::2")
	mldv2Routers  = netip.MustParseAddr("ff02::16")
	hopByHopAlert = [8]byte{header.IPProtoICMPv6, 0, 5, 2, 0, 0, 1, 0} // Router Alert (MLD), PadN
)

// mldFrame builds Ethernet + IPv6 + Hop-by-Hop Router Alert around an
// MLD message of n bytes to dst, and returns the frame, the message and
// its source (for the checksum).
func (s *Stack) mldFrame(dst netip.Addr, n int) ([]byte, header.ICMPv6, netip.Addr) {
	const hbh = len(hopByHopAlert)
	f := make([]byte, link.EthernetHeaderLen+header.IPv6HeaderLen+hbh+n)
	s.ethHeader(f, multicastMAC(dst), header.EtherTypeIPv6)
	src := s.addrs.Load().list[0] // the link-local address, always first (RFC 3810 §5)
	ip := f[link.EthernetHeaderLen:]
	header.IPv6(ip).Encode(&header.IPv6Fields{PayloadLen: uint16(hbh + n), NextHeader: ipProtoHopByHop, HopLimit: 1,
		Src: src.As16(), Dst: dst.As16()})
	copy(ip[header.IPv6HeaderLen:], hopByHopAlert[:])
	return f, header.ICMPv6(ip[header.IPv6HeaderLen+hbh:]), src
}

// mldv2Frames packs records into as few MLDv2 reports to ff02::16 as the
// MTU allows (20 bytes a record: no sources).
func (s *Stack) mldv2Frames(recs []record) [][]byte {
	per := max((s.link.MTU()-header.IPv6HeaderLen-len(hopByHopAlert)-8)/20, 1)
	var frames [][]byte
	for len(recs) > 0 {
		chunk := recs[:min(per, len(recs))]
		recs = recs[len(chunk):]
		f, m, src := s.mldFrame(mldv2Routers, 8+20*len(chunk))
		m[0] = mldV2Report
		be.PutUint16(m[6:], uint16(len(chunk)))
		for i, r := range chunk {
			rec := m[8+20*i:]
			rec[0] = r.typ
			a := r.g.As16()
			copy(rec[4:20], a[:])
		}
		m.UpdateChecksum(src, mldv2Routers)
		frames = append(frames, f)
	}
	s.ctr.MLDReportsOut.Add(uint64(len(frames)))
	return frames
}

// mldv1Frames turns records into MLDv1 messages: a report to the group
// for a join or current state, a done to all-routers for a leave.
func (s *Stack) mldv1Frames(recs []record) [][]byte {
	frames := make([][]byte, 0, len(recs))
	for _, r := range recs {
		typ, dst := uint8(mldV1Report), r.g
		if r.typ == recToInclude {
			typ, dst = mldV1Done, allRouters6
		}
		f, m, src := s.mldFrame(dst, 24)
		m[0] = typ
		a := r.g.As16()
		copy(m[8:24], a[:])
		m.UpdateChecksum(src, dst)
		frames = append(frames, f)
	}
	s.ctr.MLDReportsOut.Add(uint64(len(frames)))
	return frames
}

// hopByHopInput handles an IPv6 packet whose first header is Hop-by-Hop
// options (TAP mode): MLD messages carry one. ip ends where the packet
// does.
func (s *Stack) hopByHopInput(ip header.IPv6, src, dst netip.Addr) {
	ext := ip[header.IPv6HeaderLen:]
	if len(ext) < 8 || len(ext) < (int(ext[1])+1)*8 {
		s.ctr.Malformed.Add(1)
		return
	}
	next, m := ext[0], header.ICMPv6(ext[(int(ext[1])+1)*8:])
	if next != header.IPProtoICMPv6 || !dst.IsMulticast() {
		s.ctr.NonRoCE.Add(1)
		return
	}
	if len(m) < 4 || !m.ChecksumValid(src, dst) {
		s.ctr.Malformed.Add(1)
		return
	}
	s.mldInput(m, src, dst)
}

// mldInput handles an MLD message (checksum checked): queries are
// answered, other listeners' MLDv1 reports suppress ours, the rest is
// other listeners' business.
func (s *Stack) mldInput(m header.ICMPv6, src, dst netip.Addr) {
	switch m.Type() {
	case mldQuery:
		s.mldQueryInput(m, src, dst)
	case mldV1Report:
		if len(m) >= 24 && netip.AddrFrom16([16]byte(m[8:24])) == dst {
			s.reportHeard(dst)
		}
		s.ctr.NonRoCE.Add(1)
	default:
		s.ctr.NonRoCE.Add(1)
	}
}

// mldQueryInput answers an MLD query (checksum already checked). RFC 3810
// §5.1.14: queries from a source that is not link-local are dropped.
func (s *Stack) mldQueryInput(m header.ICMPv6, src, dst netip.Addr) {
	group, maxResp, ver, ok := parseMLDQuery(m)
	if !ok || !src.IsLinkLocalUnicast() || (group.IsValid() && !group.IsMulticast()) {
		s.ctr.Malformed.Add(1)
		return
	}
	if (!group.IsValid() && dst != allNodes) || (group.IsValid() && dst != group) {
		s.ctr.NonRoCE.Add(1)
		return
	}
	mc := s.mc
	mc.mu.Lock()
	s.queryLocked(&mc.v6, s.clock.Now(), group, maxResp, ver)
	mc.mu.Unlock()
	s.ctr.MLDQueriesIn.Add(1)
}

// parseMLDQuery reads a multicast listener query: 24 bytes is MLDv1, 28
// and more MLDv2 (RFC 3810 §8.1). group is invalid for a general query.
// Sources are checked to fit and otherwise ignored, as for IGMP.
func parseMLDQuery(m []byte) (group netip.Addr, maxResp time.Duration, ver querierVersion, ok bool) {
	if len(m) < 24 {
		return group, 0, 0, false
	}
	code := be.Uint16(m[4:])
	if a := [16]byte(m[8:24]); a != [16]byte{} {
		group = netip.AddrFrom16(a)
	}
	switch {
	case len(m) == 24:
		return group, time.Duration(code) * time.Millisecond, querierOlder, true
	case len(m) < 28:
		return group, 0, 0, false
	}
	if n := int(be.Uint16(m[26:])); len(m) < 28+16*n {
		return group, 0, 0, false
	}
	return group, mldMaxResp(code), querierV3, true
}

// mldMaxResp decodes an MLDv2 Maximum Response Code (RFC 3810 §5.1.3), in
// milliseconds, with the floating-point form from 32768 up.
func mldMaxResp(code uint16) time.Duration {
	v := uint32(code)
	if code >= 0x8000 {
		v = (uint32(code&0x0fff) | 0x1000) << ((code>>12)&7 + 3)
	}
	return time.Duration(v) * time.Millisecond
}
