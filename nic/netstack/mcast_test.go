package netstack

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/vrnic/vrnicd/header"
	"github.com/vrnic/vrnicd/nic/link/linktest"
	"github.com/vrnic/vrnicd/transport/clock"
)

var (
	group4  = netip.MustParseAddr("239.1.2.3")
	group4b = netip.MustParseAddr("239.1.2.4")
	group6  = netip.MustParseAddr("ff0e::1:2")
	router6 = netip.MustParseAddr("fe80::bb:ff:fe00:99")
)

// igmpQueryFrame is a query from the peer (a router) as RFC 3376 §4.1 /
// RFC 2236 §2 lay it out, with the Router Alert option. v3 false: the
// 8-byte IGMPv2 form (or v1 with code 0).
func igmpQueryFrame(dst, group netip.Addr, code uint8, v3 bool) []byte {
	n := 8
	if v3 {
		n = 12
	}
	f := make([]byte, 14+24+n)
	mac := multicastMAC(dst)
	copy(f[0:6], mac[:])
	copy(f[6:12], peerMAC)
	f[12], f[13] = 0x08, 0x00
	ip := header.IPv4(f[14:])
	ip.Encode(&header.IPv4Fields{TotalLen: uint16(24 + n), TTL: 1, Protocol: 2, Src: peerV4.As4(), Dst: dst.As4()})
	ip[0] = 0x46
	copy(ip[20:], []byte{0x94, 4, 0, 0})
	ip.UpdateChecksum()
	m := f[14+24:]
	m[0], m[1] = 0x11, code
	if group.IsValid() {
		a := group.As4()
		copy(m[4:8], a[:])
	}
	if v3 {
		m[8] = 2 // QRV
		m[9] = 125
	}
	be.PutUint16(m[2:], header.Checksum(m))
	return f
}

// mldQueryFrame is an MLD query from a link-local router (RFC 3810 §5.1,
// RFC 2710 §3) behind a Hop-by-Hop Router Alert.
func mldQueryFrame(src, dst, group netip.Addr, code uint16, v2 bool) []byte {
	n := 24
	if v2 {
		n = 28
	}
	f := make([]byte, 14+40+8+n)
	mac := multicastMAC(dst)
	copy(f[0:6], mac[:])
	copy(f[6:12], peerMAC)
	f[12], f[13] = 0x86, 0xdd
	header.IPv6(f[14:]).Encode(&header.IPv6Fields{PayloadLen: uint16(8 + n), NextHeader: 0, HopLimit: 1, Src: src.As16(), Dst: dst.As16()})
	copy(f[54:], []byte{58, 0, 5, 2, 0, 0, 1, 0})
	m := header.ICMPv6(f[62:])
	m[0] = 130
	be.PutUint16(m[4:], code)
	if group.IsValid() {
		a := group.As16()
		copy(m[8:24], a[:])
	}
	m.UpdateChecksum(src, dst)
	return f
}

// igmpFrom decodes an IGMP frame the stack sent and checks what every
// IGMP message must carry: IPv4 TTL 1, the Router Alert option, good IP
// and IGMP checksums, the Ethernet address of the IP destination.
func igmpFrom(t *testing.T, f []byte) (*layers.IPv4, gopacket.Layer) {
	t.Helper()
	p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
	ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	if ip == nil || ip.Protocol != layers.IPProtocolIGMP {
		t.Fatalf("not IGMP: %v", p)
	}
	if ip.TTL != 1 || len(ip.Options) == 0 || ip.Options[0].OptionType != 148 || ip.Options[0].OptionLength != 4 {
		t.Fatalf("TTL %d, options %+v: want TTL 1 and Router Alert", ip.TTL, ip.Options)
	}
	if header.Checksum(f[14:14+int(ip.IHL)*4]) != 0 || header.Checksum(ip.Payload) != 0 {
		t.Fatal("bad IP or IGMP checksum")
	}
	dst, _ := netip.AddrFromSlice(ip.DstIP)
	if mac := multicastMAC(dst); string(f[0:6]) != string(mac[:]) {
		t.Fatalf("Ethernet destination % x for %v", f[0:6], dst)
	}
	if ip.SrcIP.String() != myV4.String() {
		t.Fatalf("source %v", ip.SrcIP)
	}
	return ip, p.Layer(layers.LayerTypeIGMP)
}

// igmpv3Records returns the records of an IGMPv3 report to 224.0.0.22.
func igmpv3Records(t *testing.T, f []byte) []layers.IGMPv3GroupRecord {
	t.Helper()
	ip, l := igmpFrom(t, f)
	g, ok := l.(*layers.IGMP)
	if !ok || g.Type != layers.IGMPMembershipReportV3 || ip.DstIP.String() != "224.0.0.22" {
		t.Fatalf("not an IGMPv3 report to 224.0.0.22: %v", gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default))
	}
	return g.GroupRecords
}

func wantRecord(t *testing.T, recs []layers.IGMPv3GroupRecord, typ layers.IGMPv3GroupRecordType, g netip.Addr) {
	t.Helper()
	if len(recs) != 1 || recs[0].Type != typ || recs[0].MulticastAddress.String() != g.String() || recs[0].NumberOfSources != 0 {
		t.Fatalf("records %+v; want one %v for %v with no sources", recs, typ, g)
	}
}

// waitCounter waits for the Run goroutine to have handled an injected
// frame.
func waitCounter(t *testing.T, c interface{ Load() uint64 }, want uint64) {
	t.Helper()
	linktest.WaitFor(t, "the frame to be handled", waitLimit, waitPoll, func() bool { return c.Load() >= want })
}

func TestIGMPv3JoinLeave(t *testing.T) {
	h := newHarness(t, nil)
	if err := h.st.JoinGroup(group4); err != nil {
		t.Fatal(err)
	}
	wantRecord(t, igmpv3Records(t, h.next()), layers.IGMPToEx, group4)
	// Robustness 2: repeated once within the Unsolicited Report Interval.
	h.clock.Advance(time.Second)
	wantRecord(t, igmpv3Records(t, h.next()), layers.IGMPToEx, group4)
	h.clock.Advance(10 * time.Second)
	h.quiet()
	if err := h.st.JoinGroup(group4); err != nil {
		t.Fatal(err)
	}
	h.quiet() // a second join changes nothing

	if err := h.st.LeaveGroup(group4); err != nil {
		t.Fatal(err)
	}
	wantRecord(t, igmpv3Records(t, h.next()), layers.IGMPToIn, group4)
	h.clock.Advance(time.Second)
	wantRecord(t, igmpv3Records(t, h.next()), layers.IGMPToIn, group4)
	h.clock.Advance(10 * time.Second)
	h.quiet()
	c := h.st.Counters()
	if c.McastJoins.Load() != 1 || c.McastLeaves.Load() != 1 || c.IGMPReportsOut.Load() != 4 {
		t.Fatalf("counters %v", c.Map())
	}
}

func TestIGMPv3Queries(t *testing.T) {
	h := newHarness(t, nil)
	for _, g := range []netip.Addr{group4, group4b} {
		if err := h.st.JoinGroup(g); err != nil {
			t.Fatal(err)
		}
		h.next()
	}
	h.clock.Advance(time.Second)
	h.next() // the retransmission carries both records
	h.clock.Advance(10 * time.Second)
	h.quiet()

	// General query, Max Resp Code 100: 10 s. One current-state report
	// for all groups within it.
	h.inject(igmpQueryFrame(allSystems, netip.Addr{}, 100, true))
	waitCounter(t, &h.st.Counters().IGMPQueriesIn, 1)
	h.clock.Advance(10 * time.Second)
	recs := igmpv3Records(t, h.next())
	if len(recs) != 2 || recs[0].Type != layers.IGMPIsEx || recs[1].Type != layers.IGMPIsEx ||
		recs[0].MulticastAddress.String() != group4.String() || recs[1].MulticastAddress.String() != group4b.String() {
		t.Fatalf("general query answered with %+v", recs)
	}
	h.quiet()

	// Group-specific, Max Resp Code 0x8f (exponential form: 31 << 3
	// tenths = 24.8 s): only that group.
	h.inject(igmpQueryFrame(group4b, group4b, 0x80|0x0f, true))
	waitCounter(t, &h.st.Counters().IGMPQueriesIn, 2)
	h.clock.Advance(24800 * time.Millisecond)
	wantRecord(t, igmpv3Records(t, h.next()), layers.IGMPIsEx, group4b)

	// A query for a group we are not in is not answered.
	other := netip.MustParseAddr("239.9.9.9")
	h.inject(igmpQueryFrame(other, other, 10, true))
	waitCounter(t, &h.st.Counters().IGMPQueriesIn, 3)
	h.clock.Advance(2 * time.Second)
	h.quiet()
}

func TestIGMPv2Fallback(t *testing.T) {
	h := newHarness(t, nil)
	if err := h.st.JoinGroup(group4); err != nil {
		t.Fatal(err)
	}
	h.next()
	h.clock.Advance(time.Second)
	h.next()

	// An IGMPv2 general query (8 bytes, Max Resp Time 5 s): a v2 report
	// to the group itself.
	h.inject(igmpQueryFrame(allSystems, netip.Addr{}, 50, false))
	waitCounter(t, &h.st.Counters().IGMPQueriesIn, 1)
	h.clock.Advance(5 * time.Second)
	v2report := func(f []byte, typ layers.IGMPType, dst, g netip.Addr) {
		t.Helper()
		ip, l := igmpFrom(t, f)
		m, ok := l.(*layers.IGMPv1or2)
		if !ok || m.Type != typ || m.GroupAddress.String() != g.String() || ip.DstIP.String() != dst.String() {
			t.Fatalf("want IGMPv2 %v for %v to %v, got %v", typ, g, dst, gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default))
		}
	}
	v2report(h.next(), layers.IGMPMembershipReportV2, group4, group4)
	h.quiet()

	// While the v2 querier is present, joins and leaves speak v2: a
	// leave goes to all-routers.
	if err := h.st.JoinGroup(group4b); err != nil {
		t.Fatal(err)
	}
	v2report(h.next(), layers.IGMPMembershipReportV2, group4b, group4b)
	if err := h.st.LeaveGroup(group4); err != nil {
		t.Fatal(err)
	}
	v2report(h.next(), layers.IGMPLeaveGroup, allRouters4, group4)

	// Older Version Querier Present Timeout (260 s) later: IGMPv3 again.
	h.clock.Advance(261 * time.Second)
	for {
		if _, ok := h.tryNext(100 * time.Millisecond); !ok {
			break // retransmissions of the above
		}
	}
	if err := h.st.LeaveGroup(group4b); err != nil {
		t.Fatal(err)
	}
	wantRecord(t, igmpv3Records(t, h.next()), layers.IGMPToIn, group4b)
}

// mldFrom decodes an MLD frame the stack sent and checks what RFC 3810
// §5 requires of every MLD message: link-local source, hop limit 1, a
// Hop-by-Hop Router Alert (value 0, MLD), a good ICMPv6 checksum.
func mldFrom(t *testing.T, f []byte) (dst netip.Addr, m []byte) {
	t.Helper()
	p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
	ip, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	hbh, _ := p.Layer(layers.LayerTypeIPv6HopByHop).(*layers.IPv6HopByHop)
	if ip == nil || hbh == nil || ip.HopLimit != 1 || ip.SrcIP.String() != myLL.String() {
		t.Fatalf("not MLD from %v with hop limit 1 behind Hop-by-Hop: %v", myLL, p)
	}
	alert := false
	for _, o := range hbh.Options {
		alert = alert || (o.OptionType == 5 && len(o.OptionData) == 2 && o.OptionData[0] == 0 && o.OptionData[1] == 0)
	}
	if !alert || hbh.NextHeader != layers.IPProtocolICMPv6 {
		t.Fatalf("Hop-by-Hop %+v: want a Router Alert for MLD before ICMPv6", hbh)
	}
	dst, _ = netip.AddrFromSlice(ip.DstIP)
	if mac := multicastMAC(dst); string(f[0:6]) != string(mac[:]) {
		t.Fatalf("Ethernet destination % x for %v", f[0:6], dst)
	}
	m = f[14+40+8:]
	if header.L4Checksum(myLL, dst, 58, m) != 0 {
		t.Fatal("bad ICMPv6 checksum")
	}
	return dst, m
}

// mldv2Records returns the records of an MLDv2 report to ff02::16, as
// gopacket decodes them.
func mldv2Records(t *testing.T, f []byte) []layers.MLDv2MulticastAddressRecord {
	t.Helper()
	dst, m := mldFrom(t, f)
	var r layers.MLDv2MulticastListenerReportMessage
	if dst != mldv2Routers || m[0] != 143 || r.DecodeFromBytes(m[4:], gopacket.NilDecodeFeedback) != nil {
		t.Fatalf("not an MLDv2 report to ff02::16: % x", f)
	}
	return r.MulticastAddressRecords
}

func wantMLDRecord(t *testing.T, recs []layers.MLDv2MulticastAddressRecord, typ layers.MLDv2MulticastAddressRecordType, g netip.Addr) {
	t.Helper()
	if len(recs) != 1 || recs[0].RecordType != typ || recs[0].MulticastAddress.String() != g.String() || recs[0].N != 0 {
		t.Fatalf("records %+v; want one %v for %v with no sources", recs, typ, g)
	}
}

func TestMLDv2(t *testing.T) {
	h := newHarness(t, nil)
	if err := h.st.JoinGroup(group6); err != nil {
		t.Fatal(err)
	}
	wantMLDRecord(t, mldv2Records(t, h.next()), layers.MLDv2MulticastAddressRecordTypeChangeToExcludeMode, group6)
	h.clock.Advance(time.Second)
	wantMLDRecord(t, mldv2Records(t, h.next()), layers.MLDv2MulticastAddressRecordTypeChangeToExcludeMode, group6)
	h.clock.Advance(10 * time.Second)
	h.quiet()

	// General query, Maximum Response Code 2000 ms.
	h.inject(mldQueryFrame(router6, allNodes, netip.Addr{}, 2000, true))
	waitCounter(t, &h.st.Counters().MLDQueriesIn, 1)
	h.clock.Advance(2 * time.Second)
	wantMLDRecord(t, mldv2Records(t, h.next()), layers.MLDv2MulticastAddressRecordTypeModeIsExcluded, group6)
	// Group-specific.
	h.inject(mldQueryFrame(router6, group6, group6, 500, true))
	waitCounter(t, &h.st.Counters().MLDQueriesIn, 2)
	h.clock.Advance(500 * time.Millisecond)
	wantMLDRecord(t, mldv2Records(t, h.next()), layers.MLDv2MulticastAddressRecordTypeModeIsExcluded, group6)
	// A query from a global address is dropped (RFC 3810 §5.1.14).
	h.inject(mldQueryFrame(peerV6, allNodes, netip.Addr{}, 100, true))
	waitCounter(t, &h.st.Counters().Malformed, 1)
	h.clock.Advance(time.Second)
	h.quiet()

	if err := h.st.LeaveGroup(group6); err != nil {
		t.Fatal(err)
	}
	wantMLDRecord(t, mldv2Records(t, h.next()), layers.MLDv2MulticastAddressRecordTypeChangeToIncludeMode, group6)
	h.clock.Advance(time.Second)
	wantMLDRecord(t, mldv2Records(t, h.next()), layers.MLDv2MulticastAddressRecordTypeChangeToIncludeMode, group6)
}

func TestMLDv1Fallback(t *testing.T) {
	h := newHarness(t, nil)
	if err := h.st.JoinGroup(group6); err != nil {
		t.Fatal(err)
	}
	h.next()
	h.clock.Advance(time.Second)
	h.next()
	h.inject(mldQueryFrame(router6, allNodes, netip.Addr{}, 1000, false))
	waitCounter(t, &h.st.Counters().MLDQueriesIn, 1)
	h.clock.Advance(time.Second)
	dst, m := mldFrom(t, h.next())
	if dst != group6 || m[0] != 131 || netip.AddrFrom16([16]byte(m[8:24])) != group6 {
		t.Fatalf("want an MLDv1 report to %v, got type %d to %v", group6, m[0], dst)
	}
	if err := h.st.LeaveGroup(group6); err != nil {
		t.Fatal(err)
	}
	dst, m = mldFrom(t, h.next())
	if dst != allRouters6 || m[0] != 132 || netip.AddrFrom16([16]byte(m[8:24])) != group6 {
		t.Fatalf("want an MLDv1 done to ff02::2, got type %d to %v", m[0], dst)
	}
}

// TestLinkLocalGroupsNotReported: 224.0.0.0/24 and ff02::1 are joined
// (received) but never reported.
func TestLinkLocalGroupsNotReported(t *testing.T) {
	h := newHarness(t, nil)
	for _, g := range []string{"224.0.0.251", "ff02::1", "ff01::5"} {
		if err := h.st.JoinGroup(netip.MustParseAddr(g)); err != nil {
			t.Fatal(err)
		}
	}
	h.inject(igmpQueryFrame(allSystems, netip.Addr{}, 10, true))
	h.inject(mldQueryFrame(router6, allNodes, netip.Addr{}, 1000, true))
	waitCounter(t, &h.st.Counters().MLDQueriesIn, 1)
	h.clock.Advance(2 * time.Second)
	h.quiet()
	if len(h.st.Groups()) != 3 {
		t.Fatalf("groups %v", h.st.Groups())
	}
}

func TestReannounceOnLinkUp(t *testing.T) {
	h := newHarness(t, nil)
	if err := h.st.JoinGroup(group4); err != nil {
		t.Fatal(err)
	}
	h.next()
	h.clock.Advance(time.Second)
	h.next()
	h.st.SetLinkUp(true) // no change: nothing
	h.quiet()
	h.st.SetLinkUp(false)
	h.st.SetLinkUp(true)
	wantRecord(t, igmpv3Records(t, h.next()), layers.IGMPToEx, group4)
}

// groupFrame is a RoCE frame from the peer to group g, built by a peer
// stack (multicast MAC from the IP).
func groupFrame(t testing.TB, g netip.Addr) []byte { return groupFrameSize(t, g, 32) }

func groupFrameSize(t testing.TB, g netip.Addr, payload int) []byte {
	cl := newCaptureLink(peerMAC)
	ps, err := New(Config{Link: cl, Clock: clock.NewManual(time.Unix(1_000_000, 0)),
		Addrs: []netip.Prefix{netip.MustParsePrefix("192.0.2.20/24"), netip.MustParsePrefix("2001:db8::20/64")}})
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	if _, err := ps.Send([]TxPacket{{Buf: transport(payload), Offset: Headroom, Dest: &Dest{Dst: g, SrcPort: 0xc001}}}); err != nil {
		t.Fatal(err)
	}
	return cl.frames[0]
}

func TestMulticastRoCEReceive(t *testing.T) {
	h := newHarness(t, nil)
	for _, g := range []netip.Addr{group4, group6} {
		if err := h.st.JoinGroup(g); err != nil {
			t.Fatal(err)
		}
		h.next()
	}
	for _, g := range []netip.Addr{group4, group6} {
		h.inject(groupFrame(t, g))
		select {
		case p := <-h.rx:
			if p.Dst != g || (p.Src != peerV4 && p.Src != peerV6) || p.SrcPort != 0xc001 {
				t.Fatalf("delivered %+v", p)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("RoCE to joined %v not delivered: %v", g, h.st.Counters().Map())
		}
	}
	for i, g := range []netip.Addr{group4b, netip.MustParseAddr("ff0e::1:3")} {
		h.inject(groupFrame(t, g))
		waitCounter(t, &h.st.Counters().McastNotJoined, uint64(i+1))
	}
	if err := h.st.LeaveGroup(group4); err != nil {
		t.Fatal(err)
	}
	h.inject(groupFrame(t, group4))
	waitCounter(t, &h.st.Counters().McastNotJoined, 3)
	select {
	case p := <-h.rx:
		t.Fatalf("delivered to a group not joined: %+v", p)
	default:
	}
	if n := h.st.Counters().RoCEIn.Load(); n != 2 {
		t.Fatalf("roce_in %d", n)
	}
}

// TestMulticastReceiveAllocs: the group lookup keeps the receive path
// free of allocations, for joined and not-joined groups.
func TestMulticastReceiveAllocs(t *testing.T) {
	st := rxStack(t)
	defer st.Close()
	if err := st.JoinGroup(group6); err != nil {
		t.Fatal(err)
	}
	in, out := groupFrame(t, group6), groupFrame(t, group4)
	if n := testing.AllocsPerRun(100, func() {
		if _, ok := st.input(in); !ok {
			t.Fatal("dropped")
		}
		st.input(out)
	}); n != 0 {
		t.Fatalf("%v allocations per multicast receive", n)
	}
}

func TestGroupAPI(t *testing.T) {
	st, err := New(Config{Link: newCaptureLink(stackMAC), Clock: clock.NewManual(time.Unix(1_000_000, 0)), MaxGroups: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, a := range []string{"192.0.2.1", "2001:db8::1", "255.255.255.255"} {
		if err := st.JoinGroup(netip.MustParseAddr(a)); !errors.Is(err, ErrNotMulticast) {
			t.Fatalf("join %s: %v", a, err)
		}
	}
	if err := st.JoinGroup(netip.Addr{}); !errors.Is(err, ErrNotMulticast) {
		t.Fatalf("join of the zero Addr: %v", err)
	}
	for _, g := range []netip.Addr{group6, group4b, group4, group4} {
		if err := st.JoinGroup(g); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.JoinGroup(netip.MustParseAddr("239.0.0.9")); !errors.Is(err, ErrTooManyGroups) {
		t.Fatalf("fourth group: %v", err)
	}
	if got := st.Groups(); !slices.Equal(got, []netip.Addr{group4, group4b, group6}) {
		t.Fatalf("Groups() = %v", got)
	}
	if err := st.LeaveGroup(netip.MustParseAddr("239.0.0.9")); err != nil {
		t.Fatal(err)
	}
	if err := st.LeaveGroup(group4b); err != nil {
		t.Fatal(err)
	}
	if err := st.JoinGroup(netip.MustParseAddr("239.0.0.9")); err != nil {
		t.Fatalf("a join after a leave, under the limit: %v", err)
	}
	// An IPv4-mapped IPv6 group is the IPv4 group.
	if err := st.JoinGroup(netip.AddrFrom16(group4.As16())); err != nil || len(st.Groups()) != 3 {
		t.Fatalf("mapped join: %v, %v", err, st.Groups())
	}
}

// TestMalformedQueries: broken IGMP and MLD queries are counted and
// ignored.
func TestMalformedQueries(t *testing.T) {
	st := rxStack(t)
	defer st.Close()
	if err := st.JoinGroup(group4); err != nil {
		t.Fatal(err)
	}
	bad := func(f []byte, fn func([]byte)) []byte {
		c := append([]byte(nil), f...)
		fn(c)
		return c
	}
	q4 := igmpQueryFrame(allSystems, netip.Addr{}, 100, true)
	q6 := mldQueryFrame(router6, allNodes, netip.Addr{}, 100, true)
	fix6 := func(f []byte) { header.ICMPv6(f[62:]).UpdateChecksum(router6, allNodes) }
	for name, f := range map[string][]byte{
		"IGMP checksum":      bad(q4, func(f []byte) { f[14+24+2] ^= 1 }),
		"IGMP 10 bytes":      bad(q4, func(f []byte) { be.PutUint16(f[16:], 24+10); fixIPv4(f); fixMsg(f[14+24 : 14+24+10]) }),
		"IGMPv3 sources lie": bad(q4, func(f []byte) { be.PutUint16(f[14+24+10:], 5); fixMsg(f[14+24:]) }),
		"IGMP unicast group": bad(q4, func(f []byte) { copy(f[14+24+4:], []byte{10, 0, 0, 1}); fixMsg(f[14+24:]) }),
		"MLD checksum":       bad(q6, func(f []byte) { f[62+2] ^= 1 }),
		"MLD HbH too long":   bad(q6, func(f []byte) { f[55] = 9 }),
		"MLDv2 sources lie":  bad(q6, func(f []byte) { f[62+27] = 3; fix6(f) }),
		"MLD 26 bytes": bad(q6, func(f []byte) {
			be.PutUint16(f[18:], 8+26)
			header.ICMPv6(f[62:62+26]).UpdateChecksum(router6, allNodes)
		}),
		"MLD unicast group": bad(q6, func(f []byte) { copy(f[62+8:], peerV6.AsSlice()); fix6(f) }),
	} {
		before := st.ctr.Malformed.Load() + st.ctr.BadIPChecksum.Load()
		if _, ok := st.input(f); ok {
			t.Fatalf("%s: delivered", name)
		}
		if st.ctr.Malformed.Load()+st.ctr.BadIPChecksum.Load() != before+1 {
			t.Errorf("%s: not counted as malformed: %v", name, st.ctr.Map())
		}
	}
	for _, g := range [][]byte{q4, q6} {
		for n := range len(g) {
			st.input(append([]byte(nil), g[:n]...))
		}
	}
	if st.ctr.IGMPQueriesIn.Load() != 0 || st.ctr.MLDQueriesIn.Load() != 0 {
		t.Fatalf("a broken query was taken: %v", st.ctr.Map())
	}
}

// fixMsg recomputes an IGMP message's checksum.
func fixMsg(m []byte) {
	m[2], m[3] = 0, 0
	be.PutUint16(m[2:], header.Checksum(m))
}

// TestCloseLeaves: Close sends a leave for the groups (one IGMPv3 report,
// one MLDv2 report), and nothing follows.
func TestCloseLeaves(t *testing.T) {
	cl := newCaptureLink(stackMAC)
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	st, err := New(Config{Link: cl, Clock: clk, Addrs: []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24")}})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []netip.Addr{group4, group4b, group6} {
		if err := st.JoinGroup(g); err != nil {
			t.Fatal(err)
		}
	}
	cl.mu.Lock()
	cl.frames = nil
	cl.mu.Unlock()
	st.Close()
	clk.Advance(time.Minute)
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if len(cl.frames) != 2 {
		t.Fatalf("%d frames after Close; want 2 leaves", len(cl.frames))
	}
	recs := igmpv3Records(t, cl.frames[0])
	if len(recs) != 2 || recs[0].Type != layers.IGMPToIn || recs[1].Type != layers.IGMPToIn {
		t.Fatalf("IGMP leave records %+v", recs)
	}
	wantMLDRecord(t, mldv2Records(t, cl.frames[1]), layers.MLDv2MulticastAddressRecordTypeChangeToIncludeMode, group6)
}

// TestIGMPv1Compat: an IGMPv1 query (8 bytes, Max Resp Time 0) is
// answered with an IGMPv1 report within 10 s, and a leave sends nothing,
// v1 having no leave (RFC 3376 §7.2.1).
func TestIGMPv1Compat(t *testing.T) {
	h := newHarness(t, nil)
	if err := h.st.JoinGroup(group4); err != nil {
		t.Fatal(err)
	}
	h.next()
	h.clock.Advance(time.Second)
	h.next()
	h.inject(igmpQueryFrame(allSystems, netip.Addr{}, 0, false))
	waitCounter(t, &h.st.Counters().IGMPQueriesIn, 1)
	h.clock.Advance(10 * time.Second)
	ip, l := igmpFrom(t, h.next())
	if m, ok := l.(*layers.IGMPv1or2); !ok || m.Type != layers.IGMPMembershipReportV1 || ip.DstIP.String() != group4.String() {
		t.Fatalf("want an IGMPv1 report to %v: %v", group4, l)
	}
	if err := h.st.LeaveGroup(group4); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(time.Minute)
	h.quiet()
}

// TestReportSuppression: in IGMPv2 / MLDv1 mode another member's report
// for the group answers the query for us (RFC 2236 §3, RFC 2710 §4).
func TestReportSuppression(t *testing.T) {
	h := newHarness(t, nil)
	for _, g := range []netip.Addr{group4, group6} {
		if err := h.st.JoinGroup(g); err != nil {
			t.Fatal(err)
		}
		h.next()
	}
	h.clock.Advance(time.Second)
	h.next()
	h.next()
	h.inject(igmpQueryFrame(allSystems, netip.Addr{}, 100, false))
	h.inject(mldQueryFrame(router6, allNodes, netip.Addr{}, 10000, false))
	waitCounter(t, &h.st.Counters().MLDQueriesIn, 1)
	v2 := igmpQueryFrame(group4, group4, 0, false)
	v2[14+24] = 0x16
	fixMsg(v2[14+24:])
	v1 := mldQueryFrame(peerLL, group6, group6, 0, false)
	v1[62] = 131
	header.ICMPv6(v1[62:]).UpdateChecksum(peerLL, group6)
	before := h.st.Counters().NonRoCE.Load()
	h.inject(v2)
	h.inject(v1)
	waitCounter(t, &h.st.Counters().NonRoCE, before+2)
	h.clock.Advance(10 * time.Second)
	h.quiet()
}
