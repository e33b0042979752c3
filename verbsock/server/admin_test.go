package server_test

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/server"
)

// makeQPs creates n QPs on the device directly (no client owns them).
func makeQPs(t testing.TB, h *nictest.Host, n int) []*nic.QP {
	t.Helper()
	pd, err := h.Dev.Mem().AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq := transport.NewMemCQ(16, nil)
	qps := make([]*nic.QP, n)
	for i := range qps {
		typ := []transport.QPType{transport.QPTypeRC, transport.QPTypeUC, transport.QPTypeUD}[i%3]
		if qps[i], err = h.Dev.CreateQP(nic.QPConfig{Type: typ, PD: pd, SendCQ: cq, RecvCQ: cq,
			Cap: transport.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			t.Fatalf("QP %d: %v", i, err)
		}
	}
	return qps
}

// list_qps and query_stats page through thousands of QPs: every live QP
// once, in QPN order, pages no larger than a frame holds; QPs destroyed
// between pages are left out, the rest still come.
func TestAdminPagesThousandsOfQPs(t *testing.T) {
	s, h := newServer(t, verbsock.Limits{})
	r := dialRaw(t, s, true)
	const n = 3000
	qps := makeQPs(t, h, n)
	byQPN := map[uint32]*nic.QP{}
	for _, q := range qps {
		byQPN[q.QPN()] = q
	}

	// list_qps, destroying the first 10 QPs of the second page before
	// asking for it.
	var first verbsock.ListQPsResp
	if err := r.do(verbsock.OpListQPs, &verbsock.PageReq{}, nil, &first); err != nil {
		t.Fatal(err)
	}
	if first.Count != verbsock.ListQPsPage || first.Next == 0 {
		t.Fatalf("first page: %d QPs, next %#x; want a full page and more", first.Count, first.Next)
	}
	gone := map[uint32]bool{}
	for qpn := first.Next; len(gone) < 10; qpn++ {
		if q := byQPN[qpn]; q != nil {
			q.Destroy()
			gone[qpn] = true
		}
	}
	adminListQPs(t, r, first, byQPN, gone)
	adminQueryStats(t, r, byQPN, gone)

	// A page asked for without a first page takes its own snapshot.
	r2 := dialRaw(t, s, true)
	var mid verbsock.ListQPsResp
	if err := r2.do(verbsock.OpListQPs, &verbsock.PageReq{Start: first.Next}, nil, &mid); err != nil {
		t.Fatal(err)
	}
	if mid.Count == 0 || mid.QPs[0].QPN < first.Next {
		t.Fatalf("page from %#x: %d QPs, first %#x", first.Next, mid.Count, mid.QPs[0].QPN)
	}
}

// adminListQPs pages list_qps on from the first page: each live QP once, in
// QPN order, none of the gone ones, in as many pages as the count needs.
func adminListQPs(t *testing.T, r *raw, first verbsock.ListQPsResp, byQPN map[uint32]*nic.QP, gone map[uint32]bool) {
	t.Helper()
	n := len(byQPN)
	seen := map[uint32]bool{}
	last := uint32(0)
	check := func(e verbsock.QPEntry) {
		t.Helper()
		if e.QPN <= last {
			t.Fatalf("QP %#x after %#x", e.QPN, last)
		}
		last = e.QPN
		q := byQPN[e.QPN]
		if q == nil || gone[e.QPN] {
			t.Fatalf("QP %#x listed (not a live QP)", e.QPN)
		}
		if e.Type != uint8(q.Engine().Type()) || e.State != uint8(transport.StateReset) || e.Owner != 0 || e.Outstanding != 0 {
			t.Fatalf("QP %#x entry %+v", e.QPN, e)
		}
		seen[e.QPN] = true
	}
	for _, e := range first.QPs[:first.Count] {
		check(e)
	}
	pages := 1
	for next := first.Next; next != 0; pages++ {
		var p verbsock.ListQPsResp
		if err := r.do(verbsock.OpListQPs, &verbsock.PageReq{Start: next}, nil, &p); err != nil {
			t.Fatal(err)
		}
		for _, e := range p.QPs[:p.Count] {
			if e.QPN < next {
				t.Fatalf("page from %#x holds QP %#x", next, e.QPN)
			}
			check(e)
		}
		if p.Next != 0 && p.Next <= last {
			t.Fatalf("next %#x after QP %#x", p.Next, last)
		}
		next = p.Next
	}
	if len(seen) != n-len(gone) {
		t.Fatalf("listed %d QPs, want %d", len(seen), n-len(gone))
	}
	if want := (n + verbsock.ListQPsPage - 1) / verbsock.ListQPsPage; pages != want {
		t.Errorf("%d pages, want %d", pages, want)
	}
}

// adminQueryStats pages query_stats: the device counters on every page,
// each live QP once.
func adminQueryStats(t *testing.T, r *raw, byQPN map[uint32]*nic.QP, gone map[uint32]bool) {
	t.Helper()
	n := len(byQPN)
	seen := map[uint32]bool{}
	pages := 0
	for start, done := uint32(0), false; !done; pages++ {
		var p verbsock.QueryStatsResp
		if err := r.do(verbsock.OpQueryStats, &verbsock.PageReq{Start: start}, nil, &p); err != nil {
			t.Fatal(err)
		}
		names := transport.CounterNames()
		if int(p.NumQPValues) != len(names) || int(p.NumDevice) != len(names) {
			t.Fatalf("page %d: %d device counters, %d per QP; want %d each (no extra counters configured)",
				pages, p.NumDevice, p.NumQPValues, len(names))
		}
		for i, nm := range names {
			if got := verbsock.CString(p.Device[i].Name[:]); got != nm {
				t.Fatalf("device counter %d is %q, want %q", i, got, nm)
			}
		}
		if int(p.NumQPs) > verbsock.StatsQPsPage {
			t.Fatalf("%d QP records", p.NumQPs)
		}
		for _, rec := range p.QPs[:p.NumQPs] {
			if rec.QPN < start || seen[rec.QPN] || byQPN[rec.QPN] == nil || gone[rec.QPN] {
				t.Fatalf("stats for QP %#x in the page from %#x", rec.QPN, start)
			}
			seen[rec.QPN] = true
		}
		start, done = p.Next, p.Next == 0
	}
	if len(seen) != n-len(gone) {
		t.Fatalf("stats for %d QPs, want %d", len(seen), n-len(gone))
	}
	if want := (n - len(gone) + verbsock.StatsQPsPage - 1) / verbsock.StatsQPsPage; pages != want {
		t.Errorf("%d stats pages, want %d", pages, want)
	}
}

// The daemon's extra counters (the port's) follow the transport's; one
// named like a transport counter adds to it. Names that do not fit are
// refused when the server is made.
func TestAdminExtraCounters(t *testing.T) {
	h, _ := nictest.Pair(t, 1500)
	extra := func(yield func(string, uint64)) {
		yield("frames_in", 7)
		yield("icrc_errors", 3)
		yield("sent_pkts", 1000)
	}
	s, err := server.New(server.Config{Device: h.Dev, ExtraCounters: extra})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	r := dialRaw(t, s, true)
	var p verbsock.QueryStatsResp
	if err := r.do(verbsock.OpQueryStats, &verbsock.PageReq{}, nil, &p); err != nil {
		t.Fatal(err)
	}
	names := transport.CounterNames()
	if int(p.NumDevice) != len(names)+1 || int(p.NumQPValues) != len(names) {
		t.Fatalf("%d device counters (%d per QP), want %d (%d)", p.NumDevice, p.NumQPValues, len(names)+1, len(names))
	}
	got := map[string]uint64{}
	for _, st := range p.Device[:p.NumDevice] {
		got[verbsock.CString(st.Name[:])] = st.Value
	}
	if verbsock.CString(p.Device[len(names)].Name[:]) != "frames_in" || got["frames_in"] != 7 {
		t.Errorf("extra counter after the transport's: %q = %d", verbsock.CString(p.Device[len(names)].Name[:]), got["frames_in"])
	}
	want := h.Dev.Counters().Get(transport.SentPkts) + 1000
	if got["icrc_errors"] != 3 || got["sent_pkts"] != want {
		t.Errorf("icrc_errors %d (want 3), sent_pkts %d (want %d)", got["icrc_errors"], got["sent_pkts"], want)
	}

	for _, bad := range []server.CounterFunc{
		func(yield func(string, uint64)) { yield(strings.Repeat("x", verbsock.StatNameLen+1), 1) },
		func(yield func(string, uint64)) { yield("", 1) },
		func(yield func(string, uint64)) {
			for i := range verbsock.MaxDeviceStats {
				yield("c"+strings.Repeat("_", i%10)+string(rune('a'+i%26))+string(rune('a'+i/26)), 1)
			}
		},
	} {
		if _, err := server.New(server.Config{Device: h.Dev, ExtraCounters: bad}); err == nil {
			t.Error("server made with extra counters that do not fit a reply")
		}
	}
}

// Every QP record of query_stats carries the transport's counters, which
// must fit a record.
func TestAdminCountersFitARecord(t *testing.T) {
	if n := len(transport.CounterNames()); n > verbsock.MaxQPStats {
		t.Fatalf("transport has %d counters; a QP record holds %d (raise MaxQPStats in a new protocol version)", n, verbsock.MaxQPStats)
	}
}

// plainDevice hides the admin methods of a device.
type plainDevice struct{ server.Device }

func TestAdminWithoutAdminDevice(t *testing.T) {
	h, _ := nictest.Pair(t, 1500)
	s, err := server.New(server.Config{Device: plainDevice{h.Dev}, WriteTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	r := dialRaw(t, s, true)
	wantErrno(t, "query_stats", r.do(verbsock.OpQueryStats, &verbsock.PageReq{}, nil, nil), syscall.EOPNOTSUPP)
	wantErrno(t, "list_qps", r.do(verbsock.OpListQPs, &verbsock.PageReq{}, nil, nil), syscall.EOPNOTSUPP)
	r.alive()
}
