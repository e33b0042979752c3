package verbs_test

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/vrnic/vrnicd/nic/link/linktest"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// sendTo posts one SEND of 64 bytes from a to b, solicited if asked, with
// a receive posted at b first.
func sendTo(t *testing.T, a, b *side, id uint64, solicited bool) {
	t.Helper()
	if err := b.qp.PostRecv(verbs.RecvWR{ID: id, SGL: []verbs.SGE{b.mr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	var fl verbs.SendFlags
	if solicited {
		fl = verbs.SendSolicited
	}
	if err := a.qp.PostSend(verbs.SendWR{ID: id, Opcode: verbs.WRSend, Flags: fl, SGL: []verbs.SGE{a.mr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
}

// A pending request for the next completion is never narrowed by a later
// solicited-only one (IBA 11.4.2.2; libibverbs on rxe): after
// ReqNotify(false) then ReqNotify(true), an unsolicited successful
// completion raises the event.
func TestReqNotifyNextNotNarrowed(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	a := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	b := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	connect(t, a, b)
	if err := b.rcq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	if err := b.rcq.ReqNotify(true); err != nil {
		t.Fatal(err)
	}
	sendTo(t, a, b, 1, false)
	if err := b.rcq.WaitEvent(ctxT(t, 10*time.Second)); err != nil {
		t.Fatalf("next-completion arm narrowed to solicited-only: %v", err)
	}
	if wc := pollN(t, b.rcq, 1)[0]; wc.WRID != 1 || wc.Status != verbs.WCSuccess {
		t.Fatalf("completion %+v", wc)
	}
	// Solicited-only alone still waits for a solicited completion: the
	// unsolicited one arrives (polled) without an event, the solicited one
	// raises it.
	if err := b.rcq.ReqNotify(true); err != nil {
		t.Fatal(err)
	}
	sendTo(t, a, b, 2, false)
	if wc := pollN(t, b.rcq, 1)[0]; wc.WRID != 2 {
		t.Fatalf("completion %+v", wc)
	}
	sendTo(t, a, b, 3, true)
	if err := b.rcq.WaitEvent(ctxT(t, 10*time.Second)); err != nil {
		t.Fatalf("solicited completion: %v", err)
	}
	if wc := pollN(t, b.rcq, 1)[0]; wc.WRID != 3 {
		t.Fatalf("completion %+v", wc)
	}
	// No event is left over from WR 2 (it was not solicited).
	if err := b.rcq.WaitEvent(ctxT(t, 30*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("extra event: %v", err)
	}
}

// fillQueues posts max_send_wr SENDs (which b, with no receive posted,
// answers with RNR NAKs for ever: none completes) and max_recv_wr receives
// (nothing is sent to a) on a, and checks both queues are then full.
func fillQueues(t *testing.T, a, b *side, round int) {
	t.Helper()
	c := a.qp.Cap()
	for i := range c.MaxSendWR {
		if err := a.qp.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{a.mr.SGE(0, 16)}}); err != nil {
			t.Fatalf("round %d: send %d of %d: %v", round, i, c.MaxSendWR, err)
		}
	}
	for i := range c.MaxRecvWR {
		if err := a.qp.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{a.mr.SGE(0, 16)}}); err != nil {
			t.Fatalf("round %d: receive %d of %d: %v", round, i, c.MaxRecvWR, err)
		}
	}
	if err := a.qp.PostSend(verbs.SendWR{ID: 999, Opcode: verbs.WRSend, SGL: []verbs.SGE{a.mr.SGE(0, 16)}}); !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("round %d: send past max_send_wr: %v, want ENOMEM", round, err)
	}
	if err := a.qp.PostRecv(verbs.RecvWR{ID: 999, SGL: []verbs.SGE{a.mr.SGE(0, 16)}}); !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("round %d: receive past max_recv_wr: %v, want ENOMEM", round, err)
	}
}

// Modify to RESET with WQEs outstanding empties both queues without
// completions, and the QP, brought up again, takes its full depth again
// (IBA 10.3.1: RESET empties the queues).
func TestResetFreesRingSlots(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	a := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	b := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	connect(t, a, b)
	for round := range 3 {
		fillQueues(t, a, b, round)
		if err := a.qp.Modify(&verbs.QPAttr{State: verbs.QPStateReset}, verbs.QPAttrState); err != nil {
			t.Fatal(err)
		}
		reconnect(t, a, b)
	}
	fillQueues(t, a, b, 3)
	// No completion of a discarded WQE ever came.
	var wc [4]verbs.WC
	if n := a.scq.Poll(wc[:]) + a.rcq.Poll(wc[:]); n != 0 {
		t.Fatalf("%d completions of WQEs RESET discarded: %+v", n, wc[0])
	}
}

// reconnect brings a back to RTS towards b after a RESET.
func reconnect(t *testing.T, a, b *side) {
	t.Helper()
	acc := verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	for _, st := range []struct {
		a verbs.QPAttr
		m verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.QPStateInit, Port: 1, AccessFlags: acc},
			verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
		{verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: b.qp.QPN(), RQPSN: 100, MaxDestRdAtomic: 16,
			MinRNRTimer: 1, AV: verbs.AHAttr{DGID: b.gid, SGIDIndex: a.gidx, HopLimit: 64, Port: 1}},
			verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
				verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer},
		{verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 100, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
			verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry |
				verbs.QPAttrMaxQPRdAtomic},
	} {
		if err := a.qp.Modify(&st.a, st.m); err != nil {
			t.Fatalf("modify to %v: %v", st.a.State, err)
		}
	}
}

// An SRQ's producer index may run at most a ring ahead of the slots the
// daemon handed back, not of what it read: a client that publishes a whole
// ring more while the SRQ still holds every WQE it posted would otherwise
// leave the daemon's drain finding the SRQ full and retrying on a timer for
// as long as nothing takes a WQE. The ring is corrupt instead (SRQ_ERR),
// and the daemon goes on serving.
func TestHostileSRQOverPost(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	srq, err := pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: 16, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	buf, err := pd.AllocBuffer(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	attr, err := srq.Query()
	if err != nil {
		t.Fatal(err)
	}
	for i := range attr.MaxWR {
		if err := srq.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{mr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	m := verbs.SRQRing(srq)
	// The daemon's drain re-arms the doorbell once it has read them all.
	linktest.WaitFor(t, "the SRQ drain", waitLimit, waitPoll, func() bool { return atomic.LoadUint32((*uint32)(unsafe.Pointer(&m[192]))) == 1 })
	store64(m, offProd, uint64(2*attr.MaxWR)) // a second ring's worth, no slot handed back
	verbs.RingSRQBell(srq)
	waitEvent(t, d, verbs.EventSRQErr, nil)
	// The daemon still serves this client.
	if _, err := d.AllocPD(); err != nil {
		t.Fatal(err)
	}
}
