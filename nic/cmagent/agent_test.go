package cmagent_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/nic/cmagent"
	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/cm"
	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
)

// fastCM has short CM timers so retransmissions come in milliseconds:
// response timeout 4.096 µs × 2^14 (67 ms) plus twice the packet life time.
var fastCM = cm.Config{CMResponseTimeout: 14, PacketLifeTime: 10}

type side struct {
	h    *nictest.Host
	ag   *cmagent.Agent
	pd   mem.PD
	scq  *transport.MemCQ
	rcq  *transport.MemCQ
	qp   *nic.QP
	buf  []byte
	key  uint32
	addr uint64
	ev   chan cmagent.Event
}

func newSide(t *testing.T, h *nictest.Host, addr uint64) *side {
	t.Helper()
	s := &side{h: h, scq: transport.NewMemCQ(256, nil), rcq: transport.NewMemCQ(256, nil), addr: addr,
		ev: make(chan cmagent.Event, 64)}
	s.ag = cmagent.New(h.Dev, cmagent.Config{CM: fastCM, ResolveTimeout: 300 * time.Millisecond})
	t.Cleanup(s.ag.Close)
	var err error
	if s.pd, err = h.Dev.Mem().AllocPD(); err != nil {
		t.Fatal(err)
	}
	s.buf = make([]byte, 1<<16)
	if s.key, err = h.Dev.Mem().RegMR(s.pd, mem.NewSliceBacking(s.buf), 0, uint64(len(s.buf)), addr,
		mem.LocalWrite|mem.RemoteWrite|mem.RemoteRead); err != nil {
		t.Fatal(err)
	}
	s.qp = s.newQP(t)
	return s
}

func (s *side) newQP(t *testing.T) *nic.QP {
	t.Helper()
	qp, err := s.h.Dev.CreateQP(nic.QPConfig{Type: transport.QPTypeRC, PD: s.pd, SendCQ: s.scq, RecvCQ: s.rcq,
		Cap: transport.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return qp
}

// handler queues events for the test; it never blocks the agent.
func (s *side) handler(t *testing.T) cmagent.Handler {
	return func(e cmagent.Event) bool {
		select {
		case s.ev <- e:
		default:
			t.Errorf("event queue full: %v lost", e.Kind)
		}
		return true
	}
}

func (s *side) next(t *testing.T, want cm.EventKind) cmagent.Event {
	t.Helper()
	select {
	case e := <-s.ev:
		if e.Kind != want {
			t.Fatalf("%v: event %v (reason %d), want %v", s.h.Addr, e.Kind, e.Reason, want)
		}
		return e
	case <-time.After(20 * time.Second):
		t.Fatalf("%v: no %v event", s.h.Addr, want)
	}
	return cmagent.Event{}
}

func state(q *nic.QP) transport.QPState { return q.Info().State }

// TestConnectWithLoss: a REQ, REP, RTU and DREQ each lost once on the link;
// the retransmissions bring the connection up, data flows over it, and the
// disconnect ends in ERR on both QPs and timewait exit.
func TestConnectWithLoss(t *testing.T) {
	ha, hb := nictest.Pair(t, 1500)
	a, b := newSide(t, ha, 0x1000000), newSide(t, hb, 0x2000000)
	la := nictest.NewCMLoss(1, mad.AttrConnectRequest, mad.AttrReadyToUse, mad.AttrDisconnectRequest)
	lb := nictest.NewCMLoss(1, mad.AttrConnectReply)
	ha.Link.SetHook(la.Hook)
	hb.Link.SetHook(lb.Hook)
	if _, err := b.ag.Listen(0, 7174, netip.Addr{}, b.handler(t)); err != nil {
		t.Fatal(err)
	}
	priv := []byte("hello from the active side")
	id, err := a.ag.Connect(context.Background(), netip.AddrPort{}, netip.AddrPortFrom(hb.Addr, 7174), a.qp,
		cmagent.ConnParams{RespRes: 1, InitDepth: 1, RetryCount: 7, RNRRetry: 7, PrivateData: priv}, a.handler(t))
	if err != nil {
		t.Fatal(err)
	}
	req := b.next(t, cm.EventConnectRequest)
	if r := req.Request; r == nil || r.RemoteQPN != a.qp.QPN() || r.Src.Addr() != ha.Addr || r.Dst.Port() != 7174 ||
		!bytes.HasPrefix(req.PrivateData, priv) {
		t.Fatalf("connect request %+v, private data %q", req.Request, req.PrivateData)
	}
	if err := b.ag.Accept(req.ID, b.qp, cmagent.ConnParams{RespRes: 1, InitDepth: 1, RNRRetry: 7, PrivateData: []byte("welcome")}, nil); err != nil {
		t.Fatal(err)
	}
	est := a.next(t, cm.EventEstablished)
	if est.ID != id || !bytes.HasPrefix(est.PrivateData, []byte("welcome")) {
		t.Errorf("established id %#x (want %#x), private data %q", est.ID, id, est.PrivateData)
	}
	b.next(t, cm.EventEstablished)
	if state(a.qp) != transport.StateRTS || state(b.qp) != transport.StateRTS {
		t.Fatalf("QPs %v %v after ESTABLISHED, want RTS", state(a.qp), state(b.qp))
	}
	if ai, bi := a.qp.Info(), b.qp.Info(); ai.DestQPN != b.qp.QPN() || bi.DestQPN != a.qp.QPN() {
		t.Errorf("dest QPNs %#x %#x, want %#x %#x", ai.DestQPN, bi.DestQPN, b.qp.QPN(), a.qp.QPN())
	}
	sendOne(t, a, b)

	if err := a.ag.Disconnect(id, nil); err != nil {
		t.Fatal(err)
	}
	d := b.next(t, cm.EventDisconnected)
	if err := b.ag.Disconnect(d.ID, nil); err != nil {
		t.Fatal(err)
	}
	a.next(t, cm.EventDisconnected)
	a.next(t, cm.EventTimewaitExit)
	b.next(t, cm.EventTimewaitExit)
	if state(a.qp) != transport.StateErr || state(b.qp) != transport.StateErr {
		t.Errorf("QPs %v %v after the disconnect, want ERR", state(a.qp), state(b.qp))
	}
	for _, c := range []struct {
		l    *nictest.CMLoss
		attr uint16
	}{{la, mad.AttrConnectRequest}, {lb, mad.AttrConnectReply}, {la, mad.AttrReadyToUse}, {la, mad.AttrDisconnectRequest}} {
		if c.l.Dropped(c.attr) != 1 {
			t.Errorf("%s: %d lost, want 1 (the hook saw none?)", mad.AttrName(mad.ClassCM, c.attr), c.l.Dropped(c.attr))
		}
	}
	if tc := a.ag.TableCounters(); tc.Retransmits < 2 {
		t.Errorf("active side retransmitted %d times, want REQ and DREQ again", tc.Retransmits)
	}
}

func sendOne(t *testing.T, a, b *side) {
	t.Helper()
	copy(a.buf, "rdma-ping-0")
	if err := b.qp.PostRecv(&transport.RecvWR{ID: 1, SGL: []transport.SGE{{Addr: b.addr, Length: 64, LKey: b.key}}}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(&transport.SendWR{ID: 2, Opcode: transport.WRSend, Flags: transport.SendSignaled,
		SGL: []transport.SGE{{Addr: a.addr, Length: 11, LKey: a.key}}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for b.rcq.Len() < 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	wc := make([]transport.WC, 1)
	if b.rcq.Poll(wc) != 1 || wc[0].Status != transport.WCSuccess || string(b.buf[:11]) != "rdma-ping-0" {
		t.Fatalf("receive over the connection: %+v %q", wc[0], b.buf[:11])
	}
}

// TestRejectUnknownService: a REQ for a port nobody listens on is answered
// REJ "invalid service ID" (reason 8), as rping -c to an unused port sees.
func TestRejectUnknownService(t *testing.T) {
	ha, hb := nictest.Pair(t, 1500)
	a, _ := newSide(t, ha, 0x1000000), newSide(t, hb, 0x2000000)
	if _, err := a.ag.Connect(context.Background(), netip.AddrPort{}, netip.AddrPortFrom(hb.Addr, 9999), a.qp, cmagent.ConnParams{}, a.handler(t)); err != nil {
		t.Fatal(err)
	}
	if e := a.next(t, cm.EventRejected); e.Reason != mad.RejInvalidServiceID {
		t.Errorf("REJ reason %d, want 8", e.Reason)
	}
	if c := counters(ha.Dev); c["cm_rx_rej"] != 1 || c["cm_tx_req"] != 1 {
		t.Errorf("counters %v", c)
	}
}

// TestRejectByConsumer: rdma_reject's REJ carries reason 28 and the
// listener's private data.
func TestRejectByConsumer(t *testing.T) {
	ha, hb := nictest.Pair(t, 1500)
	a, b := newSide(t, ha, 0x1000000), newSide(t, hb, 0x2000000)
	if _, err := b.ag.Listen(0, 7174, hb.Addr, b.handler(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ag.Connect(context.Background(), netip.AddrPort{}, netip.AddrPortFrom(hb.Addr, 7174), a.qp, cmagent.ConnParams{}, a.handler(t)); err != nil {
		t.Fatal(err)
	}
	req := b.next(t, cm.EventConnectRequest)
	if err := b.ag.Reject(req.ID, []byte("busy")); err != nil {
		t.Fatal(err)
	}
	e := a.next(t, cm.EventRejected)
	if e.Reason != mad.RejConsumerDefined || !bytes.HasPrefix(e.PrivateData, []byte("busy")) {
		t.Errorf("REJ reason %d private %q", e.Reason, e.PrivateData)
	}
}

func counters(d *nic.Device) map[string]uint64 {
	m := map[string]uint64{}
	d.GSICounters(func(n string, v uint64) { m[n] = v })
	return m
}

// TestConnectUnresolved: a destination nobody answers ARP for is an
// address error before any REQ leaves (rdma_resolve_addr's ADDR_ERROR).
func TestConnectUnresolved(t *testing.T) {
	ha, _ := nictest.Pair(t, 1500)
	a := newSide(t, ha, 0x1000000)
	_, err := a.ag.Connect(context.Background(), netip.AddrPort{}, netip.MustParseAddrPort("192.0.2.99:7174"), a.qp, cmagent.ConnParams{}, a.handler(t))
	if !errors.Is(err, cmagent.ErrUnresolved) {
		t.Fatalf("connect to an address nobody has: %v, want ErrUnresolved", err)
	}
	if c := counters(ha.Dev); c["cm_tx_req"] != 0 {
		t.Errorf("cm_tx_req %d: a REQ left for an unresolved address", c["cm_tx_req"])
	}
}

// TestResolveAddr: rdma_resolve_addr on the agent. The peer resolves to
// our address (picked, or the one given) and its GID index; a source that
// is not ours, one of another family than the destination and a
// destination that is not unicast are refused at once; a destination
// nobody answers for fails ErrUnresolved after the timeout asked, and a
// timeout past the agent's is cut to it.
func TestResolveAddr(t *testing.T) {
	ha, hb := nictest.Pair(t, 1500)
	a := newSide(t, ha, 0x1000000) // ResolveTimeout 300 ms
	ctx := context.Background()
	for _, src := range []netip.Addr{{}, netip.IPv4Unspecified(), ha.Addr} {
		r, err := a.ag.ResolveAddr(ctx, src, hb.Addr, 0)
		if err != nil {
			t.Fatalf("from %v: %v", src, err)
		}
		if r.Src != ha.Addr || r.Dst != hb.Addr || ha.GIDs.GIDAt(r.SGIDIndex).Addr() != ha.Addr {
			t.Errorf("from %v: %+v, want source %v and its GID's index", src, r, ha.Addr)
		}
	}
	if _, err := a.ag.ResolveAddr(ctx, netip.Addr{}, netip.AddrFrom16(hb.Addr.As16()), 0); err != nil {
		t.Errorf("IPv4-mapped destination: %v", err)
	}
	// A multicast group resolves at once, with no neighbour to ask (the
	// kernel's rdma_resolve_addr does; mckey resolves its group first).
	group := netip.MustParseAddr("239.1.2.3")
	if r, err := a.ag.ResolveAddr(ctx, netip.Addr{}, group, 0); err != nil || r.Src != ha.Addr || r.Dst != group {
		t.Errorf("multicast group: %+v, %v; want source %v", r, err, ha.Addr)
	}
	if ha.Dev.NeighborKnown(group) {
		t.Error("resolving a group made a neighbour entry")
	}
	for _, c := range []struct {
		name     string
		src, dst netip.Addr
		want     error
	}{
		{"source not ours", hb.Addr, hb.Addr, cmagent.ErrAddr},
		{"IPv4 source, IPv6 destination", ha.Addr, netip.MustParseAddr("2001:db8::1"), cmagent.ErrFamily},
		{"unspecified", netip.Addr{}, netip.IPv4Unspecified(), cmagent.ErrInvalidDst},
		{"none", netip.Addr{}, netip.Addr{}, cmagent.ErrInvalidDst},
	} {
		if _, err := a.ag.ResolveAddr(ctx, c.src, c.dst, 0); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	nobody := hb.Addr.As4()
	nobody[3] ^= 0x80
	for _, c := range []struct {
		timeout, atLeast, below time.Duration
	}{
		{50 * time.Millisecond, 50 * time.Millisecond, 250 * time.Millisecond},
		{time.Minute, 300 * time.Millisecond, 2 * time.Second},
	} {
		start := time.Now()
		_, err := a.ag.ResolveAddr(ctx, netip.Addr{}, netip.AddrFrom4(nobody), c.timeout)
		took := time.Since(start)
		if !errors.Is(err, cmagent.ErrUnresolved) {
			t.Fatalf("timeout %v: %v, want ErrUnresolved", c.timeout, err)
		}
		if took < c.atLeast || took >= c.below {
			t.Errorf("timeout %v: failed after %v, want [%v, %v)", c.timeout, took, c.atLeast, c.below)
		}
	}
}
