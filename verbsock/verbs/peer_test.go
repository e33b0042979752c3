package verbs_test

import (
	"testing"

	"github.com/vrnic/vrnicd/nic/link/linktest"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

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
	linktest.WaitFor(t, "peer QP destroyed", waitLimit, waitPoll, func() bool { return len(e.peer.Dev.QPs()) == 0 })
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
