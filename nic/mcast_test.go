package nic_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/nic/gid"
	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/wire"
)

// The Q_Key rdma_cm gives multicast QPs (cma.c: RDMA_UDP_QKEY).
const mcQKey = 0x01234567

var mgid = gid.FromAddr(netip.MustParseAddr("239.1.2.3"))

// udSide makes a UD QP in RTS with Q_Key qkey, its receive buffers posted.
func udSide(t *testing.T, h *nictest.Host, qkey uint32, cfg func(*nic.QPConfig)) *side {
	t.Helper()
	s := newSideCfg(t, h, transport.QPTypeUD, 0x30000000, cfg)
	for _, st := range []struct {
		a    transport.QPAttr
		mask transport.AttrMask
	}{
		{transport.QPAttr{State: transport.StateInit, QKey: qkey, Port: 1}, transport.AttrState | transport.AttrPKeyIndex | transport.AttrPort | transport.AttrQKey},
		{transport.QPAttr{State: transport.StateRTR}, transport.AttrState},
		{transport.QPAttr{State: transport.StateRTS, SQPSN: 1}, transport.AttrState | transport.AttrSQPSN},
	} {
		if err := s.qp.Modify(&st.a, st.mask); err != nil {
			t.Fatalf("UD QP to %v: %v", st.a.State, err)
		}
	}
	for i := range 16 {
		if err := s.qp.PostRecv(&transport.RecvWR{ID: uint64(i), SGL: s.sge(i*4096, 4096)}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// sendMcast sends msg from s to the group mgid, QPN 0xFFFFFF.
func sendMcast(t *testing.T, s *side, group gid.GID, qkey uint32, msg []byte) {
	t.Helper()
	off := 1 << 19
	copy(s.buf[off:], msg)
	av := transport.AddressVector{DGID: group, SGIDIndex: s.h.GIDIndex(), HopLimit: 64, Port: 1}
	if err := s.h.Dev.ResolveAH(&av); err != nil {
		t.Fatal(err)
	}
	if err := s.qp.PostSend(&transport.SendWR{ID: 99, Opcode: transport.WRSend, Flags: transport.SendSignaled,
		SGL: s.sge(off, len(msg)), AH: &av, RemoteQPN: wire.MulticastQPN, RemoteQKey: qkey}); err != nil {
		t.Fatal(err)
	}
	if wc := waitCQ(t, s.scq, 1); wc[0].Status != transport.WCSuccess {
		t.Fatalf("multicast send: %v", wc[0].Status)
	}
}

// received waits for s's receive completions until quiet for a while and
// returns their payloads (after the 40-byte GRH).
func received(t *testing.T, s *side) [][]byte {
	t.Helper()
	s.h.Dev.Sync()
	var out [][]byte
	deadline := time.Now().Add(50 * time.Millisecond)
	wcs := make([]transport.WC, 16)
	for time.Now().Before(deadline) {
		n := s.rcq.Poll(wcs)
		for _, wc := range wcs[:n] {
			if wc.Status != transport.WCSuccess {
				t.Fatalf("receive completion %v", wc.Status)
			}
			b := s.buf[int(wc.WRID)*4096+transport.GRHLen : int(wc.WRID)*4096+int(wc.ByteLen)]
			out = append(out, bytes.Clone(b))
		}
		time.Sleep(time.Millisecond)
	}
	return out
}

func TestMcastAttachRules(t *testing.T) {
	ha, _ := nictest.Pair(t, 1500)
	ud := udSide(t, ha, mcQKey, nil)
	rc := newSide(t, ha, transport.QPTypeRC, 0x40000000)
	unicast := gid.FromAddr(netip.MustParseAddr("192.0.2.77"))
	if err := ha.Dev.AttachMcast(ud.qp, unicast); !errors.Is(err, transport.ErrInvalid) {
		t.Errorf("attach to a unicast GID: %v, want EINVAL", err)
	}
	if err := ha.Dev.AttachMcast(rc.qp, mgid); !errors.Is(err, transport.ErrInvalid) {
		t.Errorf("attach an RC QP: %v, want EINVAL", err)
	}
	if err := ha.Dev.DetachMcast(ud.qp, mgid); !errors.Is(err, nic.ErrNotAttached) {
		t.Errorf("detach before attach: %v, want not attached", err)
	}
	for range 2 { // attaching twice is no error and one membership (rxe)
		if err := ha.Dev.AttachMcast(ud.qp, mgid); err != nil {
			t.Fatal(err)
		}
	}
	if got := ha.Dev.McastGroups()[mgid]; len(got) != 1 || got[0] != ud.qp.QPN() {
		t.Errorf("group members %v, want [%#x]", got, ud.qp.QPN())
	}
	if err := ha.Dev.DetachMcast(ud.qp, mgid); err != nil {
		t.Fatal(err)
	}
	if len(ha.Dev.McastGroups()) != 0 {
		t.Errorf("groups after the last detach: %v", ha.Dev.McastGroups())
	}
	ipv6 := gid.FromAddr(netip.MustParseAddr("ff0e::1:2"))
	if err := ha.Dev.AttachMcast(ud.qp, ipv6); err != nil {
		t.Errorf("attach to an IPv6 group: %v", err)
	}
	ud.qp.Destroy()
	if len(ha.Dev.McastGroups()) != 0 {
		t.Errorf("a destroyed QP stays in its group: %v", ha.Dev.McastGroups())
	}
}

func TestMcastLimits(t *testing.T) {
	ha, _ := nictest.PairLimits(t, 1500, nic.Limits{MaxMcastGrp: 2, MaxMcastQPAttach: 2, MaxTotalMcastQPAttach: 3})
	if a := ha.Dev.Attr(); a.MaxMcastGrp != 2 || a.MaxMcastQPAttach != 2 || a.MaxTotalMcastQPAttach != 3 {
		t.Errorf("device attributes %d/%d/%d, want the limits 2/2/3", a.MaxMcastGrp, a.MaxMcastQPAttach, a.MaxTotalMcastQPAttach)
	}
	qs := []*side{udSide(t, ha, 1, nil), udSide(t, ha, 1, nil), udSide(t, ha, 1, nil)}
	g := func(i byte) gid.GID { return gid.FromAddr(netip.AddrFrom4([4]byte{239, 0, 0, i})) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ha.Dev.AttachMcast(qs[0].qp, g(1)))
	must(ha.Dev.AttachMcast(qs[1].qp, g(1)))
	if err := ha.Dev.AttachMcast(qs[2].qp, g(1)); !errors.Is(err, nic.ErrLimit) {
		t.Errorf("third QP in a group of at most 2: %v, want the limit", err)
	}
	must(ha.Dev.AttachMcast(qs[0].qp, g(2)))
	if err := ha.Dev.AttachMcast(qs[0].qp, g(3)); !errors.Is(err, nic.ErrLimit) {
		t.Errorf("third group of at most 2: %v, want the limit", err)
	}
	if err := ha.Dev.AttachMcast(qs[1].qp, g(2)); !errors.Is(err, nic.ErrLimit) {
		t.Errorf("fourth attachment of at most 3: %v, want the limit", err)
	}
	must(ha.Dev.DetachMcast(qs[0].qp, g(1)))
	must(ha.Dev.AttachMcast(qs[1].qp, g(2))) // room again
}

// Fan-out on one device: every attached QP with the group's Q_Key gets
// its own copy, the sender's own QP included (as kernel rxe), unless it
// blocks its own loopback; a QP with another Q_Key or not attached gets
// nothing.
func TestMcastFanOutAndLoopback(t *testing.T) {
	ha, _ := nictest.Pair(t, 1500)
	recv := []*side{udSide(t, ha, mcQKey, nil), udSide(t, ha, mcQKey, nil), udSide(t, ha, mcQKey, nil)}
	wrongKey := udSide(t, ha, 0x1111, nil)
	outsider := udSide(t, ha, mcQKey, nil)
	sender := udSide(t, ha, mcQKey, nil)
	blocked := udSide(t, ha, mcQKey, func(c *nic.QPConfig) { c.BlockSelfMcastLB = true })
	for _, s := range append(recv, wrongKey, sender, blocked) {
		if err := ha.Dev.AttachMcast(s.qp, mgid); err != nil {
			t.Fatal(err)
		}
	}
	msg := []byte("market data tick 1")
	sendMcast(t, sender, mgid, mcQKey, msg)
	for i, s := range append(recv, sender) {
		got := received(t, s)
		if len(got) != 1 || !bytes.Equal(got[0], msg) {
			t.Errorf("attached QP %d: %q, want one copy of %q", i, got, msg)
		}
	}
	if got := received(t, wrongKey); len(got) != 0 {
		t.Errorf("QP with another Q_Key received %q", got)
	}
	if c := wrongKey.qp.Counters().Get(transport.RcvdDropped); c != 1 {
		t.Errorf("Q_Key mismatch counted %d times in rcvd_dropped, want 1", c)
	}
	if got := received(t, outsider); len(got) != 0 {
		t.Errorf("QP not attached received %q", got)
	}
	if got := received(t, blocked); len(got) != 1 {
		t.Errorf("BLOCK_SELF_MCAST_LB QP got %d copies of another QP's send, want 1", len(got))
	}
	// The blocking QP sends: everyone else gets it, it does not.
	sendMcast(t, blocked, mgid, mcQKey, msg)
	if got := received(t, blocked); len(got) != 0 {
		t.Errorf("BLOCK_SELF_MCAST_LB QP received its own send: %q", got)
	}
	for i, s := range append(recv, sender) {
		if got := received(t, s); len(got) != 1 {
			t.Errorf("attached QP %d got %d copies of the blocking QP's send, want 1", i, len(got))
		}
	}
	// Detached: no more copies.
	if err := ha.Dev.DetachMcast(recv[1].qp, mgid); err != nil {
		t.Fatal(err)
	}
	sendMcast(t, sender, mgid, mcQKey, msg)
	if got := received(t, recv[1]); len(got) != 0 {
		t.Errorf("detached QP received %q", got)
	}
	if got := received(t, recv[2]); len(got) != 1 {
		t.Errorf("attached QP got %d copies, want 1", len(got))
	}
}

// A packet to QPN 0xFFFFFF of a group nobody here joined is dropped and
// counted; a unicast QPN to a group address still goes to that QP (rxe
// looks up by QPN unless it is 0xFFFFFF).
func TestMcastUnjoinedGroupDropped(t *testing.T) {
	ha, _ := nictest.Pair(t, 1500)
	sender := udSide(t, ha, mcQKey, nil)
	other := udSide(t, ha, mcQKey, nil)
	if err := ha.Dev.AttachMcast(other.qp, gid.FromAddr(netip.MustParseAddr("239.9.9.9"))); err != nil {
		t.Fatal(err)
	}
	before := ha.Dev.Counters().Get(transport.RcvdDropped)
	// Sent to another group: on the wire, nothing loops back.
	sendMcast(t, sender, mgid, mcQKey, []byte("x"))
	if got := received(t, other); len(got) != 0 {
		t.Errorf("QP of another group received %q", got)
	}
	if got := ha.Dev.Counters().Get(transport.RcvdDropped); got != before {
		t.Errorf("rcvd_dropped %d → %d for a send that never looped back", before, got)
	}
}

// groupPort is a port that records its IP group memberships.
type groupPort struct {
	nic.Sender
	joins, leaves []netip.Addr
}

func (p *groupPort) JoinGroup(g netip.Addr) error  { p.joins = append(p.joins, g); return nil }
func (p *groupPort) LeaveGroup(g netip.Addr) error { p.leaves = append(p.leaves, g); return nil }

// The port is in a group while a QP is attached or an rdma_cm join holds
// it: it joins on the first reason and leaves after the last, once each.
func TestMcastPortMembership(t *testing.T) {
	ha, _ := nictest.Pair(t, 1500)
	port := &groupPort{Sender: ha.Stack}
	ha.Dev.Attach(port)
	a, b := udSide(t, ha, mcQKey, nil), udSide(t, ha, mcQKey, nil)
	g := mgid.Addr()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ha.Dev.AttachMcast(a.qp, mgid))
	must(ha.Dev.AttachMcast(b.qp, mgid))
	must(ha.Dev.HoldGroup(mgid))
	if len(port.joins) != 1 || port.joins[0] != g {
		t.Errorf("joins %v, want one of %v", port.joins, g)
	}
	must(ha.Dev.DetachMcast(a.qp, mgid))
	b.qp.Destroy()
	if len(port.leaves) != 0 {
		t.Errorf("left %v while an rdma_cm join holds the group", port.leaves)
	}
	ha.Dev.ReleaseGroup(mgid)
	ha.Dev.ReleaseGroup(mgid) // one too many: nothing
	if len(port.leaves) != 1 || port.leaves[0] != g {
		t.Errorf("leaves %v, want one of %v", port.leaves, g)
	}
	if err := ha.Dev.HoldGroup(gid.FromAddr(netip.MustParseAddr("192.0.2.5"))); !errors.Is(err, transport.ErrInvalid) {
		t.Errorf("hold a unicast address: %v, want EINVAL", err)
	}
	// A port attached later joins what is held.
	must(ha.Dev.HoldGroup(mgid))
	later := &groupPort{Sender: ha.Stack}
	ha.Dev.Attach(later)
	if len(later.joins) != 1 {
		t.Errorf("a new port joined %v, want the held group", later.joins)
	}
}
