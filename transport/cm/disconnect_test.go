package cm

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/vrnic/vrnicd/transport/transporttest"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
)

// IBA 12.9.6.4: DREQ is resent until the DREP; both sides then hold the IDs
// in timewait for the QP's ACK timeout, and a DREQ again in timewait is
// answered with the DREP again.
func TestDREQResentUntilDREPThenTimewait(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	aid, pid := p.establish(t)
	var out Output
	_ = p.active.Disconnect(aid, nil, &out)
	dreq := out
	wake, _ := p.active.NextWake()
	p.clock.AdvanceTo(wake)
	out = Output{}
	p.active.OnTimer(wake, &out)
	if len(out.Sends) != 1 || out.Sends[0].MAD != dreq.Sends[0].MAD {
		t.Fatalf("DREQ not resent: %s", attrs(sent(t, &out)))
	}
	pOut := deliver(t, &out, p.passive, activeIP)
	only(t, pOut, EventDisconnected)
	if dup := deliver(t, &dreq, p.passive, activeIP); len(dup.Sends)+len(dup.Events) != 0 {
		t.Error("duplicate DREQ in DREQ_RCVD answered before the consumer")
	}
	pOut.Reset()
	_ = p.passive.Disconnect(pid, nil, pOut)
	only(t, deliver(t, pOut, p.active, passiveIP), EventDisconnected)
	dup := deliver(t, &dreq, p.passive, activeIP)
	if ms := sent(t, dup); len(ms) != 1 || ms[0].AttributeID() != mad.AttrDisconnectReply {
		t.Errorf("DREQ in timewait answered %s", attrs(ms))
	}
	for _, tb := range []*Table{p.active, p.passive} {
		for _, id := range []uint32{aid, pid} {
			if c, ok := tb.Conn(id); ok && c.State != StateTimewait {
				t.Errorf("%#x in %v", id, c.State)
			}
		}
	}
}

// cm.c cm_process_send_error: a DREQ never answered ends in timewait after
// the retries, and the consumer hears it is disconnected.
func TestDREQUnansweredEntersTimewait(t *testing.T) {
	p := newPair(t, Config{MaxCMRetries: 2}, Config{})
	aid, _ := p.establish(t)
	var out Output
	_ = p.active.Disconnect(aid, nil, &out)
	var got []EventKind
	for range 10 {
		wake, ok := p.active.NextWake()
		if !ok {
			break
		}
		p.clock.AdvanceTo(wake)
		out.Reset()
		p.active.OnTimer(wake, &out)
		got = append(got, events(&out)...)
	}
	if len(got) != 2 || got[0] != EventDisconnected || got[1] != EventTimewaitExit {
		t.Errorf("events %v", got)
	}
}

// cm.c cm_issue_drep: a DREQ for a connection we do not have is answered
// with a DREP, so the peer stops resending it.
func TestDREQForUnknownConnectionAnsweredWithDREP(t *testing.T) {
	tb := NewTable(Config{}, transporttest.NewManualClock())
	var in, out Output
	in.Sends = append(in.Sends, Send{})
	_, _ = mad.EncodeCM(in.Sends[0].MAD[:], mad.CMHeader(77, 0), &mad.DREQ{LocalCommID: 5, RemoteCommID: 6, RemoteQPN: 9})
	if err := tb.Receive(activeIP, in.Sends[0].MAD[:], &out); err != nil {
		t.Fatal(err)
	}
	ms := sent(t, &out)
	if len(ms) != 1 {
		t.Fatalf("sent %s", attrs(ms))
	}
	if d, ok := ms[0].(*mad.DREP); !ok || d.LocalCommID != 6 || d.RemoteCommID != 5 {
		t.Errorf("answer %+v", ms[0])
	}
	if h, _, _ := mad.Decode(out.Sends[0].MAD[:]); h.TransactionID != 77 {
		t.Errorf("DREP TID %d, want the DREQ's", h.TransactionID)
	}
}

// IBA 12.9.6.3: a DREQ that overtakes a lost RTU implies it: the passive
// side is established, then disconnected.
func TestDREQInREPSentImpliesRTU(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	var out Output
	aid, _ := p.active.Connect(rpingConnect(), &out)
	pOut := deliver(t, &out, p.passive, activeIP)
	pid := pOut.Events[0].ID
	pOut.Reset()
	_ = p.passive.Accept(pid, rpingAccept(), pOut)
	deliver(t, pOut, p.active, passiveIP) // its RTU is lost
	out.Reset()
	_ = p.active.Disconnect(aid, nil, &out)
	if got := events(deliver(t, &out, p.passive, activeIP)); len(got) != 2 || got[0] != EventEstablished || got[1] != EventDisconnected {
		t.Errorf("events %v", got)
	}
}

// cm.c cm_rej_handler after IBA 12.6.7: a REJ of an established
// connection, or a "stale connection" REJ of our REQ, leaves the IDs in
// timewait; the consumer hears the reason either way.
func TestREJOfEstablishedOrStaleEntersTimewait(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	aid, pid := p.establish(t)
	var in Output
	in.Sends = append(in.Sends, Send{})
	_, _ = mad.EncodeCM(in.Sends[0].MAD[:], mad.CMHeader(1, 0), &mad.REJ{LocalCommID: pid, RemoteCommID: aid,
		MessageRejected: mad.MsgOther, Reason: mad.RejConsumerDefined})
	aOut := deliver(t, &in, p.active, passiveIP)
	if ev := only(t, aOut, EventRejected); ev.Reason != mad.RejConsumerDefined {
		t.Errorf("reason %d", ev.Reason)
	}
	if len(aOut.Modify) != 1 || aOut.Modify[0].State != QPStateErr {
		t.Errorf("modify %+v", aOut.Modify)
	}
	if c2, _ := p.active.Conn(aid); c2.State != StateTimewait {
		t.Errorf("after REJ: %v", c2.State)
	}

	var out Output
	cp := rpingConnect()
	cp.QPN++ // the first QP is in timewait
	id, err := p.active.Connect(cp, &out)
	if err != nil {
		t.Fatal(err)
	}
	in.Sends[0] = Send{}
	_, _ = mad.EncodeCM(in.Sends[0].MAD[:], mad.CMHeader(1, 0), &mad.REJ{RemoteCommID: id,
		MessageRejected: mad.MsgREQ, Reason: mad.RejStaleConn})
	only(t, deliver(t, &in, p.active, passiveIP), EventRejected)
	if c2, _ := p.active.Conn(id); c2.State != StateTimewait {
		t.Errorf("after stale REJ of the REQ: %v", c2.State)
	}
}

// cm.c cm_dreq_handler: a DREQ that names another QP than ours is not for
// this connection.
func TestDREQForAnotherQPIgnored(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	aid, pid := p.establish(t)
	var in Output
	in.Sends = append(in.Sends, Send{})
	_, _ = mad.EncodeCM(in.Sends[0].MAD[:], mad.CMHeader(1, 0), &mad.DREQ{LocalCommID: aid, RemoteCommID: pid, RemoteQPN: 0x777})
	if out := deliver(t, &in, p.passive, activeIP); len(out.Events)+len(out.Sends) != 0 {
		t.Errorf("DREQ for QPN 0x777: %v", events(out))
	}
	if c, _ := p.passive.Conn(pid); c.State != StateEstablished {
		t.Errorf("state %v", c.State)
	}
}

// IBA 12.9.8.6: a QP is not given to a new connection until the old one's
// timewait is over (EventTimewaitExit, RDMA_CM_EVENT_TIMEWAIT_EXIT).
func TestQPNotReusedBeforeTimewaitExit(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	aid, _ := p.establish(t)
	var out Output
	if _, err := p.active.Connect(rpingConnect(), &out); !errors.Is(err, ErrQPInUse) {
		t.Errorf("Connect on an established QP: %v", err)
	}
	_ = p.active.Disconnect(aid, nil, &out)
	pOut := deliver(t, &out, p.passive, activeIP)
	pid := pOut.Events[0].ID
	pOut.Reset()
	_ = p.passive.Disconnect(pid, nil, pOut)
	deliver(t, pOut, p.active, passiveIP)
	out.Reset()
	if _, err := p.active.Connect(rpingConnect(), &out); !errors.Is(err, ErrQPInUse) {
		t.Errorf("Connect on a QP in timewait: %v", err)
	}
	// The passive side cannot accept on its QP in timewait either.
	other := NewTable(Config{LocalCAGUID: 0xc}, p.clock)
	cp := rpingConnect()
	cp.Src = netip.AddrPortFrom(netip.MustParseAddr("192.0.2.13"), 1)
	_, _ = other.Connect(cp, &out)
	req := deliver(t, &out, p.passive, cp.Src.Addr())
	if err := p.passive.Accept(req.Events[0].ID, rpingAccept(), req); !errors.Is(err, ErrQPInUse) {
		t.Errorf("Accept on a QP in timewait: %v", err)
	}
	wake, _ := p.active.NextWake()
	p.clock.AdvanceTo(wake)
	out.Reset()
	p.active.OnTimer(wake, &out)
	only(t, &out, EventTimewaitExit)
	out.Reset()
	if _, err := p.active.Connect(rpingConnect(), &out); err != nil {
		t.Errorf("Connect after timewait exit: %v", err)
	}
}
