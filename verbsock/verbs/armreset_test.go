package verbs_test

import (
	"context"
	"errors"
	"testing"
	"time"

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
