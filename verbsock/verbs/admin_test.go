package verbs_test

import (
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/server"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// ListQPs and Stats after a three-packet RDMA WRITE between two QPs of the
// device: both QPs with their type, state, peer, owner and PSNs; the
// writer's and the target's counters; the device totals as their sum; and
// another client sees the same.
func TestListQPsAndStats(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	a := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	b := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	connect(t, a, b) // SQ PSN and RQ PSN 100, path MTU 1024
	if err := a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 3000)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, a.scq, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE: %+v", wc)
	}
	other := e.client() // any client may ask
	listQPsAfterWrite(t, other, a, b)
	st := statsAfterWrite(t, other, a, b)

	// Destroyed: gone from the list, its counts stay in the device's.
	if err := a.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	qs, err := other.ListQPs()
	if err != nil || len(qs) != 1 || qs[0].QPN != b.qp.QPN() {
		t.Fatalf("after destroy: %+v %v", qs, err)
	}
	st2, err := other.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if v := counterOf(t, &st2, "sent_pkts"); v < counterOf(t, &st, "sent_pkts") {
		t.Errorf("device sent_pkts went down from %d to %d", counterOf(t, &st, "sent_pkts"), v)
	}
}

// counterOf is the named counter of a Stats or QPStats; the test fails if
// there is none.
func counterOf(t *testing.T, c interface{ Counter(string) (uint64, bool) }, name string) uint64 {
	t.Helper()
	v, ok := c.Counter(name)
	if !ok {
		t.Fatalf("no counter %q", name)
	}
	return v
}

// listQPsAfterWrite: ListQPs shows a's 3-packet WRITE to b in both QPs'
// PSNs (from 100), their peers and owner.
func listQPsAfterWrite(t *testing.T, other *verbs.Device, a, b *side) {
	t.Helper()
	var qa, qb verbs.QPInfo
	waitFor(t, "PSNs published", func() bool {
		qs, err := other.ListQPs()
		if err != nil {
			t.Fatal(err)
		}
		if len(qs) != 2 {
			t.Fatalf("ListQPs: %+v, want 2 QPs", qs)
		}
		for _, q := range qs {
			switch q.QPN {
			case a.qp.QPN():
				qa = q
			case b.qp.QPN():
				qb = q
			default:
				t.Fatalf("unknown QP %+v", q)
			}
		}
		// Each side publishes its PSNs when its owner runs: the target's
		// send owner, which never sends, may run after the WRITE is done.
		return qa.CompPSN == 103 && qb.RecvPSN == 103 && qb.SendPSN == 100
	})
	pid := os.Getpid()
	if qa.Type != verbs.QPTypeRC || qa.State != verbs.QPStateRTS || qa.DestQPN != b.qp.QPN() || qa.SendPSN != 103 ||
		qa.Outstanding != 0 || qa.Owner != pid {
		t.Errorf("writer %+v (owner want %d)", qa, pid)
	}
	if qb.DestQPN != a.qp.QPN() || qb.SendPSN != 100 || qb.Owner != pid {
		t.Errorf("target %+v", qb)
	}
}

// statsAfterWrite: Stats counts the WRITE's packets and ACKs on both QPs,
// and the device's counters are the QPs' sums.
func statsAfterWrite(t *testing.T, other *verbs.Device, a, b *side) verbs.Stats {
	t.Helper()
	st, err := other.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Device) != len(transport.CounterNames()) || len(st.QPs) != 2 {
		t.Fatalf("Stats: %d device counters, %d QPs", len(st.Device), len(st.QPs))
	}
	byQPN := map[uint32]*verbs.QPStats{}
	for i := range st.QPs {
		byQPN[st.QPs[i].QPN] = &st.QPs[i]
	}
	sa, sb := byQPN[a.qp.QPN()], byQPN[b.qp.QPN()]
	if sa == nil || sb == nil {
		t.Fatalf("Stats QPs %+v", st.QPs)
	}
	get := func(c interface{ Counter(string) (uint64, bool) }, name string) uint64 {
		t.Helper()
		return counterOf(t, c, name)
	}
	if n := get(sa, "sent_pkts"); n != 3 {
		t.Errorf("writer sent_pkts %d, want 3", n)
	}
	if n := get(sb, "rcvd_pkts"); n != 3 {
		t.Errorf("target rcvd_pkts %d, want 3", n)
	}
	if get(sb, "sent_pkts") == 0 || get(sa, "rcvd_pkts") != get(sb, "sent_pkts") {
		t.Errorf("ACKs: target sent %d, writer received %d", get(sb, "sent_pkts"), get(sa, "rcvd_pkts"))
	}
	for _, name := range transport.CounterNames() {
		if dv := get(&st, name); dv != get(sa, name)+get(sb, name) {
			t.Errorf("device %s = %d, QPs %d + %d", name, dv, get(sa, name), get(sb, name))
		}
	}
	if _, ok := st.Counter("no_such_counter"); ok {
		t.Error("a counter that does not exist was found")
	}
	return st
}

// With the port's counters configured, Stats shows them after the
// transport's, and the link layer's icrc_errors is the device's.
func TestStatsPortCounters(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	srv, err := server.New(server.Config{Device: e.host.Dev, ExtraCounters: e.host.Stack.Counters().Each})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	d := e.dial(srv)
	e.host.Stack.Counters().ICRCErrors.Add(2)
	st, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := st.Counter("icrc_errors"); !ok || v != 2 {
		t.Errorf("icrc_errors %d %v, want 2", v, ok)
	}
	n := len(transport.CounterNames())
	if len(st.Device) <= n || st.Device[n].Name != "frames_in" {
		t.Fatalf("device counters %+v: want the port's (frames_in first) after the transport's %d", st.Device, n)
	}
	if _, ok := st.Counter("roce_in"); !ok {
		t.Error("no roce_in")
	}
}

// A daemon whose pages do not go up in QPN is a protocol error, not an
// endless loop.
func TestAdminPagesMustAdvance(t *testing.T) {
	a, b, err := verbsock.Socketpair()
	if err != nil {
		t.Fatal(err)
	}
	go fakeDaemon(verbsock.NewConn(a))
	d, err := verbs.OpenConn(b)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.ListQPs(); !errors.Is(err, syscall.EPROTO) {
		t.Errorf("ListQPs from a daemon that repeats its page: %v, want EPROTO", err)
	}
	if _, err := d.Stats(); !errors.Is(err, syscall.EPROTO) {
		t.Errorf("Stats from a daemon that repeats its page: %v, want EPROTO", err)
	}
}

// fakeDaemon answers hello and query_device, and every admin page with one
// QP and a Next that goes nowhere.
func fakeDaemon(c *verbsock.Conn) {
	defer c.Close()
	for {
		h, _, fds, err := c.Read()
		if err != nil {
			return
		}
		verbsock.CloseFDs(fds)
		var resp any
		switch h.Op {
		case verbsock.OpHello:
			r := &verbsock.HelloResp{Version: 1, PageSize: uint32(os.Getpagesize())}
			copy(r.DevName[:], "fake")
			resp = r
		case verbsock.OpQueryDevice:
			resp = &verbsock.DeviceAttr{}
		case verbsock.OpListQPs:
			r := &verbsock.ListQPsResp{Count: 1, Next: 0x11}
			r.QPs[0].QPN = 0x11
			resp = r
		case verbsock.OpQueryStats:
			r := &verbsock.QueryStatsResp{NumQPs: 1, Next: 0x11}
			r.QPs[0].QPN = 0x11
			resp = r
		default:
			return
		}
		if c.Write(verbsock.Header{Version: 1, Op: h.Op, ID: h.ID, Flags: verbsock.FlagReply}, verbsock.Encode(nil, resp), nil, 0) != nil {
			return
		}
	}
}
