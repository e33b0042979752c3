package cmagent_test

import (
	"bytes"
	"context"
	"net/netip"
	"testing"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/nic/cmagent"
	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/cm"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
)

func (s *side) udQP(t *testing.T) *nic.QP {
	t.Helper()
	qp, err := s.h.Dev.CreateQP(nic.QPConfig{Type: transport.QPTypeUD, PD: s.pd, SendCQ: s.scq, RecvCQ: s.rcq,
		Cap: transport.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(&transport.QPAttr{State: transport.StateInit, Port: 1, QKey: cm.UDPQKey},
		transport.AttrState|transport.AttrPort|transport.AttrPKeyIndex|transport.AttrQKey); err != nil {
		t.Fatal(err)
	}
	return qp
}

// TestSIDRResolve: a SIDR_REQ lost once is resent; the listener of the UDP
// port space sees the request with the cma_hdr's addresses and the private
// data after it, and its SIDR_REP brings the resolver its QPN and Q_Key and
// an address vector to the listener's GID.
func TestSIDRResolve(t *testing.T) {
	ha, hb := nictest.Pair(t, 1500)
	a, b := newSide(t, ha, 0x1000000), newSide(t, hb, 0x2000000)
	ha.Link.SetHook(nictest.NewCMLoss(1, mad.AttrServiceIDResReq).Hook)
	if _, err := b.ag.Listen(cm.PortSpaceUDP, 7174, netip.Addr{}, b.handler(t)); err != nil {
		t.Fatal(err)
	}
	priv := []byte("udaddy")
	id, route, err := a.ag.ResolveUD(context.Background(), netip.AddrPort{}, netip.AddrPortFrom(hb.Addr, 7174), priv, a.handler(t))
	if err != nil {
		t.Fatal(err)
	}
	if av := route.AV; av.DGID != cm.GIDFromAddr(hb.Addr) || av.HopLimit == 0 || av.Port != 1 || route.Src.Addr() != ha.Addr {
		t.Fatalf("route %+v", route)
	}
	req := b.next(t, cm.EventSIDRRequest)
	if r := req.Request; r == nil || r.Src.Addr() != ha.Addr || r.Dst != netip.AddrPortFrom(hb.Addr, 7174) ||
		!bytes.HasPrefix(req.PrivateData, priv) {
		t.Fatalf("SIDR request %+v, private data %q", req.Request, req.PrivateData)
	}
	qp := b.udQP(t)
	if err := b.ag.AcceptUD(req.ID, qp, []byte("welcome")); err != nil {
		t.Fatal(err)
	}
	ev := a.next(t, cm.EventSIDRResolved)
	if ev.ID != id || ev.SIDR == nil || ev.SIDR.Status != mad.SIDRValid || ev.SIDR.QPN != qp.QPN() || ev.SIDR.QKey != cm.UDPQKey ||
		!bytes.HasPrefix(ev.PrivateData, []byte("welcome")) || ev.UD == nil || *ev.UD != route {
		t.Fatalf("resolved %+v, SIDR %+v", ev.Event, ev.SIDR)
	}
	if e, st := ev.RDMACMEvent(); e != cm.RDMACMEventEstablished || st != 0 {
		t.Fatalf("rdma_cm event %d status %d", e, st)
	}
}

// TestSIDRReject: a listener that rejects, one whose handler refuses, and
// a port nobody listens on each answer with their SIDR status.
func TestSIDRReject(t *testing.T) {
	ha, hb := nictest.Pair(t, 1500)
	a, b := newSide(t, ha, 0x1000000), newSide(t, hb, 0x2000000)
	if _, err := b.ag.Listen(cm.PortSpaceUDP, 7174, netip.Addr{}, b.handler(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ag.Listen(cm.PortSpaceUDP, 7175, netip.Addr{}, func(cmagent.Event) bool { return false }); err != nil {
		t.Fatal(err)
	}
	resolve := func(port uint16) {
		t.Helper()
		if _, _, err := a.ag.ResolveUD(context.Background(), netip.AddrPort{}, netip.AddrPortFrom(hb.Addr, port), nil, a.handler(t)); err != nil {
			t.Fatal(err)
		}
	}
	resolve(7174)
	req := b.next(t, cm.EventSIDRRequest)
	if err := b.ag.Reject(req.ID, nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		port   uint16
		status uint8
	}{{7174, mad.SIDRRejected}, {7175, mad.SIDRRejected}, {7176, mad.SIDRServiceNotFound}} {
		if c.port != 7174 {
			resolve(c.port)
		}
		ev := a.next(t, cm.EventSIDRResolved)
		if ev.SIDR == nil || ev.SIDR.Status != c.status {
			t.Fatalf("port %d: SIDR answer %+v, want status %d", c.port, ev.SIDR, c.status)
		}
		if e, st := ev.RDMACMEvent(); e != cm.RDMACMEventUnreachable || st != int(c.status) {
			t.Fatalf("port %d: rdma_cm event %d status %d", c.port, e, st)
		}
	}
	// A TCP-port-space QP is no answer to a SIDR request.
	resolve(7174)
	req = b.next(t, cm.EventSIDRRequest)
	if err := b.ag.AcceptUD(req.ID, b.qp, nil); err == nil {
		t.Fatal("AcceptUD took an RC QP")
	}
}

// TestSIDRUnreachable: a SIDR_REQ nobody answers ends in EventUnreachable
// after the retries.
func TestSIDRUnreachable(t *testing.T) {
	ha, hb := nictest.Pair(t, 1500)
	a := newSide(t, ha, 0x1000000)
	ha.Link.SetHook(nictest.NewCMLoss(100, mad.AttrServiceIDResReq).Hook)
	if _, _, err := a.ag.ResolveUD(context.Background(), netip.AddrPort{}, netip.AddrPortFrom(hb.Addr, 7174), nil, a.handler(t)); err != nil {
		t.Fatal(err)
	}
	ev := a.next(t, cm.EventUnreachable)
	if e, _ := ev.RDMACMEvent(); e != cm.RDMACMEventUnreachable {
		t.Fatalf("rdma_cm event %d", e)
	}
}
