package cm

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/transport/transporttest"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
)

// IBA 12.6: each message has its private-data room, rdma_cm's cma_hdr
// taking 36 bytes of a REQ's 92.
func TestPrivateDataRoomPerMessage(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	var out Output
	cp := rpingConnect()
	cp.PrivateData = make([]byte, REQUserPrivateLen+1)
	if _, err := p.active.Connect(cp, &out); !errors.Is(err, ErrPrivateData) {
		t.Errorf("57 bytes after the cma_hdr: %v", err)
	}
	if n, _ := p.active.Len(); n != 0 {
		t.Error("failed Connect kept a connection")
	}
	cp.PrivateData = bytes.Repeat([]byte{7}, REQUserPrivateLen)
	if _, err := p.active.Connect(cp, &out); err != nil {
		t.Fatal(err)
	}
	pOut := deliver(t, &out, p.passive, activeIP)
	ev := only(t, pOut, EventConnectRequest)
	if !bytes.Equal(ev.PrivateData, cp.PrivateData) {
		t.Errorf("request private data %x", ev.PrivateData)
	}
	ap := rpingAccept()
	ap.PrivateData = make([]byte, REPPrivateLen+1)
	if err := p.passive.Accept(ev.ID, ap, pOut); !errors.Is(err, ErrPrivateData) {
		t.Errorf("197 bytes of REP private data: %v", err)
	}
	ap.PrivateData = bytes.Repeat([]byte{9}, REPPrivateLen)
	pOut.Reset()
	if err := p.passive.Accept(ev.ID, ap, pOut); err != nil {
		t.Fatal(err)
	}
	if e := only(t, deliver(t, pOut, p.active, passiveIP), EventEstablished); !bytes.Equal(e.PrivateData, ap.PrivateData) {
		t.Errorf("REP private data %x", e.PrivateData)
	}
	for _, c := range []struct {
		got, want int
	}{{REQPrivateLen, len(mad.REQ{}.PrivateData)}, {REPPrivateLen, len(mad.REP{}.PrivateData)},
		{REJPrivateLen, len(mad.REJ{}.PrivateData)}, {RTUPrivateLen, len(mad.RTU{}.PrivateData)},
		{DREQPrivateLen, len(mad.DREQ{}.PrivateData)}, {DREPPrivateLen, len(mad.DREP{}.PrivateData)},
		{MRAPrivateLen, len(mad.MRA{}.PrivateData)}, {SIDRREQPrivateLen, len(mad.SIDRREQ{}.PrivateData)},
		{SIDRREPPrivateLen, len(mad.SIDRREP{}.PrivateData)}} {
		if c.got != c.want {
			t.Errorf("private data room %d, the codec's %d", c.got, c.want)
		}
	}
}

// IBA 12.11: SIDR_REQ to a listener is answered with the consumer's UD QP
// and Q_Key; to no listener, status 1 "service ID not supported".
func TestSIDRResolvesUDQP(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	if _, err := p.passive.Listen(ServiceID(PortSpaceUDP, 7174), passiveIP); err != nil {
		t.Fatal(err)
	}
	var out Output
	sp := SIDRParams{Src: netip.AddrPortFrom(activeIP, 4000), Dst: netip.AddrPortFrom(passiveIP, 7174), PrivateData: []byte("udaddy")}
	id, err := p.active.ResolveSIDR(sp, &out)
	if err != nil {
		t.Fatal(err)
	}
	pOut := deliver(t, &out, p.passive, activeIP)
	ev := only(t, pOut, EventSIDRRequest)
	if ev.Request.Src != sp.Src || ev.Request.Dst != sp.Dst || !bytes.HasPrefix(ev.PrivateData, []byte("udaddy")) {
		t.Errorf("request %+v %q", ev.Request, ev.PrivateData)
	}
	if dup := deliver(t, &out, p.passive, activeIP); len(dup.Sends)+len(dup.Events) != 0 {
		t.Error("duplicate SIDR_REQ answered while pending")
	}
	pOut.Reset()
	if err := p.passive.AnswerSIDR(ev.ID, SIDRAnswer{Status: mad.SIDRValid, QPN: 0x33, QKey: UDPQKey}, nil, pOut); err != nil {
		t.Fatal(err)
	}
	res := only(t, deliver(t, pOut, p.active, passiveIP), EventSIDRResolved)
	if res.ID != id || *res.SIDR != (SIDRAnswer{Status: mad.SIDRValid, QPN: 0x33, QKey: UDPQKey}) {
		t.Errorf("resolved %+v", res.SIDR)
	}
	for _, tb := range []*Table{p.active, p.passive} {
		if n, _ := tb.Len(); n != 0 {
			t.Errorf("%d entries left after SIDR", n)
		}
	}
	out.Reset()
	sp.Dst = netip.AddrPortFrom(passiveIP, 9)
	_, _ = p.active.ResolveSIDR(sp, &out)
	res = only(t, deliver(t, deliver(t, &out, p.passive, activeIP), p.active, passiveIP), EventSIDRResolved)
	if res.SIDR.Status != mad.SIDRServiceNotFound {
		t.Errorf("unknown service: status %d", res.SIDR.Status)
	}
}

// A SIDR request its consumer drops unanswered (rdma_destroy_id, or the
// process gone) is answered "rejected", as the kernel's cm_destroy_id does
// in IB_CM_SIDR_REQ_RCVD, rather than left to the requester's retries.
func TestSIDRRequestDestroyedIsRejected(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	if _, err := p.passive.Listen(ServiceID(PortSpaceUDP, 7174), passiveIP); err != nil {
		t.Fatal(err)
	}
	var out Output
	sp := SIDRParams{Src: netip.AddrPortFrom(activeIP, 4000), Dst: netip.AddrPortFrom(passiveIP, 7174)}
	id, err := p.active.ResolveSIDR(sp, &out)
	if err != nil {
		t.Fatal(err)
	}
	pOut := deliver(t, &out, p.passive, activeIP)
	ev := only(t, pOut, EventSIDRRequest)
	pOut.Reset()
	if err := p.passive.Disconnect(ev.ID, nil, pOut); err != nil {
		t.Fatal(err)
	}
	res := only(t, deliver(t, pOut, p.active, passiveIP), EventSIDRResolved)
	if res.ID != id || res.SIDR.Status != mad.SIDRRejected {
		t.Errorf("resolved %d %+v, want %d status %d", res.ID, res.SIDR, id, mad.SIDRRejected)
	}
	for _, tb := range []*Table{p.active, p.passive} {
		if n, _ := tb.Len(); n != 0 {
			t.Errorf("%d entries left", n)
		}
	}
}

// rdma_cm over IPv6, link-local included: the cma_hdr carries the 16-byte
// addresses, the GIDs are the addresses themselves.
func TestIPv6AndLinkLocalAddressing(t *testing.T) {
	for _, pair := range [][2]string{{"2001:db8::1", "2001:db8::2"}, {"fe80::1", "fe80::2"}} {
		a, b := netip.MustParseAddr(pair[0]), netip.MustParseAddr(pair[1])
		clock := transporttest.NewManualClock()
		act, pas := NewTable(Config{LocalCAGUID: 1}, clock), NewTable(Config{LocalCAGUID: 2}, clock)
		_, _ = pas.Listen(ServiceID(PortSpaceTCP, 1), b)
		var out Output
		cp := rpingConnect()
		cp.Src, cp.Dst = netip.AddrPortFrom(a, 5), netip.AddrPortFrom(b, 1)
		if _, err := act.Connect(cp, &out); err != nil {
			t.Fatal(err)
		}
		_, m, _ := mad.Decode(out.Sends[0].MAD[:])
		req := m.(*mad.REQ)
		if req.PrivateData[1] != 0x60 || AddrFromGID(req.Primary.LocalGID) != a || req.Primary.LocalGID != mad.GID(a.As16()) {
			t.Errorf("%v: cma_hdr %x, GID %v", a, req.PrivateData[:4], req.Primary.LocalGID)
		}
		ev := only(t, deliver(t, &out, pas, a), EventConnectRequest)
		if ev.Request.Src != cp.Src || ev.Request.Dst != cp.Dst {
			t.Errorf("%v: request %v -> %v", a, ev.Request.Src, ev.Request.Dst)
		}
	}
	if _, err := (Route{Src: activeIP, Dst: netip.MustParseAddr("2001:db8::1"), PathMTU: 3}).Path(15); !errors.Is(err, ErrAddr) {
		t.Errorf("mixed families: %v", err)
	}
}

// IBA 9.7.6.1.3 with cm.c cm_ack_timeout: the Local ACK Timeout covers
// twice the packet life time plus the CA's ACK delay.
func TestAckTimeoutCoversLifeTimeAndCAAckDelay(t *testing.T) {
	for _, c := range []struct{ delay, plt, want uint8 }{
		{15, 18, 19}, {15, 16, 17}, {15, 14, 16}, {15, 10, 15}, {0, 0, 2}, {20, 31, 31}, {31, 31, 31},
	} {
		got := AckTimeout(c.delay, c.plt)
		if got != c.want {
			t.Errorf("AckTimeout(%d, %d) = %d, want %d", c.delay, c.plt, got, c.want)
		}
		// 4.096 µs × 2^timeout is at least 2 × life time and the delay.
		if c.plt < 31 && IBATime(got) < max(2*IBATime(c.plt), IBATime(c.delay)) {
			t.Errorf("AckTimeout(%d, %d) = %d is too short", c.delay, c.plt, got)
		}
	}
	if IBATime(20) != 4294967296*time.Nanosecond || kernelMs(20) != 4096*time.Millisecond || kernelMs(3) != time.Millisecond {
		t.Errorf("IBA times: %v %v", IBATime(20), kernelMs(20))
	}
}

// IBA 13.4.7 as the kernel's MAD layer applies it to the CM class: a Get
// (ClassPortInfo) or Set is answered GetResp "unsupported method/attribute"
// with the request's TID; other versions and methods are dropped.
func TestGetOrSetAnsweredUnsupported(t *testing.T) {
	tb := NewTable(Config{}, transporttest.NewManualClock())
	var out Output
	b := make([]byte, mad.Size)
	h := mad.Header{BaseVersion: 1, MgmtClass: mad.ClassCM, ClassVersion: 2, Method: mad.MethodGet,
		TransactionID: 0x1234, AttributeID: mad.AttrClassPortInfo}
	h.Encode(b)
	if err := tb.Receive(activeIP, b, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Sends) != 1 || out.Sends[0].To != activeIP {
		t.Fatalf("%d answers", len(out.Sends))
	}
	var rh mad.Header
	_ = rh.Decode(out.Sends[0].MAD[:])
	if rh.Method != mad.MethodGetResp || rh.Status != mad.StatusUnsupportedMethodAttr || rh.TransactionID != 0x1234 ||
		rh.AttributeID != mad.AttrClassPortInfo {
		t.Errorf("answer %+v", rh)
	}
	out.Reset()
	for _, bad := range []mad.Header{
		{BaseVersion: 2, MgmtClass: mad.ClassCM, ClassVersion: 2, Method: mad.MethodSend, AttributeID: mad.AttrConnectRequest},
		{BaseVersion: 1, MgmtClass: mad.ClassCM, ClassVersion: 1, Method: mad.MethodSend, AttributeID: mad.AttrConnectRequest},
		{BaseVersion: 1, MgmtClass: mad.ClassCM, ClassVersion: 2, Method: mad.MethodGetResp, AttributeID: mad.AttrConnectRequest},
		{BaseVersion: 1, MgmtClass: mad.ClassCM, ClassVersion: 2, Method: mad.MethodSend, AttributeID: mad.AttrLoadAlternatePath},
		{BaseVersion: 1, MgmtClass: mad.ClassSubnAdm, ClassVersion: 2, Method: mad.MethodSend},
	} {
		bad.Encode(b)
		if err := tb.Receive(activeIP, b, &out); err == nil || len(out.Sends) != 0 {
			t.Errorf("%+v: err %v, %d answers", bad, err, len(out.Sends))
		}
	}
	if c := tb.Counters(); c.Unsupported != 1 || c.DecodeErrors != 5 {
		t.Errorf("counters %+v", c)
	}
}

// ib_addr.h iboe_get_mtu: the capture's 1500-byte netdev gives path MTU
// 1024 (code 3), as its REQ shows.
func TestPathMTUForNetdevAsIboeGetMTU(t *testing.T) {
	caps, _ := rpingMADs(t)
	if got := PathMTUForNetdev(1500); got != caps[0].msg.(*mad.REQ).PathMTU {
		t.Errorf("MTU 1500: code %d, the REQ has %d", got, caps[0].msg.(*mad.REQ).PathMTU)
	}
	for mtu, want := range map[int]uint8{9000: 5, 4192: 5, 4191: 4, 2144: 4, 2143: 3, 1120: 3, 1119: 2, 608: 2, 352: 1, 351: 0, 0: 0} {
		if got := PathMTUForNetdev(mtu); got != want {
			t.Errorf("MTU %d: code %d, want %d", mtu, got, want)
		}
	}
}

// rdma_cm reports our events with its own numbers and statuses.
func TestRDMACMEventNumbers(t *testing.T) {
	for _, c := range []struct {
		ev            Event
		event, status int
	}{
		{Event{Kind: EventConnectRequest}, 4, 0},
		{Event{Kind: EventEstablished}, 9, 0},
		{Event{Kind: EventRejected, Reason: mad.RejConsumerDefined}, 8, 28},
		{Event{Kind: EventUnreachable}, 7, -110},
		{Event{Kind: EventDisconnected}, 10, 0},
		{Event{Kind: EventTimewaitExit}, 15, 0},
		{Event{Kind: EventSIDRRequest}, 4, 0},
		{Event{Kind: EventSIDRResolved, SIDR: &SIDRAnswer{Status: mad.SIDRValid}}, 9, 0},
		{Event{Kind: EventSIDRResolved, SIDR: &SIDRAnswer{Status: mad.SIDRServiceNotFound}}, 7, 1},
	} {
		if e, s := c.ev.RDMACMEvent(); e != c.event || s != c.status {
			t.Errorf("%v: event %d status %d, want %d %d", c.ev.Kind, e, s, c.event, c.status)
		}
	}
}
