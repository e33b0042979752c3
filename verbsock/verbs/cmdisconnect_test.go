package verbs_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// TestCMDisconnectAfterLastReceive: a client that disconnects the moment
// it sees the receive completion of the server's last SEND must not turn
// that SEND into a flush at the server. The receive completed, so the
// server's requester is owed its ACK, and rdma_disconnect moves the QP to
// ERR and sends the DREQ only after it (the kernel's rxe acknowledges a
// request as it completes it): the SEND completes successfully, every
// round.
func TestCMDisconnectAfterLastReceive(t *testing.T) {
	ce := newCMEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := ce.srv.Listen(netip.AddrPortFrom(netip.Addr{}, 7471))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rounds := 20
	if raceEnabled {
		rounds = 8
	}
	for i := range rounds {
		a := newSide(t, ce.cli, ce.ds[0].Host, verbs.QPTypeRC, nil, nil)
		b := newSide(t, ce.srv, ce.ds[1].Host, verbs.QPTypeRC, nil, nil)
		toInit(t, a)
		if err := a.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{a.mr.SGE(0, 16)}}); err != nil {
			t.Fatal(err)
		}
		accepted := make(chan *verbs.Conn, 1)
		go func() {
			c, _, err := l.Accept(ctx)
			if err == nil && c.Accept(ctx, b.qp, verbs.ConnParams{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}) == nil {
				accepted <- c
				return
			}
			accepted <- nil
		}()
		c, err := ce.cli.Dial(ctx, ce.serverAddr(7471), a.qp, verbs.ConnParams{ResponderResources: 1, InitiatorDepth: 1,
			RetryCount: 7, RNRRetryCount: 7})
		if err != nil {
			t.Fatal(err)
		}
		sc := <-accepted
		if sc == nil {
			t.Fatal("accept failed")
		}
		if err := b.qp.PostSend(verbs.SendWR{ID: 7, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{b.mr.SGE(0, 16)}}); err != nil {
			t.Fatal(err)
		}
		if wc := pollN(t, a.rcq, 1)[0]; wc.Status != verbs.WCSuccess {
			t.Fatalf("round %d: receive %+v", i, wc)
		}
		if err := c.Disconnect(); err != nil {
			t.Fatal(err)
		}
		if wc := pollN(t, b.scq, 1)[0]; wc.Status != verbs.WCSuccess || wc.WRID != 7 {
			t.Fatalf("round %d: the server's SEND, whose receive completed, ended %v, want success", i, wc.Status)
		}
		nextCM(t, sc.Events(), verbs.CMEventDisconnected)
		c.Close()
		sc.Close()
	}
}
