package verbs_test

import (
	"testing"

	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// TestRecvPostsWithoutDoorbell: the daemon drains a QP's receive ring
// before each request rather than on a doorbell, so a receive posted while
// the QP is idle in RTS is there for the next SEND; in ERR every receive
// — those posted before the transition and those posted after it — still
// completes with IBV_WC_WR_FLUSH_ERR (ibv_post_recv(3): a QP in the error
// state flushes its work requests).
func TestRecvPostsWithoutDoorbell(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	a := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	b := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	connect(t, a, b)
	for i := range 3 {
		e.host.Dev.Sync() // the QP idle, its ring drained
		if err := b.qp.PostRecv(verbs.RecvWR{ID: uint64(100 + i), SGL: []verbs.SGE{b.mr.SGE(uint64(i)*64, 64)}}); err != nil {
			t.Fatal(err)
		}
		e.host.Dev.Sync()
		if err := a.qp.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{a.mr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		if wc := pollN(t, b.rcq, 1)[0]; wc.Status != verbs.WCSuccess || wc.WRID != uint64(100+i) {
			t.Fatalf("receive %d: %+v", i, wc)
		}
		if wc := pollN(t, a.scq, 1)[0]; wc.Status != verbs.WCSuccess {
			t.Fatalf("send %d: %+v", i, wc)
		}
	}
	// Posted in RTS and never drained, then flushed by the move to ERR.
	if err := b.qp.PostRecv(verbs.RecvWR{ID: 200, SGL: []verbs.SGE{b.mr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	e.host.Dev.Sync()
	if err := b.qp.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, b.rcq, 1)[0]; wc.Status != verbs.WCWRFlushErr || wc.WRID != 200 {
		t.Fatalf("receive posted before ERR: %+v, want WR_FLUSH_ERR", wc)
	}
	// Posted in ERR: the doorbell is armed again, the WR flushed.
	if err := b.qp.PostRecv(verbs.RecvWR{ID: 201, SGL: []verbs.SGE{b.mr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, b.rcq, 1)[0]; wc.Status != verbs.WCWRFlushErr || wc.WRID != 201 {
		t.Fatalf("receive posted in ERR: %+v, want WR_FLUSH_ERR", wc)
	}
}
