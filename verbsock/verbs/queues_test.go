package verbs_test

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link/linktest"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

func TestResizeCQKeepsCompletions(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	a := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	b := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	connect(t, a, b)
	for i := range 5 {
		if err := a.qp.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	linktest.WaitFor(t, "completions in the ring, unpolled", waitLimit, waitPoll, func() bool { return verbs.CQPending(a.scq) == 5 })
	if err := a.scq.Resize(1024); err != nil {
		t.Fatal(err)
	}
	if a.scq.Entries() != 1024 {
		t.Fatalf("entries %d after resize", a.scq.Entries())
	}
	wcs := pollN(t, a.scq, 5)
	for i, wc := range wcs {
		if wc.WRID != uint64(i) || wc.Status != verbs.WCSuccess {
			t.Fatalf("after resize, completion %d: %+v", i, wc)
		}
	}
	if err := a.scq.Destroy(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("destroy CQ in use: %v", err)
	}
}

// A client that keeps its send queue full (posting again as soon as the
// ring has room) must see every WR complete: WRs the engine could not take
// yet stay in the ring and must be picked up when the engine frees slots,
// with or without a doorbell (UD and UC complete without any packet from
// the peer to wake the send owner).
func TestSendQueueKeptFull(t *testing.T) {
	for _, typ := range []verbs.QPType{verbs.QPTypeUD, verbs.QPTypeUC, verbs.QPTypeRC} {
		t.Run(typ.String(), func(t *testing.T) {
			e := newEnv(t, verbsock.Limits{})
			d := e.client()
			pd, _ := d.AllocPD()
			mk := func() *side {
				s := newSide(t, d, e.host, typ, nil, pd)
				q, err := pd.CreateQP(verbs.QPInitAttr{Type: typ, SendCQ: s.scq, RecvCQ: s.rcq,
					Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
				if err != nil {
					t.Fatal(err)
				}
				s.qp = q
				return s
			}
			a, b := mk(), mk()
			var ah *verbs.AH
			if typ == verbs.QPTypeUD {
				udReady(t, a, 1)
				udReady(t, b, 1)
				ah, _ = pd.CreateAH(verbs.AHAttr{DGID: b.gid, SGIDIndex: a.gidx, Port: 1})
			} else {
				connect(t, a, b)
			}
			const total = 64
			posted, done := 0, 0
			var wc [8]verbs.WC
			deadline := time.Now().Add(10 * time.Second)
			for done < total && time.Now().Before(deadline) {
				if posted < total {
					wr := verbs.SendWR{ID: uint64(posted), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 8)},
						AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: 1}
					if typ != verbs.QPTypeUD {
						wr.Opcode, wr.RemoteAddr, wr.RKey = verbs.WRRDMAWrite, b.mr.Addr(), b.mr.RKey()
					}
					err := a.qp.PostSend(wr)
					switch {
					case err == nil:
						posted++
					case !errors.Is(err, syscall.ENOMEM):
						t.Fatal(err)
					}
				}
				done += a.scq.Poll(wc[:])
			}
			if done != total {
				t.Fatalf("%d of %d posted WRs completed (%d posted): the send queue stalled", done, total, posted)
			}
		})
	}
}

func TestPostSendChecks(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	a := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	if err := a.qp.PostSend(verbs.SendWR{Opcode: verbs.WRSend}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("post_send in RESET: %v", err)
	}
	if err := a.qp.PostRecv(verbs.RecvWR{}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("post_recv in RESET: %v", err)
	}
	b := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	connect(t, a, b)
	cases := []struct {
		name string
		wr   verbs.SendWR
	}{
		{"too many SGEs", verbs.SendWR{Opcode: verbs.WRSend, SGL: make([]verbs.SGE, 5)}},
		{"inline over max", verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendInline, Inline: make([]byte, 257)}},
		{"inline from a foreign lkey", verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendInline, SGL: []verbs.SGE{{Addr: 1, Length: 4, LKey: 0x999}}}},
		{"REG_MR without MR", verbs.SendWR{Opcode: verbs.WRRegMR}},
		{"BIND_MW without MW", verbs.SendWR{Opcode: verbs.WRBindMW}},
		{"opcode 99", verbs.SendWR{Opcode: 99}},
	}
	for _, c := range cases {
		err := a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend}, c.wr)
		var pe *verbs.PostError
		if !errors.As(err, &pe) || pe.Index != 1 || !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	// The good first WRs of each call were posted (and fail remotely for
	// want of receives, or succeed): nothing is left half-written.
	if err := a.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(verbs.SendWR{}); !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("post to a destroyed QP: %v", err)
	}
}

// ibv_post_send and ibv_post_recv count WRs not yet completed, not WRs the
// daemon has read: with max_send_wr SENDs held back by RNR NAKs (the peer
// has no receive posted) the next post is ENOMEM, and so is a receive past
// max_recv_wr; once a completion has been polled, a post always succeeds.
func TestQueueDepthCountsUncompletedWRs(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	pd, _ := d.AllocPD()
	const depth = 8
	mk := func() *side {
		s := newSide(t, d, e.host, verbs.QPTypeRC, nil, pd)
		if err := s.qp.Destroy(); err != nil {
			t.Fatal(err)
		}
		q, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: s.scq, RecvCQ: s.rcq,
			Cap: verbs.QPCap{MaxSendWR: depth, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if c := q.Cap(); c.MaxSendWR != depth || c.MaxRecvWR != depth {
			t.Fatalf("caps %+v, want %d WRs each way", c, depth)
		}
		s.qp = q
		return s
	}
	a, b := mk(), mk()
	connect(t, a, b)
	send := func(i int) error {
		return a.qp.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{a.mr.SGE(uint64(i)*8, 8)}})
	}
	for i := range depth {
		if err := send(i); err != nil {
			t.Fatalf("send %d of %d: %v", i, depth, err)
		}
	}
	// The daemon takes all of them at once and the peer answers RNR; the
	// queue stays full however long it is given.
	for range 50 {
		if err := send(depth); !errors.Is(err, syscall.ENOMEM) {
			t.Fatalf("send past max_send_wr with none completed: %v, want ENOMEM", err)
		}
		time.Sleep(time.Millisecond)
	}
	recv := func(s *side, i int) error {
		return s.qp.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{s.mr.SGE(uint64(i)*8, 8)}})
	}
	// a posts a full RQ that nothing consumes: the next receive is ENOMEM.
	for i := range depth {
		if err := recv(a, i); err != nil {
			t.Fatalf("receive %d of %d: %v", i, depth, err)
		}
	}
	time.Sleep(10 * time.Millisecond)
	if err := recv(a, depth); !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("receive past max_recv_wr with none completed: %v, want ENOMEM", err)
	}
	// b posts receives one at a time; every polled send completion frees a
	// slot at once, and every polled receive completion on b does too.
	next := depth
	for i := range 3 * depth {
		if err := recv(b, i); err != nil {
			t.Fatalf("b receive %d: %v", i, err)
		}
		got := pollN(t, a.scq, 1)
		if got[0].Status != verbs.WCSuccess || got[0].WRID != uint64(i) {
			t.Fatalf("send completion %d: %+v", i, got[0])
		}
		if err := send(next); err != nil {
			t.Fatalf("send after polling completion %d: %v (a polled completion must free its slot)", i, err)
		}
		next++
		if r := pollN(t, b.rcq, 1); r[0].Status != verbs.WCSuccess {
			t.Fatalf("b receive completion %d: %+v", i, r[0])
		}
	}
	// a's depth sends still waiting for receives take depth more of b's,
	// so that nothing is left to consume b's receives below.
	for i := range depth {
		if err := recv(b, 50+i); err != nil {
			t.Fatalf("b receive %d for the last sends: %v", i, err)
		}
	}
	pollN(t, a.scq, depth)
	pollN(t, b.rcq, depth)
	// b's receive queue: fill it; nothing consumes it, so one more is
	// ENOMEM; then each SEND completes one, and once polled its slot takes
	// a new receive.
	for i := range depth {
		if err := recv(b, 100+i); err != nil {
			t.Fatalf("b fill %d: %v", i, err)
		}
	}
	if err := recv(b, 200); !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("b receive past max_recv_wr: %v, want ENOMEM", err)
	}
	for i := range depth {
		if err := send(next); err != nil {
			t.Fatalf("send %d: %v", next, err)
		}
		next++
		pollN(t, a.scq, 1)
		got := pollN(t, b.rcq, 1)
		if got[0].Status != verbs.WCSuccess {
			t.Fatalf("b receive completion: %+v", got[0])
		}
		if err := recv(b, 300+i); err != nil {
			t.Fatalf("receive after polling completion %d: %v (a polled completion must free its slot)", i, err)
		}
	}
}
