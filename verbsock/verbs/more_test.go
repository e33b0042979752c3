package verbs_test

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

func TestUDWithAH(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	a := newSide(t, d, e.host, verbs.QPTypeUD, nil, nil)
	b := newSide(t, d, e.host, verbs.QPTypeUD, nil, nil)
	udReady(t, a, 0x1111)
	udReady(t, b, 0x2222)
	ah, err := a.pd.CreateAH(verbs.AHAttr{DGID: b.gid, SGIDIndex: a.gidx, HopLimit: 64, Port: 1})
	if err != nil {
		t.Fatal(err)
	}
	copy(a.buf.Bytes(), "datagram payload")
	if err := b.qp.PostRecv(verbs.RecvWR{ID: 7, SGL: []verbs.SGE{b.mr.SGE(0, 40+512)}}); err != nil {
		t.Fatal(err)
	}
	// No wait for the daemon to take it: the receive owner reads the RQ
	// ring before every request, so a receive posted before the send is
	// there for the datagram.
	if err := a.qp.PostSend(verbs.SendWR{ID: 8, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, AH: ah,
		RemoteQPN: b.qp.QPN(), RemoteQKey: 0x2222, SGL: []verbs.SGE{a.mr.SGE(0, 16)}}); err != nil {
		t.Fatal(err)
	}
	wc := pollN(t, b.rcq, 1)[0]
	if wc.Status != verbs.WCSuccess || wc.ByteLen != 40+16 || wc.SrcQP != a.qp.QPN() || wc.Flags&verbs.WCWithGRH == 0 {
		t.Fatalf("UD receive %+v", wc)
	}
	if string(b.buf.Bytes()[40:56]) != "datagram payload" {
		t.Fatalf("UD payload %q", b.buf.Bytes()[40:56])
	}
	pollN(t, a.scq, 1)
	// A UD send without an AH is refused at post time.
	if err := a.qp.PostSend(verbs.SendWR{Opcode: verbs.WRSend}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("UD send without AH: %v", err)
	}
	// An AH of another PD is not usable.
	pd2, _ := d.AllocPD()
	ah2, err := pd2.CreateAH(verbs.AHAttr{DGID: b.gid, SGIDIndex: a.gidx, Port: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(verbs.SendWR{ID: 9, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, AH: ah2,
		RemoteQPN: b.qp.QPN(), RemoteQKey: 0x2222}); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, a.scq, 1)[0]; wc.WRID != 9 || wc.Status != verbs.WCLocQPOpErr {
		t.Fatalf("send through another PD's AH: %+v, want LOC_QP_OP_ERR", wc)
	}
	if err := pd2.Dealloc(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("dealloc PD with an AH: %v, want EBUSY", err)
	}
	if err := ah2.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := pd2.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.pd.CreateAH(verbs.AHAttr{DGID: b.gid, SGIDIndex: 200, Port: 1}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("AH with a bad SGID index: %v", err)
	}
}

func TestUCWrite(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	a := newSide(t, d, e.host, verbs.QPTypeUC, nil, nil)
	b := newSide(t, d, e.host, verbs.QPTypeUC, nil, nil)
	connect(t, a, b)
	copy(a.buf.Bytes(), bytes.Repeat([]byte("uc"), 3000))
	if err := a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 6000)}, RemoteAddr: b.mr.Addr() + 8, RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	pollN(t, a.scq, 1)
	waitFor(t, "UC write data", func() bool { return bytes.Equal(b.buf.Bytes()[8:6008], a.buf.Bytes()[:6000]) })
	if err := a.qp.PostSend(verbs.SendWR{Opcode: verbs.WRRDMARead}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("READ on UC: %v, want EINVAL", err)
	}
}

func TestCompletionEvents(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	a := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	b := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	connect(t, a, b)
	// Not armed: WaitEvent times out.
	if err := b.rcq.WaitEvent(ctxT(t, 30*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unarmed WaitEvent: %v", err)
	}
	for round := range 3 {
		if err := b.rcq.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		if err := b.qp.PostRecv(verbs.RecvWR{ID: uint64(round), SGL: []verbs.SGE{b.mr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{a.mr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		if err := b.rcq.WaitEvent(ctxT(t, 10*time.Second)); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		var wc [4]verbs.WC
		if n := b.rcq.Poll(wc[:]); n != 1 || wc[0].WRID != uint64(round) {
			t.Fatalf("round %d: polled %d %+v", round, n, wc[0])
		}
	}
	// Cancelled while waiting.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	if err := b.rcq.WaitEvent(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled WaitEvent: %v", err)
	}
	// The daemon-side req_notify over the socket works too... and a CQ
	// without events refuses arming.
	cq, err := d.CreateCQ(4, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := cq.ReqNotify(false); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("ReqNotify without events: %v", err)
	}
}

func TestSRQSharedByTwoQPs(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	srq, err := pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: 64, MaxSGE: 2})
	if err != nil {
		t.Fatal(err)
	}
	a := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	b1 := newSide(t, d, e.host, verbs.QPTypeRC, srq, pd)
	c := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	b2 := newSide(t, d, e.host, verbs.QPTypeRC, srq, pd)
	connect(t, a, b1)
	connect(t, c, b2)
	if err := b1.qp.PostRecv(verbs.RecvWR{}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("PostRecv on an SRQ QP: %v", err)
	}
	for i := range 8 {
		if err := srq.PostRecv(verbs.RecvWR{ID: uint64(100 + i), SGL: []verbs.SGE{b1.mr.SGE(uint64(i)*1024, 1024)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := srq.Modify(verbs.SRQAttr{Limit: 5}, verbs.SRQAttrLimit); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		s := a
		if i%2 == 1 {
			s = c
		}
		if err := s.qp.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, SGL: []verbs.SGE{s.mr.SGE(0, 100)}}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[uint64]bool{}
	for _, wc := range append(pollN(t, b1.rcq, 2), pollN(t, b2.rcq, 2)...) {
		if wc.Status != verbs.WCSuccess || wc.WRID < 100 || wc.WRID >= 108 {
			t.Fatalf("SRQ receive %+v", wc)
		}
		got[wc.WRID] = true
	}
	if len(got) != 4 {
		t.Fatalf("receives used WQEs %v", got)
	}
	// 8 posted, 4 used: below the limit of 5, the event fired.
	select {
	case ev := <-d.Events():
		if ev.Type != verbs.EventSRQLimit || ev.SRQ != srq {
			t.Fatalf("event %v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no SRQ limit event")
	}
	attr, err := srq.Query()
	if err != nil || attr.Limit != 0 || attr.MaxWR != 64 || attr.MaxSGE != 2 {
		t.Fatalf("SRQ query %+v %v (limit disarms after firing)", attr, err)
	}
	if err := srq.Destroy(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("destroy SRQ in use: %v", err)
	}
}

func TestMemoryWindows(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	a := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	b := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	connect(t, a, b)
	// Type 1, bound synchronously over a page of b's MR.
	mw1, err := b.pd.AllocMW(verbs.MWType1)
	if err != nil {
		t.Fatal(err)
	}
	old := mw1.RKey()
	if err := mw1.Bind(b.mr, b.mr.Addr()+8192, 4096, verbs.AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	if mw1.RKey() == old {
		t.Fatal("bind did not change the rkey")
	}
	copy(a.buf.Bytes(), "through the window")
	write := func(id uint64, rkey uint32, off uint64) verbs.WC {
		t.Helper()
		if err := a.qp.PostSend(verbs.SendWR{ID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{a.mr.SGE(0, 18)}, RemoteAddr: b.mr.Addr() + off, RKey: rkey}); err != nil {
			t.Fatal(err)
		}
		return pollN(t, a.scq, 1)[0]
	}
	if wc := write(1, mw1.RKey(), 8192); wc.Status != verbs.WCSuccess || string(b.buf.Bytes()[8192:8210]) != "through the window" {
		t.Fatalf("write through MW: %+v", wc)
	}
	if err := b.mr.Dereg(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("dereg MR under a bound window: %v", err)
	}
	// Type 2B, bound by a BIND_MW work request on b's QP; a's write outside
	// the window fails and breaks the connection (RC: QP to ERR).
	mw2, err := b.pd.AllocMW(verbs.MWType2B)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.qp.PostSend(verbs.SendWR{ID: 5, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled,
		Bind: &verbs.BindMWWR{MW: mw2, MR: b.mr, Addr: b.mr.Addr() + 65536, Length: 100, Access: verbs.AccessRemoteWrite}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, b.scq, 1)[0]; wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCBindMW {
		t.Fatalf("BIND_MW completion %+v", wc)
	}
	if wc := write(2, mw2.RKey(), 65536); wc.Status != verbs.WCSuccess || string(b.buf.Bytes()[65536:65554]) != "through the window" {
		t.Fatalf("write through type 2B MW: %+v", wc)
	}
	if wc := write(3, mw2.RKey(), 65536+90); wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("write past the window: %+v, want REM_ACCESS_ERR", wc)
	}
}

func TestFastRegAndLocalInv(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	a := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	b := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	connect(t, a, b)
	fmr, err := b.pd.AllocMR(8)
	if err != nil {
		t.Fatal(err)
	}
	pages, err := b.pd.AllocBuffer(4 * 4096)
	if err != nil {
		t.Fatal(err)
	}
	old := fmr.RKey()
	// Pages 2 and 0 of the buffer, in that order, as IOVA 0x7000000.
	if err := b.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRegMR, Flags: verbs.SendSignaled,
		RegMR: &verbs.RegMRWR{MR: fmr, Pages: []verbs.PageRef{{Buffer: pages, Offset: 8192}, {Buffer: pages, Offset: 0}},
			PageSize: 4096, IOVA: 0x7000000, Length: 8192, Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, b.scq, 1)[0]; wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRegMR {
		t.Fatalf("REG_MR completion %+v", wc)
	}
	if fmr.RKey() == old {
		t.Fatal("REG_MR did not change the key")
	}
	copy(a.buf.Bytes(), "fast")
	if err := a.qp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 4)}, RemoteAddr: 0x7000000 + 4096, RKey: fmr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, a.scq, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("write through fast-reg MR: %+v", wc)
	}
	if string(pages.Bytes()[:4]) != "fast" { // IOVA page 1 is buffer page 0
		t.Fatalf("fast-reg page map: %q", pages.Bytes()[:4])
	}
	if err := b.qp.PostSend(verbs.SendWR{ID: 3, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, ImmData: fmr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, b.scq, 1)[0]; wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCLocalInv {
		t.Fatalf("LOCAL_INV %+v", wc)
	}
	if info, ok := e.host.Dev.Mem().Query(fmr.RKey()); !ok || info.State.String() != "FREE" {
		t.Fatalf("after LOCAL_INV: %+v", info)
	}
}

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
	waitFor(t, "completions in the ring, unpolled", func() bool { return verbs.CQPending(a.scq) == 5 })
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

// Two daemons (devices joined by a pipe), one client each: RC over the
// "wire". When one client disconnects, its QP goes to ERR and stops, and
// the peer's next request fails with a transport error.
func TestTwoDaemonsAndPeerDisconnect(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	da, db := e.client(), e.peerClient()
	a := newSide(t, da, e.host, verbs.QPTypeRC, nil, nil)
	b := newSide(t, db, e.peer, verbs.QPTypeRC, nil, nil)
	connect(t, a, b)
	copy(a.buf.Bytes(), "across the pipe")
	if err := a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 15)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, a.scq, 1)[0]; wc.Status != verbs.WCSuccess || string(b.buf.Bytes()[:15]) != "across the pipe" {
		t.Fatalf("write across: %+v", wc)
	}
	db.Close()
	waitFor(t, "peer QP destroyed", func() bool { return len(e.peer.Dev.QPs()) == 0 })
	// The peer's device answers nothing for that QPN now: a's retries run
	// out (timeout 14 ≈ 67 ms, retry_cnt 7).
	if err := a.qp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 15)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	wc := pollN(t, a.scq, 1)[0]
	if wc.Status == verbs.WCSuccess {
		t.Fatalf("write to a disconnected peer succeeded: %+v", wc)
	}
	t.Logf("peer gone: %v", wc.Status)
}

// A receive posted before the peer sends must be there when the datagram
// arrives (UD has no RNR: a missing WQE drops it). This measures how often
// the device's receive owner handles a packet before draining the RQ ring.
func TestUDPostRecvThenImmediateSend(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	a := newSide(t, d, e.host, verbs.QPTypeUD, nil, nil)
	b := newSide(t, d, e.host, verbs.QPTypeUD, nil, nil)
	udReady(t, a, 1)
	udReady(t, b, 2)
	ah, err := a.pd.CreateAH(verbs.AHAttr{DGID: b.gid, SGIDIndex: a.gidx, HopLimit: 64, Port: 1})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	got := 0
	var wc [4]verbs.WC
	for i := range n {
		if err := b.qp.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{b.mr.SGE(0, 40+64)}}); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, AH: ah,
			RemoteQPN: b.qp.QPN(), RemoteQKey: 2, SGL: []verbs.SGE{a.mr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		pollN(t, a.scq, 1)
		// The datagram is delivered (or dropped) before its send completes
		// on this loopback device, so what arrived is in the CQ by now or
		// soon; a dropped one leaves its WQE for the next datagram.
		want := i + 1 - int(e.host.Dev.Counters().Get(transport.RcvdDropped))
		deadline := time.Now().Add(time.Second)
		for got < want && time.Now().Before(deadline) {
			got += b.rcq.Poll(wc[:])
		}
	}
	dropped := e.host.Dev.Counters().Get(transport.RcvdDropped)
	if dropped > 0 {
		t.Fatalf("%d of %d datagrams dropped although their receive was posted first", dropped, n)
	}
	if got != n {
		t.Fatalf("%d of %d datagrams received, none counted dropped", got, n)
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

// Port events the daemon broadcasts reach every client; a daemon that goes
// away shows as DEVICE_FATAL, then Events closes and verbs fail with
// ENODEV.
func TestUnaffiliatedEvents(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d1, d2 := e.client(), e.client()
	e.srv.Broadcast(verbsock.EventPortErr, 1)
	for _, d := range []*verbs.Device{d1, d2} {
		select {
		case ev := <-d.Events():
			if ev.Type != verbs.EventPortErr || ev.Port != 1 || ev.QP != nil {
				t.Fatalf("event %v", ev)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no PORT_ERR")
		}
	}
	e.srv.Close()
	select {
	case ev := <-d1.Events():
		if ev.Type != verbs.EventDeviceFatal {
			t.Fatalf("after the daemon went away: %v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no DEVICE_FATAL")
	}
	if _, ok := <-d1.Events(); ok {
		t.Fatal("Events not closed")
	}
	if _, err := d1.AllocPD(); !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("verb on a dead device: %v, want ENODEV", err)
	}
	// Closing a device by hand closes Events without DEVICE_FATAL.
	e2 := newEnv(t, verbsock.Limits{})
	d3 := e2.client()
	d3.Close()
	if ev, ok := <-d3.Events(); ok {
		t.Fatalf("event %v after Close", ev)
	}
}

func TestSRQResizeAndPostErrors(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	pd, _ := d.AllocPD()
	srq, err := pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := srq.Modify(verbs.SRQAttr{MaxWR: 64}, verbs.SRQAttrMaxWR); err != nil {
		t.Fatal(err)
	}
	if a, _ := srq.Query(); a.MaxWR != 64 {
		t.Fatalf("after resize: %+v", a)
	}
	if err := srq.Modify(verbs.SRQAttr{Limit: 100}, verbs.SRQAttrLimit); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("limit over max_wr: %v", err)
	}
	err = srq.PostRecv(verbs.RecvWR{ID: 1}, verbs.RecvWR{ID: 2, SGL: make([]verbs.SGE, 2)})
	var pe *verbs.PostError
	if !errors.As(err, &pe) || pe.Index != 1 || !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("post of 2 SGEs on a 1-SGE SRQ: %v", err)
	}
	// The ring holds 4: the fifth post before the daemon drains may be
	// ENOMEM, never anything else.
	for i := range 64 {
		if err := srq.PostRecv(verbs.RecvWR{ID: uint64(i)}); err != nil && !errors.Is(err, syscall.ENOMEM) {
			t.Fatal(err)
		}
	}
	if err := srq.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := srq.PostRecv(verbs.RecvWR{}); !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("post to a destroyed SRQ: %v", err)
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
	// b's receive queue: fill it, complete one, poll, post one more.
	for i := range depth {
		if err := recv(b, 100+i); err != nil {
			t.Fatalf("b fill %d: %v", i, err)
		}
	}
	if err := recv(b, 200); !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("b receive past max_recv_wr: %v, want ENOMEM", err)
	}
	for i := range depth {
		got := pollN(t, b.rcq, 1)
		if got[0].Status != verbs.WCSuccess {
			t.Fatalf("b receive completion: %+v", got[0])
		}
		if err := recv(b, 300+i); err != nil {
			t.Fatalf("receive after polling completion %d: %v (a polled completion must free its slot)", i, err)
		}
		pollN(t, a.scq, 1)
		if err := send(next); err != nil {
			t.Fatalf("send %d: %v", next, err)
		}
		next++
	}
}

// ibv_post_srq_recv counts WRs not yet taken by a QP: max_wr posted and
// nothing taken is ENOMEM however long the daemon is given, a receive
// completion frees a slot, and a resize to a new ring keeps every WR
// posted (they complete in order afterwards) and counts them against the
// new size.
func TestSRQDepthCountsWRsNotTaken(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	pd, _ := d.AllocPD()
	srq, err := pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: 8, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	a := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	b := newSide(t, d, e.host, verbs.QPTypeRC, srq, pd)
	connect(t, a, b)
	id := uint64(0)
	post := func() error {
		err := srq.PostRecv(verbs.RecvWR{ID: id, SGL: []verbs.SGE{b.mr.SGE(id%64*64, 64)}})
		if err == nil {
			id++
		}
		return err
	}
	fill := func(n int) {
		t.Helper()
		for i := range n {
			if err := post(); err != nil {
				t.Fatalf("post %d of %d: %v", i, n, err)
			}
		}
		for range 20 { // the daemon drains the ring meanwhile: still full
			if err := post(); !errors.Is(err, syscall.ENOMEM) {
				t.Fatalf("post past max_wr with none taken: %v, want ENOMEM", err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	next := uint64(0) // the WR the next receive must use
	recv := func(n int) {
		t.Helper()
		for i := range n {
			if err := a.qp.PostSend(verbs.SendWR{ID: next, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 8)}}); err != nil {
				t.Fatal(err)
			}
			w := pollN(t, b.rcq, 1)[0]
			if w.Status != verbs.WCSuccess || w.WRID != next {
				t.Fatalf("receive %d: %+v, want WR %d", i, w, next)
			}
			pollN(t, a.scq, 1)
			next++
		}
	}
	fill(8)
	recv(1)
	fill(1) // the taken WR's slot, and no more

	// Grow with 8 posted: they keep their slots, 24 more fit.
	if err := srq.Modify(verbs.SRQAttr{MaxWR: 32}, verbs.SRQAttrMaxWR); err != nil {
		t.Fatal(err)
	}
	if at, err := srq.Query(); err != nil || at.MaxWR != 32 {
		t.Fatalf("after resize: %+v %v", at, err)
	}
	fill(24)
	recv(32)
	// Shrink: not below what is posted and not taken.
	fill(32)
	if err := srq.Modify(verbs.SRQAttr{MaxWR: 16}, verbs.SRQAttrMaxWR); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("resize to 16 with 32 posted: %v, want EINVAL", err)
	}
	recv(28)
	if err := srq.Modify(verbs.SRQAttr{MaxWR: 4, Limit: 2}, verbs.SRQAttrMaxWR|verbs.SRQAttrLimit); err != nil {
		t.Fatal(err)
	}
	if at, _ := srq.Query(); at.MaxWR != 4 || at.Limit != 2 {
		t.Fatalf("after shrink: %+v", at)
	}
	fill(0) // 4 posted, 4 slots
	recv(4)
	fill(4)
	recv(4)
}
