package verbs_test

import (
	"errors"
	"net/netip"
	"slices"
	"syscall"
	"testing"

	"github.com/vrnic/vrnicd/nic/gid"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

const mcQKey = 0x01234567 // rdma_cm's multicast Q_Key (RDMA_UDP_QKEY)

func mcastGID(s string) verbs.GID { return verbs.GID(gid.FromAddr(netip.MustParseAddr(s))) }

// sendToGroup posts one message from s to the group and waits for its
// completion.
func sendToGroup(t *testing.T, s *side, ah *verbs.AH, id uint64, payload string) {
	t.Helper()
	copy(s.buf.Bytes()[8192:], payload)
	if err := s.qp.PostSend(verbs.SendWR{ID: id, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, AH: ah,
		RemoteQPN: verbs.MulticastQPN, RemoteQKey: mcQKey, SGL: []verbs.SGE{s.mr.SGE(8192, uint64(len(payload)))}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, s.scq, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("multicast send %+v", wc)
	}
}

// Through the socket: ibv_attach_mcast's errors (ib_core's and rxe's),
// the device's advertised limits, and a message to the group reaching
// every attached QP of the client, the sender's own too.
func TestMcastThroughSocket(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	attr, err := d.Query()
	if err != nil {
		t.Fatal(err)
	}
	if attr.MaxMcastGrp != 8192 || attr.MaxMcastQPAttach != 56 || attr.MaxTotalMcastQPAttach != 0x70000 {
		t.Errorf("multicast limits %d/%d/%#x, want kernel rxe's 8192/56/0x70000", attr.MaxMcastGrp, attr.MaxMcastQPAttach,
			attr.MaxTotalMcastQPAttach)
	}
	g := mcastGID("239.1.1.1")
	rc := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	if err := rc.qp.AttachMcast(g); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("attach an RC QP: %v, want EINVAL", err)
	}
	a := newSide(t, d, e.host, verbs.QPTypeUD, nil, nil)
	b := newSide(t, d, e.host, verbs.QPTypeUD, nil, nil)
	udReady(t, a, mcQKey)
	udReady(t, b, mcQKey)
	if err := a.qp.AttachMcast(verbs.GID(e.host.GID())); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("attach to a unicast GID: %v, want EINVAL", err)
	}
	if err := a.qp.DetachMcast(g); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("detach from a group not joined: %v, want EINVAL", err)
	}
	for _, s := range []*side{a, b} {
		if err := s.qp.AttachMcast(g); err != nil {
			t.Fatal(err)
		}
		if err := s.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{s.mr.SGE(0, 40+512)}}); err != nil {
			t.Fatal(err)
		}
	}
	ah, err := a.pd.CreateAH(verbs.AHAttr{DGID: g, SGIDIndex: a.gidx, HopLimit: 64, Port: 1})
	if err != nil {
		t.Fatal(err)
	}
	sendToGroup(t, a, ah, 5, "to the group")
	for i, s := range []*side{a, b} {
		wc := pollN(t, s.rcq, 1)[0]
		if wc.Status != verbs.WCSuccess || wc.ByteLen != 40+12 || wc.SrcQP != a.qp.QPN() || wc.Flags&verbs.WCWithGRH == 0 {
			t.Errorf("QP %d: receive %+v", i, wc)
		}
		if got := string(s.buf.Bytes()[40:52]); got != "to the group" {
			t.Errorf("QP %d: payload %q", i, got)
		}
	}
	if err := b.qp.Destroy(); err != nil { // detaches it
		t.Fatal(err)
	}
	if err := a.qp.DetachMcast(g); err != nil {
		t.Fatal(err)
	}
}

// BLOCK_SELF_MCAST_LB through the socket: the blocking QP's own message
// does not come back to it; the group's other QP gets it.
func TestMcastBlockSelfThroughSocket(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	a := newSideInit(t, d, e.host, verbs.QPTypeUD, nil, nil, func(ia *verbs.QPInitAttr) { ia.BlockSelfMcastLB = true })
	b := newSide(t, d, e.host, verbs.QPTypeUD, nil, nil)
	g := mcastGID("239.2.2.2")
	for _, s := range []*side{a, b} {
		udReady(t, s, mcQKey)
		if err := s.qp.AttachMcast(g); err != nil {
			t.Fatal(err)
		}
		if err := s.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{s.mr.SGE(0, 40+512)}}); err != nil {
			t.Fatal(err)
		}
	}
	ah, err := a.pd.CreateAH(verbs.AHAttr{DGID: g, SGIDIndex: a.gidx, HopLimit: 64, Port: 1})
	if err != nil {
		t.Fatal(err)
	}
	sendToGroup(t, a, ah, 1, "not to myself")
	if wc := pollN(t, b.rcq, 1)[0]; wc.Status != verbs.WCSuccess || wc.SrcQP != a.qp.QPN() {
		t.Errorf("the group's other QP: %+v", wc)
	}
	e.host.Dev.Sync()
	var wc [1]verbs.WC
	if n := a.rcq.Poll(wc[:]); n != 0 {
		t.Errorf("the blocking QP received its own message (%d completions)", n)
	}
}

// rdma_cm's join through the SDK: the kernel's answers (an IPv6 group
// ENOTSUPP, a unicast one EINVAL), the event's values (MGID ::ffff:group,
// hop limit 64, QPN 0xFFFFFF, Q_Key 0x01234567), and a message sent with
// them reaching a QP attached to the MGID.
func TestJoinMulticast(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	if _, err := d.JoinMulticast(netip.MustParseAddr("ff0e::7"), verbs.JoinOptions{}); !errors.Is(err, syscall.Errno(524)) {
		t.Errorf("IPv6 group: %v, want the kernel's ENOTSUPP (524)", err)
	}
	if _, err := d.JoinMulticast(e.host.Addr, verbs.JoinOptions{}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("unicast group: %v, want EINVAL", err)
	}
	group := netip.MustParseAddr("239.3.3.3")
	g, err := d.JoinMulticast(group, verbs.JoinOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Leave()
	if groups := e.host.Stack.Groups(); !slices.Contains(groups, group) {
		t.Errorf("the port's groups after a full member's join: %v, want %v in them", groups, group)
	}
	if g.MGID != mcastGID("239.3.3.3") || g.AH.DGID != g.MGID || g.AH.HopLimit != 64 || g.AH.TrafficClass != 0 ||
		g.QPN != 0xFFFFFF || g.QKey != mcQKey || g.Local != e.host.Addr || int(g.AH.SGIDIndex) != int(e.host.GIDIndex()) {
		t.Errorf("join: %+v", g)
	}
	r := newSide(t, d, e.host, verbs.QPTypeUD, nil, nil)
	s := newSide(t, d, e.host, verbs.QPTypeUD, nil, nil)
	udReady(t, r, g.QKey)
	udReady(t, s, g.QKey)
	if err := r.qp.AttachMcast(g.MGID); err != nil {
		t.Fatal(err)
	}
	if err := r.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{r.mr.SGE(0, 40+512)}}); err != nil {
		t.Fatal(err)
	}
	ah, err := s.pd.CreateAH(g.AH)
	if err != nil {
		t.Fatal(err)
	}
	sendToGroup(t, s, ah, 1, "joined")
	if wc := pollN(t, r.rcq, 1)[0]; wc.Status != verbs.WCSuccess || string(r.buf.Bytes()[40:46]) != "joined" {
		t.Errorf("receive %+v %q", wc, r.buf.Bytes()[40:46])
	}
	if err := r.qp.DetachMcast(g.MGID); err != nil {
		t.Fatal(err)
	}
	if err := g.Leave(); err != nil {
		t.Fatal(err)
	}
	if groups := e.host.Dev.McastGroups(); len(groups) != 0 {
		t.Errorf("groups after leave and detach: %v", groups)
	}
	if groups := e.host.Stack.Groups(); len(groups) != 0 {
		t.Errorf("the port is still in %v after the leave and the detach", groups)
	}
	so, err := d.JoinMulticast(group, verbs.JoinOptions{SendOnly: true})
	if err != nil || !so.SendOnly {
		t.Fatalf("send-only join: %+v, %v", so, err)
	}
	if groups := e.host.Stack.Groups(); len(groups) != 0 {
		t.Errorf("a send-only join made the port join %v (the kernel sends no IGMP for one)", groups)
	}
	if err := so.Leave(); err != nil {
		t.Fatal(err)
	}
}

// The client's multicast memberships are bounded: attachments and rdma_cm
// joins count together against Limits.MaxMcast (EDQUOT past it), and a
// detach, a leave or a destroyed QP gives them back.
func TestMcastQuota(t *testing.T) {
	e := newEnv(t, verbsock.Limits{MaxMcast: 3})
	d := e.client()
	if got := d.Limits().MaxMcast; got != 3 {
		t.Fatalf("hello's MaxMcast %d, want 3", got)
	}
	a := newSide(t, d, e.host, verbs.QPTypeUD, nil, nil)
	udReady(t, a, mcQKey)
	for _, g := range []string{"239.0.0.1", "239.0.0.2"} {
		if err := a.qp.AttachMcast(mcastGID(g)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.qp.AttachMcast(mcastGID("239.0.0.1")); err != nil { // again: no new membership
		t.Fatal(err)
	}
	j, err := d.JoinMulticast(netip.MustParseAddr("239.0.0.3"), verbs.JoinOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.qp.AttachMcast(mcastGID("239.0.0.4")); !errors.Is(err, syscall.EDQUOT) {
		t.Errorf("fourth membership of 3: %v, want EDQUOT", err)
	}
	if _, err := d.JoinMulticast(netip.MustParseAddr("239.0.0.5"), verbs.JoinOptions{}); !errors.Is(err, syscall.EDQUOT) {
		t.Errorf("fourth membership (a join) of 3: %v, want EDQUOT", err)
	}
	if err := j.Leave(); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.AttachMcast(mcastGID("239.0.0.4")); err != nil {
		t.Errorf("after a leave: %v", err)
	}
	if err := a.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	b := newSide(t, d, e.host, verbs.QPTypeUD, nil, nil)
	udReady(t, b, mcQKey)
	for _, g := range []string{"239.0.1.1", "239.0.1.2", "239.0.1.3"} {
		if err := b.qp.AttachMcast(mcastGID(g)); err != nil {
			t.Errorf("after the QP holding 3 was destroyed: %v", err)
		}
	}
}
