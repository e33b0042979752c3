package verbs_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// TestCMResolveUD: UD over SIDR between two daemons, with the SIDR_REQ
// lost once (a lost SIDR_REP would make the resent request a new one, as
// with the kernel's CM, which keeps no answered SIDR request): the client learns the server's QPN, Q_Key
// (rdma_cm's RDMA_UDP_QKEY) and a path, its datagram reaches the server,
// and the server answers through an address handle made from the
// datagram's GRH, as udaddy does.
func TestCMResolveUD(t *testing.T) {
	ce := newCMEnv(t)
	ce.ds[0].Host.Link.SetHook(nictest.NewCMLoss(1, mad.AttrServiceIDResReq).Hook)
	ctx := ctxT(t, 30*time.Second)
	a := newSide(t, ce.cli, ce.ds[0].Host, verbs.QPTypeUD, nil, nil)
	b := newSide(t, ce.srv, ce.ds[1].Host, verbs.QPTypeUD, nil, nil)
	l, err := ce.srv.ListenUD(netip.AddrPortFrom(netip.Addr{}, 7174))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan error, 1)
	var req verbs.CMEvent
	go func() {
		c, ev, err := l.Accept(ctx)
		req = ev
		if err == nil {
			if err = verbs.ReadyUD(b.qp); err == nil {
				err = b.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{b.mr.SGE(0, verbs.GRHLen+64)}})
			}
		}
		if err == nil {
			err = c.AcceptUD(b.qp, []byte("from the server"))
		}
		done <- err
	}()
	peer, err := ce.cli.ResolveUD(ctx, ce.serverAddr(7174), []byte("from the client"))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(req.PrivateData, []byte("from the client")) || req.Peer.Addr() != ce.ds[0].Host.Addr || req.Local != ce.serverAddr(7174) {
		t.Errorf("SIDR request: private %q, peer %v, local %v", req.PrivateData, req.Peer, req.Local)
	}
	if peer.QPN != b.qp.QPN() || peer.QKey != verbs.UDQKey || peer.AH.DGID != verbs.GIDFromAddr(ce.ds[1].Host.Addr) ||
		!bytes.HasPrefix(peer.PrivateData, []byte("from the server")) || peer.Peer != ce.serverAddr(7174) ||
		peer.Local.Addr() != ce.ds[0].Host.Addr {
		t.Fatalf("resolved peer %+v", peer)
	}

	// The datagrams, as udaddy sends them: SEND with the sender's QPN as
	// immediate data.
	if err := verbs.ReadyUD(a.qp); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostRecv(verbs.RecvWR{ID: 2, SGL: []verbs.SGE{a.mr.SGE(4096, verbs.GRHLen+64)}}); err != nil {
		t.Fatal(err)
	}
	ah, err := a.pd.CreateAH(peer.AH)
	if err != nil {
		t.Fatal(err)
	}
	copy(a.buf.Bytes(), "ping")
	if err := a.qp.PostSend(verbs.SendWR{ID: 3, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, AH: ah,
		RemoteQPN: peer.QPN, RemoteQKey: peer.QKey, SGL: []verbs.SGE{a.mr.SGE(0, 4)}}); err != nil {
		t.Fatal(err)
	}
	wc := pollN(t, b.rcq, 1)[0]
	if wc.Status != verbs.WCSuccess || wc.SrcQP != a.qp.QPN() || string(b.buf.Bytes()[verbs.GRHLen:verbs.GRHLen+4]) != "ping" {
		t.Fatalf("server receive %+v", wc)
	}
	back, err := ce.srv.AHFromGRH(b.buf.Bytes()[:verbs.GRHLen])
	if err != nil {
		t.Fatal(err)
	}
	if back.DGID != verbs.GIDFromAddr(ce.ds[0].Host.Addr) {
		t.Fatalf("reply AH %+v", back)
	}
	bah, err := b.pd.CreateAH(back)
	if err != nil {
		t.Fatal(err)
	}
	copy(b.buf.Bytes()[8192:], "pong")
	if err := b.qp.PostSend(verbs.SendWR{ID: 4, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, AH: bah,
		RemoteQPN: wc.SrcQP, RemoteQKey: verbs.UDQKey, SGL: []verbs.SGE{b.mr.SGE(8192, 4)}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, a.rcq, 1)[0]; wc.Status != verbs.WCSuccess || string(a.buf.Bytes()[4096+verbs.GRHLen:4096+verbs.GRHLen+4]) != "pong" {
		t.Fatalf("client receive %+v", wc)
	}
}

// TestCMResolveUDRefused: a listener's Reject, a port nobody listens on
// and a peer that never answers fail the resolution each its own way.
func TestCMResolveUDRefused(t *testing.T) {
	ce := newCMEnv(t)
	ctx := ctxT(t, 30*time.Second)
	l, err := ce.srv.ListenUD(netip.AddrPortFrom(netip.Addr{}, 7174))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		if c, _, err := l.Accept(ctx); err == nil {
			_ = c.Reject([]byte("no"))
		}
	}()
	var se *verbs.SIDRError
	if _, err := ce.cli.ResolveUD(ctx, ce.serverAddr(7174), nil); !errors.As(err, &se) || se.Status != verbs.SIDRRejected {
		t.Fatalf("rejected resolution: %v", err)
	}
	if _, err := ce.cli.ResolveUD(ctx, ce.serverAddr(7175), nil); !errors.As(err, &se) || se.Status != verbs.SIDRServiceNotFound {
		t.Fatalf("resolution of an unused port: %v", err)
	}
	// A TCP-port-space listener on the same port is not a UD service.
	tl, err := ce.srv.Listen(netip.AddrPortFrom(netip.Addr{}, 7176))
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	if _, err := ce.cli.ResolveUD(ctx, ce.serverAddr(7176), nil); !errors.As(err, &se) || se.Status != verbs.SIDRServiceNotFound {
		t.Fatalf("resolution of a TCP port: %v", err)
	}
	ce.ds[0].Host.Link.SetHook(nictest.NewCMLoss(1000, mad.AttrServiceIDResReq).Hook)
	if _, err := ce.cli.ResolveUD(ctx, ce.serverAddr(7174), nil); !errors.Is(err, verbs.ErrUnreachable) {
		t.Fatalf("unanswered resolution: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := ce.cli.ResolveUD(short, ce.serverAddr(7174), nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("resolution past its context: %v", err)
	}
	if _, err := ce.cli.ResolveUD(ctx, ce.serverAddr(7174), make([]byte, verbs.ResolveUDPrivateLen+1)); err == nil {
		t.Fatal("oversized private data taken")
	}
}

// TestAHFromGRH: a reply's address vector from an IPv6 GRH (the RoCEv2
// GID at index 0, link-local) and an IPv4 one (the header in the last 20
// bytes); a GRH to an address not ours, or with no IP header, is refused.
func TestAHFromGRH(t *testing.T) {
	ce := newCMEnv(t)
	d := ce.srv
	ll, err := d.QueryGID(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	var g6 [verbs.GRHLen]byte
	binary.BigEndian.PutUint32(g6[:], 6<<28|0x12<<20|0xABCDE)
	peer := netip.MustParseAddr("fe80::5054:ff:fe00:1")
	copy(g6[8:24], peer.AsSlice())
	copy(g6[24:40], ll[:])
	ah, err := d.AHFromGRH(g6[:])
	if err != nil || ah.DGID != verbs.GIDFromAddr(peer) || ah.SGIDIndex != 0 || ah.TrafficClass != 0x12 || ah.FlowLabel != 0xABCDE || ah.HopLimit != 0xFF {
		t.Fatalf("IPv6 GRH: %+v %v", ah, err)
	}
	var g4 [verbs.GRHLen]byte
	g4[20], g4[21] = 0x45, 0x08
	copy(g4[32:36], ce.ds[0].Host.Addr.AsSlice())
	copy(g4[36:40], ce.ds[1].Host.Addr.AsSlice())
	ah, err = d.AHFromGRH(g4[:])
	if err != nil || ah.DGID != verbs.GIDFromAddr(ce.ds[0].Host.Addr) || ah.SGIDIndex != ce.ds[1].Host.GIDIndex() || ah.TrafficClass != 0x08 {
		t.Fatalf("IPv4 GRH: %+v %v", ah, err)
	}
	copy(g4[36:40], netip.MustParseAddr("203.0.113.7").AsSlice())
	if _, err := d.AHFromGRH(g4[:]); err == nil {
		t.Fatal("GRH to an address not ours taken")
	}
	if _, err := d.AHFromGRH(make([]byte, verbs.GRHLen)); err == nil {
		t.Fatal("GRH without an IP header taken")
	}
	if _, err := d.AHFromGRH(g6[:10]); err == nil {
		t.Fatal("short GRH taken")
	}
}
