package verbs_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/transport/cm"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/server"
	"github.com/vrnic/vrnicd/verbsock/server/servertest"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// cmEnv is two daemons with short CM timers (a lost MAD is resent in about
// 75 ms), their clients, and a side on each.
type cmEnv struct {
	ds       [2]servertest.Daemon
	cli, srv *verbs.Device
	a, b     *side
}

func newCMEnv(t *testing.T) *cmEnv {
	t.Helper()
	ds := servertest.TwoDaemonsCM(t, 1500, verbsock.Limits{}, cm.Config{CMResponseTimeout: 14, PacketLifeTime: 10})
	e := &env{t: t, host: ds[0].Host, peer: ds[1].Host, srv: ds[0].Server, psrv: ds[1].Server}
	ce := &cmEnv{ds: ds, cli: e.client(), srv: e.peerClient()}
	ce.a = newSide(t, ce.cli, ds[0].Host, verbs.QPTypeRC, nil, nil)
	ce.b = newSide(t, ce.srv, ds[1].Host, verbs.QPTypeRC, nil, nil)
	return ce
}

func (ce *cmEnv) serverAddr(port uint16) netip.AddrPort {
	return netip.AddrPortFrom(ce.ds[1].Host.Addr, port)
}

func toInit(t *testing.T, s *side) {
	t.Helper()
	if err := s.qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1,
		AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
}

func nextCM(t *testing.T, ch <-chan verbs.CMEvent, want verbs.CMEventType) verbs.CMEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatalf("event channel closed, want %v", want)
		}
		if ev.Type != want {
			t.Fatalf("event %v (status %d), want %v", ev.Type, ev.Status, want)
		}
		return ev
	case <-time.After(20 * time.Second):
		t.Fatalf("no %v event", want)
	}
	return verbs.CMEvent{}
}

// TestCMConnectLossy: rdma_cm through the SDK between two daemons, with the
// REQ, REP, RTU and DREQ each lost once: the retransmissions establish the
// connection, private data goes both ways, a SEND crosses it, and the
// disconnect leaves both QPs in ERR with TIMEWAIT_EXIT on both sides.
func TestCMConnectLossy(t *testing.T) {
	ce := newCMEnv(t)
	la := nictest.NewCMLoss(1, mad.AttrConnectRequest, mad.AttrReadyToUse, mad.AttrDisconnectRequest)
	lb := nictest.NewCMLoss(1, mad.AttrConnectReply)
	ce.ds[0].Host.Link.SetHook(la.Hook)
	ce.ds[1].Host.Link.SetHook(lb.Hook)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	l, err := ce.srv.Listen(netip.AddrPortFrom(netip.Addr{}, 7174))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	toInit(t, ce.b) // to post the receive before the connection is up, as rping does
	if err := ce.b.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{{Addr: ce.b.mr.Addr(), Length: 64, LKey: ce.b.mr.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	type accepted struct {
		c   *verbs.Conn
		req verbs.CMEvent
		err error
	}
	done := make(chan accepted, 1)
	go func() {
		c, req, err := l.Accept(ctx)
		if err == nil {
			err = c.Accept(ctx, ce.b.qp, verbs.ConnParams{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7,
				PrivateData: []byte("from the server")})
		}
		done <- accepted{c, req, err}
	}()
	c, err := ce.cli.Dial(ctx, ce.serverAddr(7174), ce.a.qp, verbs.ConnParams{ResponderResources: 1, InitiatorDepth: 1,
		RetryCount: 7, RNRRetryCount: 7, PrivateData: []byte("from the client")})
	if err != nil {
		t.Fatal(err)
	}
	acc := <-done
	if acc.err != nil {
		t.Fatal(acc.err)
	}
	if !bytes.HasPrefix(acc.req.PrivateData, []byte("from the client")) || acc.req.Info.RemoteQPN != ce.a.qp.QPN() ||
		acc.req.Peer.Addr() != ce.ds[0].Host.Addr || acc.req.Local != ce.serverAddr(7174) {
		t.Errorf("connect request: private %q, remote QPN %#x, peer %v, local %v", acc.req.PrivateData,
			acc.req.Info.RemoteQPN, acc.req.Peer, acc.req.Local)
	}
	for _, s := range []*side{ce.a, ce.b} {
		if a, _, err := s.qp.Query(); err != nil || a.State != verbs.QPStateRTS {
			t.Fatalf("QP %#x: %v %v, want RTS", s.qp.QPN(), a.State, err)
		}
	}
	copy(ce.a.buf.Bytes(), "rdma-ping-0: ABCDEFG")
	if err := ce.a.qp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: ce.a.mr.Addr(), Length: 20, LKey: ce.a.mr.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, ce.b.rcq, 1); wc[0].Status != verbs.WCSuccess || string(ce.b.buf.Bytes()[:20]) != "rdma-ping-0: ABCDEFG" {
		t.Fatalf("receive %+v %q", wc[0], ce.b.buf.Bytes()[:20])
	}

	if err := c.Disconnect(); err != nil {
		t.Fatal(err)
	}
	nextCM(t, acc.c.Events(), verbs.CMEventDisconnected)
	if err := acc.c.Disconnect(); err != nil {
		t.Fatal(err)
	}
	nextCM(t, c.Events(), verbs.CMEventDisconnected)
	nextCM(t, c.Events(), verbs.CMEventTimewaitExit)
	nextCM(t, acc.c.Events(), verbs.CMEventTimewaitExit)
	for _, s := range []*side{ce.a, ce.b} {
		if a, _, err := s.qp.Query(); err != nil || a.State != verbs.QPStateErr {
			t.Errorf("QP %#x after the disconnect: %v %v, want ERR", s.qp.QPN(), a.State, err)
		}
	}
	for _, x := range []struct {
		l    *nictest.CMLoss
		attr uint16
	}{{la, mad.AttrConnectRequest}, {lb, mad.AttrConnectReply}, {la, mad.AttrReadyToUse}, {la, mad.AttrDisconnectRequest}} {
		if x.l.Dropped(x.attr) != 1 {
			t.Errorf("%s lost %d times, want 1", mad.AttrName(mad.ClassCM, x.attr), x.l.Dropped(x.attr))
		}
	}
	c.Close()
	acc.c.Close()
}

// TestCMRejected: a port nobody listens on is REJ reason 8; a listener's
// Reject is reason 28 with its private data.
func TestCMRejected(t *testing.T) {
	ce := newCMEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := ce.cli.Dial(ctx, ce.serverAddr(9999), ce.a.qp, verbs.ConnParams{})
	var rej *verbs.RejectedError
	if !errors.As(err, &rej) || rej.Reason != verbs.RejectInvalidService {
		t.Fatalf("dial to an unused port: %v, want REJ reason 8", err)
	}

	l, err := ce.srv.Listen(ce.serverAddr(7174))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ce.srv.Listen(ce.serverAddr(7174)); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("second listen on the port: %v, want EADDRINUSE", err)
	}
	go func() {
		if c, _, err := l.Accept(ctx); err == nil {
			_ = c.Reject([]byte("go away"))
		}
	}()
	_, err = ce.cli.Dial(ctx, ce.serverAddr(7174), ce.a.qp, verbs.ConnParams{})
	if !errors.As(err, &rej) || rej.Reason != verbs.RejectConsumerDefined || !bytes.HasPrefix(rej.PrivateData, []byte("go away")) {
		t.Fatalf("dial rejected by the listener: %v", err)
	}
	if _, err := ce.cli.Dial(ctx, ce.serverAddr(7174), ce.a.qp, verbs.ConnParams{PrivateData: make([]byte, 57)}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("57 bytes of REQ private data: %v, want EINVAL", err)
	}
}

// TestCMClientGone: when the listening client goes, its connection is
// disconnected (the peer sees DISCONNECTED) and its port refuses requests.
func TestCMClientGone(t *testing.T) {
	ce := newCMEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := ce.srv.Listen(ce.serverAddr(7174))
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan error, 1)
	go func() {
		c, _, err := l.Accept(ctx)
		if err == nil {
			err = c.Accept(ctx, ce.b.qp, verbs.ConnParams{})
		}
		accepted <- err
	}()
	c, err := ce.cli.Dial(ctx, ce.serverAddr(7174), ce.a.qp, verbs.ConnParams{})
	if err != nil {
		t.Fatal(err)
	}
	// The passive side must have the RTU first: a client that goes while
	// its connection is in REP-sent is a REJ 28 (as cm_destroy_id does),
	// not a DREQ.
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	ce.srv.Close()
	nextCM(t, c.Events(), verbs.CMEventDisconnected)
	if err := c.Disconnect(); err != nil {
		t.Fatal(err)
	}
	nextCM(t, c.Events(), verbs.CMEventTimewaitExit)
	c.Close()
	qp2 := newSide(t, ce.cli, ce.ds[0].Host, verbs.QPTypeRC, nil, ce.a.pd)
	_, err = ce.cli.Dial(ctx, ce.serverAddr(7174), qp2.qp, verbs.ConnParams{})
	var rej *verbs.RejectedError
	if !errors.As(err, &rej) || rej.Reason != verbs.RejectInvalidService {
		t.Fatalf("dial after the listener's client left: %v, want REJ reason 8", err)
	}
}

// TestCMLimits: a client's listeners and connections are bounded; a
// connect request past its limit is rejected (REJ 28) without reaching it.
func TestCMLimits(t *testing.T) {
	ce := newCMEnv(t)
	srv, err := server.New(server.Config{Device: ce.ds[1].Host.Dev, CM: ce.ds[1].CM,
		CMLimits: server.CMLimits{MaxListens: 1, MaxConns: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	e := &env{t: t}
	d := e.dial(srv)
	l, err := d.Listen(ce.serverAddr(7000))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Listen(ce.serverAddr(7001)); !errors.Is(err, syscall.EDQUOT) {
		t.Errorf("second listener: %v, want EDQUOT", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The first request is held (not answered); the second finds the
	// client at its limit.
	go func() { _, _ = ce.cli.Dial(ctx, ce.serverAddr(7000), ce.a.qp, verbs.ConnParams{}) }()
	if _, _, err := l.Accept(ctx); err != nil {
		t.Fatal(err)
	}
	qp2 := newSide(t, ce.cli, ce.ds[0].Host, verbs.QPTypeRC, nil, ce.a.pd)
	_, err = ce.cli.Dial(ctx, ce.serverAddr(7000), qp2.qp, verbs.ConnParams{})
	var rej *verbs.RejectedError
	if !errors.As(err, &rej) || rej.Reason != verbs.RejectConsumerDefined {
		t.Fatalf("request past the listener's client's limit: %v, want REJ 28", err)
	}
	select {
	case ev := <-l.Events():
		t.Errorf("a refused request reached the client: %v", ev.Type)
	default:
	}
}

// TestCMAddrError: a Dial (and a ResolveUD) to an address of the subnet
// that nobody holds ends, once ARP has gone unanswered for the daemon's
// resolution timeout, in an *AddrError: rdma_cm's ADDR_ERROR, status
// -ETIMEDOUT, which also reads as EHOSTUNREACH.
func TestCMAddrError(t *testing.T) {
	ce := newCMEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := ce.ds[1].Host.Addr.As4()
	b[3] ^= 0x80 // same /24, nobody's
	nobody := netip.AddrPortFrom(netip.AddrFrom4(b), 7174)
	check := func(what string, err error) {
		t.Helper()
		var ae *verbs.AddrError
		if !errors.As(err, &ae) || !errors.Is(err, syscall.EHOSTUNREACH) {
			t.Fatalf("%s to %v: %v, want an *AddrError (EHOSTUNREACH)", what, nobody, err)
		}
		if ev := ae.Event(); ev.Type != verbs.CMEventAddrError || ev.Status != -int(syscall.ETIMEDOUT) || ev.Peer.Addr() != nobody.Addr() {
			t.Errorf("%s: event %+v, want ADDR_ERROR, status -ETIMEDOUT, peer %v", what, ev, nobody.Addr())
		}
	}
	_, err := ce.cli.Dial(ctx, nobody, ce.a.qp, verbs.ConnParams{})
	check("Dial", err)
	_, err = ce.cli.ResolveUD(ctx, nobody, nil)
	check("ResolveUD", err)
}

// TestCMDepthsBounded: responder resources or an initiator depth past the
// device's (max_qp_rd_atom, max_qp_init_rd_atom) fail Dial and Accept with
// EINVAL, as librdmacm's ucma_valid_param refuses them, rather than making
// a connection whose QP could not reach RTS.
func TestCMDepthsBounded(t *testing.T) {
	ce := newCMEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	attr, err := ce.cli.Query()
	if err != nil {
		t.Fatal(err)
	}
	over := uint8(attr.MaxQPRdAtom + 1)
	if _, err := ce.cli.Dial(ctx, ce.serverAddr(7300), ce.a.qp, verbs.ConnParams{ResponderResources: over}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Dial, responder resources %d: %v, want EINVAL", over, err)
	}
	l, err := ce.srv.Listen(ce.serverAddr(7300))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = ce.cli.Dial(ctx, ce.serverAddr(7300), ce.a.qp, verbs.ConnParams{}) }()
	req, _, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := req.Accept(ctx, ce.b.qp, verbs.ConnParams{InitiatorDepth: uint8(attr.MaxQPInitRdAtom + 1)}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Accept, initiator depth %d: %v, want EINVAL", attr.MaxQPInitRdAtom+1, err)
	}
}

// A REJ's error says what the two reasons a user meets mean.
func TestRejectedErrorSaysWhy(t *testing.T) {
	for reason, want := range map[int]string{8: "nothing listens on that port", 28: "the listener refused", 30: "REJ reason 30"} {
		if got := (&verbs.RejectedError{Reason: reason}).Error(); !bytes.Contains([]byte(got), []byte(want)) {
			t.Errorf("reason %d: %q, want it to say %q", reason, got, want)
		}
	}
}
