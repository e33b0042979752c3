package netstack

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/vrnic/vrnicd/header"
	"github.com/vrnic/vrnicd/nic/gid"
	"github.com/vrnic/vrnicd/nic/link/linktest"
	"github.com/vrnic/vrnicd/transport/wire"
)

func eth(dst net.HardwareAddr, et layers.EthernetType) *layers.Ethernet {
	return &layers.Ethernet{SrcMAC: peerMAC, DstMAC: dst, EthernetType: et}
}

func decode(f []byte) gopacket.Packet {
	return gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
}

func TestAnnouncementsAndLinkLocal(t *testing.T) {
	var got []netip.Addr
	h := newHarness(t, func(c *Config) { c.OnAddrs = func(a []netip.Addr) { got = a } })
	if gid.LinkLocal(stackMAC) != myLL {
		t.Fatalf("test constant myLL wrong: %v", gid.LinkLocal(stackMAC))
	}
	want := []netip.Addr{myLL, myV4, myV6}
	if len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("OnAddrs got %v, want %v", got, want)
	}
	// A counter moves just after its frame is written: wait for the last.
	linktest.WaitFor(t, "1 gratuitous ARP and 2 unsolicited NAs counted", waitLimit, waitPoll, func() bool {
		return h.st.Counters().ARPRequestsOut.Load() == 1 && h.st.Counters().NDAdvertsOut.Load() == 2
	})
}

func TestARPRequestReply(t *testing.T) {
	h := newHarness(t, nil)
	req := func(target netip.Addr) []byte {
		return arpFrame(layers.EthernetBroadcast, peerMAC, header.ARPFields{Op: header.ARPRequest,
			SenderMAC: [6]byte(peerMAC), SenderIP: peerV4.As4(), TargetIP: target.As4()})
	}
	h.inject(req(myV4))
	f := h.next()
	e, a := header.Ethernet(f), header.ARP(f[header.EthernetHeaderLen:])
	if e.Type() != header.EtherTypeARP || !a.IsIPv4OverEthernet() || a.Op() != header.ARPReply {
		t.Fatalf("not an ARP reply: % x", f)
	}
	if e.Dst() != [6]byte(peerMAC) || e.Src() != [6]byte(stackMAC) || a.SenderMAC() != [6]byte(stackMAC) ||
		a.SenderIP() != myV4 || a.TargetMAC() != [6]byte(peerMAC) || a.TargetIP() != peerV4 {
		t.Fatalf("bad reply % x", f)
	}
	if len(f) < 60 {
		t.Errorf("reply %d bytes, below the Ethernet minimum", len(f))
	}
	// The request taught us the peer.
	if mac, ok := h.st.Neighbor(peerV4); !ok || mac.String() != peerMAC.String() {
		t.Errorf("peer not learned: %v %v", mac, ok)
	}
	// Not ours: no answer.
	h.inject(req(netip.MustParseAddr("192.0.2.99")))
	h.quiet()
	c := h.st.Counters()
	if c.ARPRequestsIn.Load() != 1 || c.ARPRepliesOut.Load() != 1 {
		t.Errorf("counters %v", c.Map())
	}
}

func nsFrame(t *testing.T, src, dst, target netip.Addr, dstMAC net.HardwareAddr, sll bool) []byte {
	ns := &layers.ICMPv6NeighborSolicitation{TargetAddress: target.AsSlice()}
	if sll {
		ns.Options = layers.ICMPv6Options{{Type: layers.ICMPv6OptSourceAddress, Data: peerMAC}}
	}
	return serialize(t, eth(dstMAC, layers.EthernetTypeIPv6),
		&layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: 255, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()},
		&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborSolicitation, 0)}, ns)
}

func TestNeighborSolicitation(t *testing.T) {
	h := newHarness(t, nil)
	for _, target := range []netip.Addr{myLL, myV6} {
		src := peerLL
		if target == myV6 {
			src = peerV6
		}
		sn := solicitedNode(target)
		h.inject(nsFrame(t, src, sn, target, net.HardwareAddr{0x33, 0x33, 0xff, 0, 0, 0x10}, true))
		f := h.next()
		p := decode(f)
		ip6, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		na, _ := p.Layer(layers.LayerTypeICMPv6NeighborAdvertisement).(*layers.ICMPv6NeighborAdvertisement)
		if ip6 == nil || na == nil {
			t.Fatalf("%v: no NA: %v", target, p)
		}
		if !checksumsOK(t, f) {
			t.Errorf("%v: NA checksum wrong", target)
		}
		if ip6.HopLimit != 255 || ip6.SrcIP.String() != target.String() || ip6.DstIP.String() != src.String() {
			t.Errorf("%v: NA IPv6 header %v → %v hop %d", target, ip6.SrcIP, ip6.DstIP, ip6.HopLimit)
		}
		if !na.Solicited() || !na.Override() || na.Router() || net.IP(na.TargetAddress).String() != target.String() {
			t.Errorf("%v: NA flags %#x target %v", target, na.Flags, na.TargetAddress)
		}
		if len(na.Options) != 1 || na.Options[0].Type != layers.ICMPv6OptTargetAddress || net.HardwareAddr(na.Options[0].Data).String() != stackMAC.String() {
			t.Errorf("%v: NA options %v", target, na.Options)
		}
		if e := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet); e.DstMAC.String() != peerMAC.String() {
			t.Errorf("%v: NA to %v", target, e.DstMAC)
		}
		if mac, ok := h.st.Neighbor(src); !ok || mac.String() != peerMAC.String() {
			t.Errorf("%v: source not learned", src)
		}
	}
	// DAD probe for our address: defended with an NA to all-nodes, S clear.
	h.inject(nsFrame(t, netip.IPv6Unspecified(), solicitedNode(myV6), myV6, net.HardwareAddr{0x33, 0x33, 0xff, 0, 0, 0x10}, false))
	p := decode(h.next())
	na, _ := p.Layer(layers.LayerTypeICMPv6NeighborAdvertisement).(*layers.ICMPv6NeighborAdvertisement)
	if na == nil || na.Solicited() || p.Layer(layers.LayerTypeIPv6).(*layers.IPv6).DstIP.String() != "ff02::1" {
		t.Fatalf("DAD defence wrong: %v", p)
	}
	// Hop limit ≠ 255 is an off-link forgery: dropped.
	bad := nsFrame(t, peerV6, solicitedNode(myV6), myV6, net.HardwareAddr{0x33, 0x33, 0xff, 0, 0, 0x10}, true)
	bad[14+7] = 64
	// fix the checksum so only the hop limit is wrong (hop limit is not in the pseudo-header)
	h.inject(bad)
	// Bad checksum: dropped and counted.
	bad2 := nsFrame(t, peerV6, solicitedNode(myV6), myV6, net.HardwareAddr{0x33, 0x33, 0xff, 0, 0, 0x10}, true)
	bad2[len(bad2)-1] ^= 1
	h.inject(bad2)
	h.quiet()
	if h.st.Counters().BadICMPChecksum.Load() != 1 || h.st.Counters().Malformed.Load() != 1 {
		t.Errorf("counters %v", h.st.Counters().Map())
	}
}

func TestEcho(t *testing.T) {
	h := newHarness(t, nil)
	payload := gopacket.Payload([]byte("vrnicd ping payload 0123456789"))
	h.inject(serialize(t, eth(stackMAC, layers.EthernetTypeIPv4),
		&layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: peerV4.AsSlice(), DstIP: myV4.AsSlice(), Id: 77},
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0), Id: 9, Seq: 1}, payload))
	f := h.next()
	p := decode(f)
	ic, _ := p.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
	ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	if ic == nil || ic.TypeCode.Type() != layers.ICMPv4TypeEchoReply || ic.Id != 9 || ic.Seq != 1 || string(ic.Payload) != string(payload) {
		t.Fatalf("bad echo reply %v", p)
	}
	if ip.SrcIP.String() != "192.0.2.10" || ip.DstIP.String() != "192.0.2.20" || !checksumsOK(t, f) {
		t.Fatalf("bad echo reply header or checksum: %v", p)
	}
	for _, dst := range []netip.Addr{myV6, myLL} {
		src := peerV6
		if dst == myLL {
			src = peerLL
		}
		h.inject(serialize(t, eth(stackMAC, layers.EthernetTypeIPv6),
			&layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: 64, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()},
			&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeEchoRequest, 0)},
			&layers.ICMPv6Echo{Identifier: 5, SeqNumber: 2}, payload))
		f := h.next()
		p := decode(f)
		e, _ := p.Layer(layers.LayerTypeICMPv6Echo).(*layers.ICMPv6Echo)
		ic6, _ := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
		ip6, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		if e == nil || ic6.TypeCode.Type() != layers.ICMPv6TypeEchoReply || e.Identifier != 5 || e.SeqNumber != 2 {
			t.Fatalf("bad echo6 reply %v", p)
		}
		if ip6.SrcIP.String() != dst.String() || ip6.DstIP.String() != src.String() || !checksumsOK(t, f) {
			t.Fatalf("bad echo6 header or checksum %v", p)
		}
	}
	if h.st.Counters().EchoReplies.Load() != 3 {
		t.Errorf("EchoReplies = %d", h.st.Counters().EchoReplies.Load())
	}
}

func arpReply(from netip.Addr) []byte {
	return arpFrame(stackMAC, peerMAC, header.ARPFields{Op: header.ARPReply,
		SenderMAC: [6]byte(peerMAC), SenderIP: from.As4(), TargetMAC: [6]byte(stackMAC), TargetIP: myV4.As4()})
}

func isARPRequestFor(f []byte, ip netip.Addr, unicast bool) bool {
	if len(f) < header.EthernetHeaderLen+header.ARPLen {
		return false
	}
	e, a := header.Ethernet(f), header.ARP(f[header.EthernetHeaderLen:])
	if e.Type() != header.EtherTypeARP || !a.IsIPv4OverEthernet() || a.Op() != header.ARPRequest ||
		a.TargetIP() != ip || a.SenderIP() != myV4 {
		return false
	}
	if unicast {
		return e.Dst() == [6]byte(peerMAC)
	}
	return e.Dst() == [6]byte(layers.EthernetBroadcast)
}

func TestResolutionRetriesAndQueue(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Neigh = NeighConfig{QueueLen: 4, MaxProbes: 3} })
	d := &Dest{Dst: peerV4, SrcPort: 0xc001}
	send := func(n int) {
		var pkts []TxPacket
		for range n {
			pkts = append(pkts, TxPacket{Buf: transport(32), Offset: Headroom, Dest: d})
		}
		if k, err := h.st.Send(pkts); k != n || err != nil {
			t.Fatalf("Send = %d, %v", k, err)
		}
	}
	send(6) // 4 queue, 2 dropped
	c := h.st.Counters()
	if !isARPRequestFor(h.next(), peerV4, false) {
		t.Fatal("no broadcast ARP request")
	}
	if c.NeighQueueDrops.Load() != 2 || c.NeighMisses.Load() != 6 {
		t.Fatalf("queue drops %d misses %d", c.NeighQueueDrops.Load(), c.NeighMisses.Load())
	}
	for i := 2; i <= 3; i++ {
		h.clock.Advance(time.Second)
		if !isARPRequestFor(h.next(), peerV4, false) {
			t.Fatalf("no retry %d", i)
		}
	}
	h.clock.Advance(time.Second) // third probe unanswered: give up
	h.quiet()
	if c.NeighUnresolvedDrops.Load() != 4 || c.ARPRequestsOut.Load() != 1+3 {
		t.Fatalf("after give-up: %v", c.Map())
	}
	h.clock.Advance(10 * time.Second)
	h.quiet() // no more probes: bounded

	// Again, and this time the peer answers: the queue goes out in order.
	send(3)
	if !isARPRequestFor(h.next(), peerV4, false) {
		t.Fatal("no ARP request on second attempt")
	}
	h.inject(arpReply(peerV4))
	for i := range 3 {
		p := decode(h.next())
		e := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
		u, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if u == nil || u.DstPort != 4791 || e.DstMAC.String() != peerMAC.String() {
			t.Fatalf("queued frame %d: %v", i, p)
		}
	}
	// Resolved: sent at once, no probe.
	send(1)
	if p := decode(h.next()); p.Layer(layers.LayerTypeUDP) == nil {
		t.Fatal("not sent directly")
	}
	// After ReachableTime the entry is stale: still used, plus a unicast probe.
	h.clock.Advance(31 * time.Second)
	send(1)
	var sawProbe, sawData bool
	for range 2 {
		f := h.next()
		sawProbe = sawProbe || isARPRequestFor(f, peerV4, true)
		sawData = sawData || decode(f).Layer(layers.LayerTypeUDP) != nil
	}
	if !sawProbe || !sawData {
		t.Fatalf("stale use: probe %v data %v", sawProbe, sawData)
	}
}

func TestResolutionIPv6(t *testing.T) {
	h := newHarness(t, nil)
	d := &Dest{Dst: peerV6, SrcPort: 0xc002}
	if _, err := h.st.Send([]TxPacket{{Buf: transport(8), Offset: Headroom, Dest: d}}); err != nil {
		t.Fatal(err)
	}
	f := h.next()
	p := decode(f)
	ns, _ := p.Layer(layers.LayerTypeICMPv6NeighborSolicitation).(*layers.ICMPv6NeighborSolicitation)
	ip6 := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	if ns == nil || net.IP(ns.TargetAddress).String() != peerV6.String() || ip6.DstIP.String() != solicitedNode(peerV6).String() ||
		ip6.SrcIP.String() != myV6.String() || ip6.HopLimit != 255 || !checksumsOK(t, f) {
		t.Fatalf("bad NS: %v", p)
	}
	if e := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet); e.DstMAC.String() != "33:33:ff:00:00:20" {
		t.Fatalf("NS to %v", e.DstMAC)
	}
	na := &layers.ICMPv6NeighborAdvertisement{Flags: 0x60, TargetAddress: peerV6.AsSlice(),
		Options: layers.ICMPv6Options{{Type: layers.ICMPv6OptTargetAddress, Data: peerMAC}}}
	h.inject(serialize(t, eth(stackMAC, layers.EthernetTypeIPv6),
		&layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: 255, SrcIP: peerV6.AsSlice(), DstIP: myV6.AsSlice()},
		&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborAdvertisement, 0)}, na))
	f = h.next()
	if !checksumsOK(t, f) {
		t.Fatal("IPv6 RoCE frame: UDP checksum wrong")
	}
	ip := f[14:]
	if wire.VerifyICRC(ip) != nil {
		t.Fatal("IPv6 ICRC does not verify")
	}
}

// TestSendMatchesKernelRxe rebuilds a kernel rxe packet from the golden
// capture through Send and compares the bytes. rxe's IPv4 ID comes from the
// kernel's IP-ID generator; ours is 0, so the golden packet's ID is zeroed
// and its IP checksum and ICRC recomputed — every other byte must match.
func TestSendMatchesKernelRxe(t *testing.T) {
	g := goldenIPv4(t)
	gip := g[14 : 14+int(binary.BigEndian.Uint16(g[16:]))]
	src := netip.AddrFrom4([4]byte(gip[12:16]))
	dst := netip.AddrFrom4([4]byte(gip[16:20]))
	srcMAC := net.HardwareAddr(g[6:12])
	h := newHarness(t, func(c *Config) {
		c.MAC = srcMAC
		c.Addrs = []netip.Prefix{netip.PrefixFrom(src, 24)}
	})
	// Teach the stack the destination's MAC.
	h.inject(arpFrame(srcMAC, g[0:6], header.ARPFields{Op: header.ARPRequest,
		SenderMAC: [6]byte(g[0:6]), SenderIP: dst.As4(), TargetIP: src.As4()}))
	h.next() // our ARP reply

	want := append([]byte(nil), g[:14+len(gip)]...)
	wip := want[14:]
	wip[4], wip[5] = 0, 0
	wip[10], wip[11] = 0, 0
	binary.BigEndian.PutUint16(wip[10:], header.Checksum(wip[:20]))
	if err := wire.PutICRC(wip); err != nil {
		t.Fatal(err)
	}
	tp := gip[28:]
	buf := make([]byte, Headroom+len(tp))
	copy(buf[Headroom:], tp)
	clear(buf[len(buf)-4:])
	d := &Dest{Src: src, Dst: dst, SrcPort: binary.BigEndian.Uint16(gip[20:]), TrafficClass: gip[1], HopLimit: gip[8]}
	if n, err := h.st.Send([]TxPacket{{Buf: buf, Offset: Headroom, Dest: d}}); n != 1 || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	got := h.next()
	if string(got) != string(want) {
		t.Fatalf("frame differs from kernel rxe's:\n got % x\nwant % x", got, want)
	}
	ip := decode(got).Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	if ip.Flags != layers.IPv4DontFragment || ip.Id != 0 || ip.TTL != gip[8] || ip.IHL != 5 || header.Checksum(got[14:34]) != 0 {
		t.Fatalf("IPv4 header %+v", ip)
	}
	if u := decode(got).Layer(layers.LayerTypeUDP).(*layers.UDP); u.Checksum != 0 || int(u.Length) != 8+len(tp) {
		t.Fatalf("UDP header %+v", u)
	}
	if h.st.Counters().RoCEOut.Load() != 1 {
		t.Fatal("RoCEOut not counted")
	}
}

func TestSendRejectsBadRequests(t *testing.T) {
	h := newHarness(t, nil)
	good := &Dest{Dst: peerV4}
	cases := []TxPacket{
		{Buf: transport(8), Offset: 10, Dest: good},                                // no headroom
		{Buf: transport(8), Offset: Headroom, Dest: nil},                           // no dest
		{Buf: make([]byte, Headroom+10), Offset: Headroom, Dest: good},             // shorter than BTH+ICRC
		{Buf: transport(9000), Offset: Headroom, Dest: good},                       // over the MTU
		{Buf: transport(8), Offset: Headroom, Dest: &Dest{Src: myV6, Dst: peerV4}}, // mixed families
		{Buf: transport(8), Offset: Headroom + 100, Dest: good},                    // offset past the end
	}
	for i, p := range cases {
		if n, err := h.st.Send([]TxPacket{p}); n != 0 || err == nil {
			t.Errorf("case %d: Send = %d, %v; want an error", i, n, err)
		}
	}
	if h.st.Counters().TxErrors.Load() != uint64(len(cases)) {
		t.Errorf("TxErrors = %d", h.st.Counters().TxErrors.Load())
	}
	h.quiet()
}

// A link that comes back probes its unresolved neighbours at once, again
// a tenth of RetransTime later (the first answer can be lost to the
// peer's own bring-up), and then on the usual RetransTime.
func TestLinkUpProbesAgainSoon(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Neigh = NeighConfig{MaxProbes: 5} })
	if k, err := h.st.Send([]TxPacket{{Buf: transport(32), Offset: Headroom, Dest: &Dest{Dst: peerV4, SrcPort: 0xc001}}}); k != 1 || err != nil {
		t.Fatalf("Send = %d, %v", k, err)
	}
	if !isARPRequestFor(h.next(), peerV4, false) {
		t.Fatal("no ARP request")
	}
	h.st.SetLinkUp(false)
	h.st.SetLinkUp(true)
	if !isARPRequestFor(h.next(), peerV4, false) {
		t.Fatal("no ARP request when the link came back")
	}
	h.clock.Advance(99 * time.Millisecond)
	h.quiet()
	h.clock.Advance(time.Millisecond)
	if !isARPRequestFor(h.next(), peerV4, false) {
		t.Fatal("no second ARP request 100 ms after the link came back")
	}
	h.clock.Advance(999 * time.Millisecond)
	h.quiet()
	h.clock.Advance(time.Millisecond)
	if !isARPRequestFor(h.next(), peerV4, false) {
		t.Fatal("no retry a RetransTime later")
	}
}
