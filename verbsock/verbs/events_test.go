package verbs_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

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
