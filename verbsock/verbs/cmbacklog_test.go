package verbs_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/verbsock/server/servertest"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// TestCMListenBacklog: connect requests that arrive while the listener's
// owner is not accepting wait for it, as rdma_listen's backlog holds them
// (librdmacm's rdma_listen(id, 0) takes the kernel's default, 1024): 100
// at once, more than the 64 events a connection's queue holds, are all
// delivered and all connect once accepted. (cmtime's server met this: a
// burst of REQs overflowed the queue and the lost ones were never answered.)
func TestCMListenBacklog(t *testing.T) {
	const n = 100
	ds := servertest.TwoDaemons(t, 1500)
	cli, err := verbs.Open(ds[0].Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	srv, err := verbs.Open(ds[1].Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	l, err := srv.Listen(netip.AddrPortFrom(netip.Addr{}, 7471))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pds := map[*verbs.Device]*verbs.PD{}
	for _, d := range []*verbs.Device{cli, srv} {
		if pds[d], err = d.AllocPD(); err != nil {
			t.Fatal(err)
		}
	}
	qp := func(d *verbs.Device) *verbs.QP {
		t.Helper()
		pd := pds[d]
		cq, err := d.CreateCQ(2, false)
		if err != nil {
			t.Fatal(err)
		}
		q, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		q := qp(cli)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := cli.Dial(ctx, netip.AddrPortFrom(ds[1].Host.Addr, 7471), q, verbs.ConnParams{RetryCount: 7})
			if err == nil {
				c.Close()
			}
			errs <- err
		}()
	}
	// Every request reaches the listener before anyone accepts.
	for deadline := time.Now().Add(20 * time.Second); len(l.Events()) < n && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if got := len(l.Events()); got != n {
		t.Fatalf("%d connect requests queued at the listener, want %d", got, n)
	}
	for i := range n {
		conn, _, err := l.Accept(ctx)
		if err != nil {
			t.Fatalf("accept %d: %v", i, err)
		}
		if err := conn.Accept(ctx, qp(srv), verbs.ConnParams{RetryCount: 7}); err != nil {
			t.Fatalf("accept %d: %v", i, err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("dial: %v", err)
		}
	}
}
