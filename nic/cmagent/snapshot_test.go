package cmagent_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/vrnic/vrnicd/nic/cmagent"
	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/transport/cm"
)

// TestSnapshot: two agents over a link; both snapshots show the connection
// ESTABLISHED with comm IDs and QPNs swapped, the passive one its
// listener; after the disconnect it is in TIMEWAIT or gone.
func TestSnapshot(t *testing.T) {
	ha, hb := nictest.Pair(t, 1500)
	a, b := newSide(t, ha, 0x1000000), newSide(t, hb, 0x2000000)
	if _, err := b.ag.Listen(0, 7174, netip.Addr{}, b.handler(t)); err != nil {
		t.Fatal(err)
	}
	id, err := a.ag.Connect(context.Background(), netip.AddrPort{}, netip.AddrPortFrom(hb.Addr, 7174), a.qp,
		cmagent.ConnParams{RespRes: 1, InitDepth: 1, RetryCount: 7, RNRRetry: 7}, a.handler(t))
	if err != nil {
		t.Fatal(err)
	}
	req := b.next(t, cm.EventConnectRequest)
	if err := b.ag.Accept(req.ID, b.qp, cmagent.ConnParams{RespRes: 1, InitDepth: 1, RNRRetry: 7}, nil); err != nil {
		t.Fatal(err)
	}
	a.next(t, cm.EventEstablished)
	b.next(t, cm.EventEstablished)
	sa, sb := a.ag.Snapshot(), b.ag.Snapshot()
	if len(sa.Conns) != 1 || len(sb.Conns) != 1 {
		t.Fatalf("snapshots hold %d and %d connections", len(sa.Conns), len(sb.Conns))
	}
	ca, cb := sa.Conns[0], sb.Conns[0]
	if ca.ID != id || cb.ID != req.ID || ca.RemoteID != cb.ID || cb.RemoteID != ca.ID {
		t.Errorf("comm IDs %#x/%#x and %#x/%#x, want swapped", ca.ID, ca.RemoteID, cb.ID, cb.RemoteID)
	}
	if ca.State != cm.StateEstablished || cb.State != cm.StateEstablished {
		t.Errorf("states %v %v", ca.State, cb.State)
	}
	if ca.QPN != a.qp.QPN() || ca.RemoteQPN != b.qp.QPN() || cb.QPN != b.qp.QPN() || cb.RemoteQPN != a.qp.QPN() {
		t.Errorf("QPNs %#x->%#x, %#x->%#x", ca.QPN, ca.RemoteQPN, cb.QPN, cb.RemoteQPN)
	}
	if ca.Peer != hb.Addr || cb.Peer != ha.Addr {
		t.Errorf("peers %v %v", ca.Peer, cb.Peer)
	}
	if len(sa.Listeners) != 0 || len(sb.Listeners) != 1 || sb.Listeners[0].ServiceID != cm.ServiceID(cm.PortSpaceTCP, 7174) {
		t.Errorf("listeners %+v and %+v", sa.Listeners, sb.Listeners)
	}
	if err := a.ag.Disconnect(id, nil); err != nil {
		t.Fatal(err)
	}
	d := b.next(t, cm.EventDisconnected)
	if err := b.ag.Disconnect(d.ID, nil); err != nil {
		t.Fatal(err)
	}
	a.next(t, cm.EventDisconnected)
	for _, c := range a.ag.Snapshot().Conns {
		if c.State != cm.StateTimewait {
			t.Errorf("after the disconnect %#x is %v, want TIMEWAIT or gone", c.ID, c.State)
		}
	}
}
