package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/transport/cm"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/server/servertest"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// cmQP opens a client of sock and makes skip+1 RC QPs on it, returning the
// last: the two daemons number QPs alike, and the test wants QPNs apart.
func cmQP(t *testing.T, sock string, skip int) (*verbs.Device, *verbs.QP) {
	t.Helper()
	d, err := verbs.Open(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(16, false)
	if err != nil {
		t.Fatal(err)
	}
	var q *verbs.QP
	for range skip + 1 {
		if q, err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	return d, q
}

func cmList(t *testing.T, sock string) []jsonCM {
	t.Helper()
	rc, out, errOut := runCmd("cm", "--json", "--socket", sock)
	if rc != 0 {
		t.Fatalf("cm --json: exit %d, stderr %q", rc, errOut)
	}
	var doc struct {
		CM []jsonCM `json:"cm"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || doc.CM == nil {
		t.Fatalf("cm --json %q: %v (want one object with the list \"cm\")", out, err)
	}
	return doc.CM
}

// TestCM: two daemons, an rdma_cm connection between their clients through
// the SDK. cm --json on each shows it ESTABLISHED with the comm IDs and QPNs
// swapped, TCP port 7174 (service ID 0x1061c06), the addresses and the
// client's pid; the server side also shows the listener on any address.
// After the disconnect the connection is in TIMEWAIT or gone.
func TestCM(t *testing.T) {
	ds := servertest.TwoDaemonsCM(t, 1500, verbsock.Limits{}, cm.Config{CMResponseTimeout: 14, PacketLifeTime: 10})
	cliDev, qa := cmQP(t, ds[0].Socket, 0)
	srvDev, qb := cmQP(t, ds[1].Socket, 2)
	if qa.QPN() == qb.QPN() {
		t.Fatalf("both QPs are %#x", qa.QPN())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := srvDev.Listen(netip.AddrPortFrom(netip.Addr{}, 7174))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if es := cmList(t, ds[1].Socket); len(es) != 1 || !es[0].Listener || es[0].State != "LISTEN" ||
		es[0].ServiceID != "0x1061c06" || es[0].PortSpace != "TCP" || es[0].Port != 7174 || es[0].Local != "" ||
		es[0].PID != os.Getpid() {
		t.Fatalf("server before connecting: %+v, want the listener only", es)
	}
	type accepted struct {
		c   *verbs.Conn
		err error
	}
	done := make(chan accepted, 1)
	go func() {
		c, _, err := l.Accept(ctx)
		if err == nil {
			err = c.Accept(ctx, qb, verbs.ConnParams{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7})
		}
		done <- accepted{c, err}
	}()
	c, err := cliDev.Dial(ctx, netip.AddrPortFrom(ds[1].Host.Addr, 7174), qa, verbs.ConnParams{ResponderResources: 1,
		InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7})
	if err != nil {
		t.Fatal(err)
	}
	acc := <-done
	if acc.err != nil {
		t.Fatal(acc.err)
	}
	_, b := cmConnPair(t, ds, qa.QPN(), qb.QPN())
	cmTable(t, ds[1].Socket, b, qb.QPN(), qa.QPN(), ds[1].Host.Addr.String(), ds[0].Host.Addr.String())

	if err := c.Disconnect(); err != nil {
		t.Fatal(err)
	}
	waitCM(t, acc.c.Events(), verbs.CMEventDisconnected)
	if err := acc.c.Disconnect(); err != nil {
		t.Fatal(err)
	}
	waitCM(t, c.Events(), verbs.CMEventDisconnected)
	for _, sock := range []string{ds[0].Socket, ds[1].Socket} {
		for _, e := range cmList(t, sock) {
			if !e.Listener && e.State != "TIMEWAIT" {
				t.Errorf("after the disconnect: %+v, want TIMEWAIT or gone", e)
			}
		}
	}
}

// cmConnPair checks cm --json on both daemons once connected: the client's
// connection and the server's (beside its listener) agree on IDs, QPNs
// (qpnA the client's, qpnB the server's) and addresses. It returns the
// client's entry and the server's.
func cmConnPair(t *testing.T, ds [2]servertest.Daemon, qpnA, qpnB uint32) (a, b jsonCM) {
	t.Helper()
	pid := os.Getpid()
	ca, cb := cmList(t, ds[0].Socket), cmList(t, ds[1].Socket)
	if len(ca) != 1 || len(cb) != 2 {
		t.Fatalf("client side %+v, server side %+v: want the connection, and the listener on the server", ca, cb)
	}
	a, b = ca[0], cb[0]
	if b.Listener {
		b = cb[1]
	}
	for _, e := range []jsonCM{a, b} {
		if e.Listener || e.State != "ESTABLISHED" || e.ServiceID != "0x1061c06" || e.PortSpace != "TCP" ||
			e.Port != 7174 || e.PID != pid {
			t.Errorf("connection %+v, want ESTABLISHED on TCP:7174 owned by %d", e, pid)
		}
	}
	if !a.Active || b.Active {
		t.Errorf("active flags %v %v, want the client's only", a.Active, b.Active)
	}
	if a.LocalID == 0 || a.LocalID != b.RemoteID || b.LocalID != a.RemoteID {
		t.Errorf("comm IDs %#x/%#x and %#x/%#x, want swapped", a.LocalID, a.RemoteID, b.LocalID, b.RemoteID)
	}
	if a.QPN != qpnA || a.RemoteQPN != qpnB || b.QPN != qpnB || b.RemoteQPN != qpnA {
		t.Errorf("QPNs %#x->%#x and %#x->%#x, want %#x<->%#x", a.QPN, a.RemoteQPN, b.QPN, b.RemoteQPN, qpnA, qpnB)
	}
	ipA, ipB := ds[0].Host.Addr.String(), ds[1].Host.Addr.String()
	if a.Local != ipA || a.Peer != ipB || b.Local != ipB || b.Peer != ipA {
		t.Errorf("addresses %s->%s and %s->%s, want %s<->%s", a.Local, a.Peer, b.Local, b.Peer, ipA, ipB)
	}
	return a, b
}

// cmTable checks plain cm on the server (sock): a header, its connection
// b (local QPN qpn, remote rqpn, addresses ip and peer), then the listener.
func cmTable(t *testing.T, sock string, b jsonCM, qpn, rqpn uint32, ip, peer string) {
	t.Helper()
	pid := os.Getpid()
	rc, out, errOut := runCmd("cm", "--socket", sock)
	if rc != 0 {
		t.Fatalf("cm: exit %d, stderr %q", rc, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 || !regexp.MustCompile(`^STATE +LOCAL_ID +REMOTE_ID +SERVICE_ID +PS:PORT +LOCAL +PEER +QPN +RQPN +PID$`).MatchString(lines[0]) {
		t.Fatalf("cm output:\n%s", out)
	}
	wantConn := []string{"ESTABLISHED", fmt.Sprintf("0x%08x", b.LocalID), fmt.Sprintf("0x%08x", b.RemoteID), "0x1061c06",
		"TCP:7174", ip, peer, fmt.Sprintf("0x%06x", qpn), fmt.Sprintf("0x%06x", rqpn), fmt.Sprint(pid)}
	wantLis := []string{"LISTEN", "-", "-", "0x1061c06", "TCP:7174", "*", "-", "-", "-", fmt.Sprint(pid)}
	if got := strings.Join(strings.Fields(lines[1]), " "); got != strings.Join(wantConn, " ") {
		t.Errorf("connection line %q, want %v", lines[1], wantConn)
	}
	if got := strings.Join(strings.Fields(lines[2]), " "); got != strings.Join(wantLis, " ") {
		t.Errorf("listener line %q, want %v", lines[2], wantLis)
	}
}

func waitCM(t *testing.T, ch <-chan verbs.CMEvent, want verbs.CMEventType) {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok || ev.Type != want {
			t.Fatalf("event %v (open %v), want %v", ev.Type, ok, want)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no %v event", want)
	}
}
