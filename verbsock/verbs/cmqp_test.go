package verbs_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// cmQP gives s a QP made by CreateCMQP on its PD and CQs (rdma_create_qp).
func cmQP(t *testing.T, s *side) {
	t.Helper()
	qp, err := s.pd.CreateCMQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: s.scq, RecvCQ: s.rcq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	s.qp = qp
}

func postRecv(t *testing.T, s *side, id uint64, off uint64) {
	t.Helper()
	if err := s.qp.PostRecv(verbs.RecvWR{ID: id, SGL: []verbs.SGE{{Addr: s.mr.Addr() + off, Length: 64, LKey: s.mr.LKey()}}}); err != nil {
		t.Fatal(err)
	}
}

func send(t *testing.T, s *side, id uint64, msg string) {
	t.Helper()
	copy(s.buf.Bytes()[4096:], msg)
	if err := s.qp.PostSend(verbs.SendWR{ID: id, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: s.mr.Addr() + 4096, Length: uint32(len(msg)), LKey: s.mr.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, s.scq, 1); wc[0].Status != verbs.WCSuccess {
		t.Fatalf("send %d: %+v", id, wc[0])
	}
}

// TestCMConnPrivateDataAndParams: the private data the server passes to
// Accept reaches Dial's caller (librdmacm's ESTABLISHED event,
// param.conn.private_data: the REP's 196 bytes, zero-padded), the usual
// way to hand over an address and rkey; both Conns report what the
// exchange agreed, and the server's keeps the client's private data.
func TestCMConnPrivateDataAndParams(t *testing.T) {
	ce := newCMEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := ce.srv.Listen(ce.serverAddr(7174))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// rping's struct rping_rdma_info: buf u64, rkey u32, size u32.
	info := binary.BigEndian.AppendUint64(nil, ce.b.mr.Addr())
	info = binary.BigEndian.AppendUint32(info, ce.b.mr.RKey())
	info = binary.BigEndian.AppendUint32(info, 4096)
	accepted := make(chan *verbs.Conn, 1)
	go func() {
		c, _, err := l.Accept(ctx)
		if err == nil {
			err = c.Accept(ctx, ce.b.qp, verbs.ConnParams{ResponderResources: 2, InitiatorDepth: 1, RNRRetryCount: 7, PrivateData: info})
		}
		if err != nil {
			t.Error(err)
			c = nil
		}
		accepted <- c
	}()
	c, err := ce.cli.Dial(ctx, ce.serverAddr(7174), ce.a.qp, verbs.ConnParams{ResponderResources: 1, InitiatorDepth: 2,
		RetryCount: 7, RNRRetryCount: 6, PrivateData: []byte("client")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc := <-accepted
	if sc == nil {
		t.FailNow()
	}
	defer sc.Close()
	if p := c.PrivateData(); len(p) != verbs.AcceptPrivateLen || !bytes.Equal(p[:len(info)], info) ||
		!bytes.Equal(p[len(info):], make([]byte, verbs.AcceptPrivateLen-len(info))) {
		t.Errorf("client: private data %x, want the server's %x padded to %d bytes", p, info, verbs.AcceptPrivateLen)
	}
	c.PrivateData()[0] ^= 0xFF // a copy
	if p := c.PrivateData(); !bytes.HasPrefix(p, info) {
		t.Errorf("PrivateData's slice is the Conn's: %x", p)
	}
	if p := sc.PrivateData(); len(p) != verbs.ConnectPrivateLen || !bytes.HasPrefix(p, []byte("client")) {
		t.Errorf("server: private data %q, want the client's padded to %d bytes", p, verbs.ConnectPrivateLen)
	}
	// Our QP's responder resources are the least of ours and the peer's
	// initiator depth, and the other way round.
	if p := c.Params(); p.RemoteQPN != ce.b.qp.QPN() || p.ResponderResources != 1 || p.InitiatorDepth != 2 ||
		p.RNRRetryCount != 7 || p.PathMTU != verbs.MTU1024 {
		t.Errorf("client's params %+v: want remote QPN %#x, responder resources 1, initiator depth 2, RNR retry 7 (the server's), MTU 1024",
			p, ce.b.qp.QPN())
	}
	if p := sc.Params(); p.RemoteQPN != ce.a.qp.QPN() || p.ResponderResources != 2 || p.InitiatorDepth != 1 {
		t.Errorf("server's params %+v: want remote QPN %#x, responder resources 2, initiator depth 1", p, ce.a.qp.QPN())
	}
}

// TestCMQPReceivesBeforeConnect: CreateCMQP leaves the QP as
// rdma_create_qp does (INIT, port 1, P_Key index 0, no access), so
// receives posted before Dial and Accept are there for the first SEND
// each way after ESTABLISHED; the CM then gives each QP remote write, and
// read and atomics where its responder resources are not 0.
func TestCMQPReceivesBeforeConnect(t *testing.T) {
	ce := newCMEnv(t)
	cmQP(t, ce.a)
	cmQP(t, ce.b)
	for _, s := range []*side{ce.a, ce.b} {
		a, _, err := s.qp.Query()
		if err != nil || a.State != verbs.QPStateInit || s.qp.State() != verbs.QPStateInit || a.Port != 1 ||
			a.PKeyIndex != 0 || a.AccessFlags != 0 {
			t.Fatalf("QP %#x after CreateCMQP: %+v %v, want INIT, port 1, P_Key index 0, access 0", s.qp.QPN(), a, err)
		}
	}
	postRecv(t, ce.a, 10, 0)
	postRecv(t, ce.b, 20, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := ce.srv.Listen(ce.serverAddr(7174))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan *verbs.Conn, 1)
	go func() {
		c, _, err := l.Accept(ctx)
		if err == nil {
			err = c.Accept(ctx, ce.b.qp, verbs.ConnParams{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7})
		}
		if err != nil {
			t.Error(err)
			c = nil
		}
		accepted <- c
	}()
	c, err := ce.cli.Dial(ctx, ce.serverAddr(7174), ce.a.qp, verbs.ConnParams{InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc := <-accepted
	if sc == nil {
		t.FailNow()
	}
	defer sc.Close()
	send(t, ce.a, 11, "first from the client")
	if wc := pollN(t, ce.b.rcq, 1); wc[0].Status != verbs.WCSuccess || wc[0].WRID != 20 ||
		string(ce.b.buf.Bytes()[:21]) != "first from the client" {
		t.Fatalf("server's receive %+v %q", wc[0], ce.b.buf.Bytes()[:21])
	}
	send(t, ce.b, 21, "first from the server")
	if wc := pollN(t, ce.a.rcq, 1); wc[0].Status != verbs.WCSuccess || wc[0].WRID != 10 ||
		string(ce.a.buf.Bytes()[:21]) != "first from the server" {
		t.Fatalf("client's receive %+v %q", wc[0], ce.a.buf.Bytes()[:21])
	}
	for _, x := range []struct {
		s    *side
		conn *verbs.Conn
		want verbs.Access
	}{
		{ce.a, c, verbs.AccessRemoteWrite},
		{ce.b, sc, verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
	} {
		a, _, err := x.s.qp.Query()
		if err != nil || a.State != verbs.QPStateRTS || a.AccessFlags != x.want || a.Port != 1 {
			t.Errorf("QP %#x (responder resources %d): %v, access %v, port %d, %v; want RTS, access %v, port 1",
				x.s.qp.QPN(), x.conn.Params().ResponderResources, a.State, a.AccessFlags, a.Port, err, x.want)
		}
	}
}

// TestCMQPUD: CreateCMQP takes a UD QP to RTS with rdma_cm's Q_Key, as
// rdma_create_qp does for RDMA_PS_UDP.
func TestCMQPUD(t *testing.T) {
	ce := newCMEnv(t)
	qp, err := ce.a.pd.CreateCMQP(verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: ce.a.scq, RecvCQ: ce.a.rcq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if a, _, err := qp.Query(); err != nil || a.State != verbs.QPStateRTS || a.QKey != verbs.UDQKey {
		t.Fatalf("UD QP: %+v %v, want RTS with Q_Key %#x", a, err, verbs.UDQKey)
	}
}

// TestCMResolveAddr: ResolveAddr (rdma_resolve_addr) gives the device's
// address a connection to the peer uses and a GID index whose GID is that
// address, picked or given; it refuses a source that is not the device's
// (EADDRNOTAVAIL) and one of another family than the destination (EINVAL);
// an address nobody answers ARP for is an *AddrError (EHOSTUNREACH,
// librdmacm's ADDR_ERROR -ETIMEDOUT) once the daemon's resolution timeout
// (2 s) is over, and sooner with a shorter deadline.
func TestCMResolveAddr(t *testing.T) {
	ce := newCMEnv(t)
	ctx := context.Background()
	local, peer := ce.ds[0].Host.Addr, ce.ds[1].Host.Addr
	for _, src := range []netip.Addr{{}, netip.IPv4Unspecified(), local, netip.AddrFrom16(local.As16())} {
		r, err := ce.cli.ResolveAddr(ctx, peer, src)
		if err != nil {
			t.Fatalf("from %v: %v", src, err)
		}
		g, err := ce.cli.QueryGID(1, r.SGIDIndex)
		if err != nil {
			t.Fatal(err)
		}
		if r.Src != local || r.Dst != peer || g != verbs.GIDFromAddr(local) {
			t.Errorf("from %v: %+v, GID %d is %v; want source %v", src, r, r.SGIDIndex, g, local)
		}
	}
	if _, err := ce.cli.ResolveAddr(ctx, peer, peer); !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Errorf("from the peer's address: %v, want EADDRNOTAVAIL", err)
	}
	if _, err := ce.cli.ResolveAddr(ctx, netip.MustParseAddr("2001:db8::2"), local); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("IPv4 source, IPv6 destination: %v, want EINVAL", err)
	}
	b := peer.As4()
	b[3] ^= 0x80 // same /24, nobody's
	nobody := netip.AddrFrom4(b)
	start := time.Now()
	_, err := ce.cli.ResolveAddr(ctx, nobody, netip.Addr{})
	took := time.Since(start)
	var ae *verbs.AddrError
	if !errors.As(err, &ae) || !errors.Is(err, syscall.EHOSTUNREACH) || ae.Addr != nobody {
		t.Fatalf("%v nobody's: %v, want an *AddrError (EHOSTUNREACH)", nobody, err)
	}
	if ev := ae.Event(); ev.Type != verbs.CMEventAddrError || ev.Status != -int(syscall.ETIMEDOUT) {
		t.Errorf("event %+v, want ADDR_ERROR -ETIMEDOUT", ev)
	}
	if took < 2*time.Second || took > 10*time.Second {
		t.Errorf("failed after %v, want the daemon's 2 s", took)
	}
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = ce.cli.ResolveAddr(sctx, nobody, netip.Addr{})
	if took := time.Since(start); !errors.Is(err, syscall.EHOSTUNREACH) && !errors.Is(err, context.DeadlineExceeded) || took > time.Second {
		t.Errorf("with a 200 ms deadline: %v after %v", err, took)
	}
	// The connection still serves.
	if _, err := ce.cli.ResolveAddr(ctx, peer, netip.Addr{}); err != nil {
		t.Fatal(err)
	}
}
