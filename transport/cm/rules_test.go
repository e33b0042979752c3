package cm

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
)

// deliver hands every MAD of from to table to (which sees them from addr)
// and returns what to answered.
func deliver(t *testing.T, from *Output, to *Table, addr netip.Addr) *Output {
	t.Helper()
	var out Output
	for _, s := range from.Sends {
		if err := to.Receive(addr, s.MAD[:], &out); err != nil {
			t.Fatalf("receive: %v", err)
		}
	}
	if err := checkInvariants(to); err != nil {
		t.Fatal(err)
	}
	return &out
}

// establish runs REQ, REP, RTU between a pair and returns both IDs.
func (p *pair) establish(t *testing.T) (aID, pID uint32) {
	t.Helper()
	var out Output
	aID, err := p.active.Connect(rpingConnect(), &out)
	if err != nil {
		t.Fatal(err)
	}
	pOut := deliver(t, &out, p.passive, activeIP)
	pID = only(t, pOut, EventConnectRequest).ID
	pOut.Reset()
	if err := p.passive.Accept(pID, rpingAccept(), pOut); err != nil {
		t.Fatal(err)
	}
	aOut := deliver(t, pOut, p.active, passiveIP)
	only(t, aOut, EventEstablished)
	pOut = deliver(t, aOut, p.passive, activeIP)
	only(t, pOut, EventEstablished)
	return aID, pID
}

func rejOf(t *testing.T, out *Output) *mad.REJ {
	t.Helper()
	ms := sent(t, out)
	if len(ms) != 1 {
		t.Fatalf("sent %s, want one REJ", attrs(ms))
	}
	r, ok := ms[0].(*mad.REJ)
	if !ok {
		t.Fatalf("sent %s, want REJ", attrs(ms))
	}
	return r
}

// IBA Table 112 reason 8: a REQ whose service ID nobody listens on is
// rejected "invalid service ID", and nothing is kept.
func TestREQForNoListenerRejectedInvalidServiceID(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	var out Output
	cp := rpingConnect()
	cp.Dst = netip.AddrPortFrom(passiveIP, 7175)
	if _, err := p.active.Connect(cp, &out); err != nil {
		t.Fatal(err)
	}
	pOut := deliver(t, &out, p.passive, activeIP)
	r := rejOf(t, pOut)
	if r.Reason != mad.RejInvalidServiceID || r.MessageRejected != mad.MsgREQ || r.RemoteCommID != sent(t, &out)[0].(*mad.REQ).LocalCommID {
		t.Errorf("REJ %+v", r)
	}
	if n, _ := p.passive.Len(); n != 0 || len(pOut.Events) != 0 {
		t.Errorf("passive keeps %d connections, events %v", n, events(pOut))
	}
	aOut := deliver(t, pOut, p.active, passiveIP)
	if ev := only(t, aOut, EventRejected); ev.Reason != mad.RejInvalidServiceID {
		t.Errorf("rejected with %d", ev.Reason)
	}
	if n, _ := p.active.Len(); n != 0 {
		t.Errorf("active keeps %d connections after REJ of its REQ", n)
	}
	// A listener bound to another address does not take the REQ either.
	if _, err := p.passive.Listen(ServiceID(PortSpaceTCP, 7175), netip.MustParseAddr("192.0.2.99")); err != nil {
		t.Fatal(err)
	}
	if r := rejOf(t, deliver(t, &out, p.passive, activeIP)); r.Reason != mad.RejInvalidServiceID {
		t.Errorf("address-bound listener: REJ reason %d", r.Reason)
	}
}

// IBA 12.6.7 / Table 112 reason 28: the consumer's REJ carries its reason
// and private data to the active side, which goes idle.
func TestConsumerREJCarriesReasonARIAndPrivateData(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	var out Output
	if _, err := p.active.Connect(rpingConnect(), &out); err != nil {
		t.Fatal(err)
	}
	pOut := deliver(t, &out, p.passive, activeIP)
	id := only(t, pOut, EventConnectRequest).ID
	pOut.Reset()
	priv := bytes.Repeat([]byte{0x5a}, REJPrivateLen)
	if err := p.passive.Reject(id, mad.RejConsumerDefined, []byte{1, 2, 3}, append(priv, 0), pOut); !errors.Is(err, ErrPrivateData) {
		t.Errorf("149 bytes of REJ private data: %v", err)
	}
	if err := p.passive.Reject(id, mad.RejConsumerDefined, []byte{1, 2, 3}, priv, pOut); err != nil {
		t.Fatal(err)
	}
	ev := only(t, deliver(t, pOut, p.active, passiveIP), EventRejected)
	if ev.Reason != mad.RejConsumerDefined || !bytes.Equal(ev.PrivateData, priv) || !bytes.Equal(ev.ARI, []byte{1, 2, 3}) {
		t.Errorf("event %+v", ev)
	}
	if n, _ := p.passive.Len(); n != 0 {
		t.Error("passive keeps the rejected request")
	}
}

// IBA 12.9.3: an unanswered REQ is resent every response timeout, Max CM
// Retries times, then the connection is unreachable.
func TestREQResentMaxCMRetriesTimesThenUnreachable(t *testing.T) {
	p := newPair(t, Config{MaxCMRetries: 3}, Config{})
	var out Output
	id, err := p.active.Connect(rpingConnect(), &out)
	if err != nil {
		t.Fatal(err)
	}
	first := out.Sends[0].MAD
	// ib_send_cm_req: 2 × packet life time + remote CM response timeout.
	step := 2*kernelMs(18) + kernelMs(20)
	start := p.clock.Now()
	for i := 1; i <= 4; i++ {
		out.Reset()
		wake, ok := p.active.NextWake()
		if !ok || wake != start.Add(time.Duration(i)*step) {
			t.Fatalf("retry %d: wake %v, want %v", i, wake.Sub(start), time.Duration(i)*step)
		}
		p.clock.AdvanceTo(wake)
		p.active.OnTimer(wake, &out)
		if i <= 3 {
			if len(out.Sends) != 1 || out.Sends[0].MAD != first || len(out.Events) != 0 {
				t.Fatalf("retry %d: %d sends, events %v", i, len(out.Sends), events(&out))
			}
		}
	}
	only(t, &out, EventUnreachable)
	if len(out.Sends) != 0 {
		t.Error("sent after the last retry")
	}
	if _, ok := p.active.Conn(id); ok {
		t.Error("connection kept after retries ran out")
	}
	if c := p.active.Counters(); c.Retransmits != 3 || c.Timeouts != 1 {
		t.Errorf("counters %+v", c)
	}
}

// IBA 12.6.6: an MRA for the REQ stops its retransmission for the service
// timeout it names; the REP then establishes.
func TestMRAForREQStopsRetransmission(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	var out Output
	id, _ := p.active.Connect(rpingConnect(), &out)
	pOut := deliver(t, &out, p.passive, activeIP)
	pid := only(t, pOut, EventConnectRequest).ID
	pOut.Reset()
	if err := p.passive.SendMRA(pid, 24, nil, pOut); err != nil {
		t.Fatal(err)
	}
	before := p.clock.Now()
	aOut := deliver(t, pOut, p.active, passiveIP)
	if c, _ := p.active.Conn(id); c.State != StateMRAREQRcvd || len(aOut.Sends)+len(aOut.Events) != 0 {
		t.Fatalf("after MRA: %v, %d sends, events %v", c.State, len(aOut.Sends), events(aOut))
	}
	wake, _ := p.active.NextWake()
	if want := before.Add(kernelMs(24) + kernelMs(19)); wake != want {
		t.Errorf("MRA wait ends %v, want %v", wake.Sub(before), want.Sub(before))
	}
	// A REQ resent anyway (crossing the MRA) is answered with the MRA again.
	if ms := sent(t, deliver(t, &out, p.passive, activeIP)); len(ms) != 1 || ms[0].AttributeID() != mad.AttrMsgRcptAck {
		t.Errorf("duplicate REQ after MRA answered with %s", attrs(ms))
	}
	pOut.Reset()
	if err := p.passive.Accept(pid, rpingAccept(), pOut); err != nil {
		t.Fatal(err)
	}
	aOut = deliver(t, pOut, p.active, passiveIP)
	only(t, aOut, EventEstablished)
	only(t, deliver(t, aOut, p.passive, activeIP), EventEstablished)
}

// IBA 12.9.6.1: a duplicate REQ while the REP is outstanding is answered
// with the REP again; one the consumer has not answered yet gets an MRA
// (cma.c's delayed MRA, service timeout 24), or nothing with NoLazyMRA.
func TestDuplicateREQAnsweredWithREPAgain(t *testing.T) {
	for _, lazy := range []bool{true, false} {
		p := newPair(t, Config{}, Config{NoLazyMRA: !lazy})
		var out Output
		_, _ = p.active.Connect(rpingConnect(), &out)
		pOut := deliver(t, &out, p.passive, activeIP)
		pid := only(t, pOut, EventConnectRequest).ID
		dup := deliver(t, &out, p.passive, activeIP)
		if lazy {
			ms := sent(t, dup)
			if len(ms) != 1 || len(dup.Events) != 0 {
				t.Fatalf("duplicate REQ before Accept: %s, events %v", attrs(ms), events(dup))
			}
			if m, ok := ms[0].(*mad.MRA); !ok || m.MessageMRAed != mad.MsgREQ || m.ServiceTimeout != 24 {
				t.Errorf("answer %+v", ms[0])
			}
			if c, _ := p.passive.Conn(pid); c.State != StateMRAREQSent {
				t.Errorf("state %v", c.State)
			}
		} else if len(dup.Sends)+len(dup.Events) != 0 {
			t.Errorf("duplicate REQ before Accept, no lazy MRA: %d sends, events %v", len(dup.Sends), events(dup))
		}
		pOut.Reset()
		_ = p.passive.Accept(pid, rpingAccept(), pOut)
		dup = deliver(t, &out, p.passive, activeIP)
		if len(dup.Sends) != 1 || dup.Sends[0].MAD != pOut.Sends[0].MAD || len(dup.Events) != 0 {
			t.Errorf("duplicate REQ in REP_SENT: %s, events %v", attrs(sent(t, dup)), events(dup))
		}
		if n, _ := p.passive.Len(); n != 1 || p.passive.Counters().DupREQ != 2 {
			t.Errorf("%d connections, counters %+v", n, p.passive.Counters())
		}
	}
}

// IBA 12.9.8.3.1: a REQ from a QP that still has a connection with us is
// stale: REJ reason 10, and the old connection is disconnected.
func TestREQFromConnectedQPRejectedStaleConnection(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	_, pid := p.establish(t)
	// The peer reboots and connects again from the same QPN, new comm ID.
	other := NewTable(Config{LocalCAGUID: 0xa, NewID: fixedIDs(0x9999)}, p.clock)
	var out Output
	if _, err := other.Connect(rpingConnect(), &out); err != nil {
		t.Fatal(err)
	}
	pOut := deliver(t, &out, p.passive, activeIP)
	ms := sent(t, pOut)
	if len(ms) != 2 || ms[0].(*mad.REJ).Reason != mad.RejStaleConn || ms[1].AttributeID() != mad.AttrDisconnectRequest {
		t.Fatalf("answered %s", attrs(ms))
	}
	if c, _ := p.passive.Conn(pid); c.State != StateDREQSent {
		t.Errorf("old connection %v", c.State)
	}
	if p.passive.Counters().StaleConn != 1 {
		t.Errorf("counters %+v", p.passive.Counters())
	}
}

// IBA 12.9.8.6 and cm.c cm_dup_req_handler: a REQ again for a connection in
// timewait is stale too.
func TestREQForConnectionInTimewaitRejectedStale(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	var out Output
	aid, _ := p.active.Connect(rpingConnect(), &out)
	req := out
	pOut := deliver(t, &out, p.passive, activeIP)
	pid := pOut.Events[0].ID
	pOut.Reset()
	_ = p.passive.Accept(pid, rpingAccept(), pOut)
	aOut := deliver(t, pOut, p.active, passiveIP)
	deliver(t, aOut, p.passive, activeIP)
	aOut.Reset()
	_ = p.active.Disconnect(aid, nil, aOut)
	pOut = deliver(t, aOut, p.passive, activeIP)
	pOut.Reset()
	_ = p.passive.Disconnect(pid, nil, pOut)
	if c, _ := p.passive.Conn(pid); c.State != StateTimewait {
		t.Fatalf("passive %v", c.State)
	}
	if r := rejOf(t, deliver(t, &req, p.passive, activeIP)); r.Reason != mad.RejStaleConn {
		t.Errorf("REQ in timewait: REJ reason %d", r.Reason)
	}
}

// IBA 12.9.6.1, Table 112 reason 26: a REQ whose path MTU is no IB MTU is
// rejected "invalid path MTU"; reason 9 for a transport type REQ cannot
// carry.
func TestREQWithInvalidMTUOrTransportRejected(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	var out Output
	_, _ = p.active.Connect(rpingConnect(), &out)
	for _, tc := range []struct {
		name   string
		mutate func(*mad.REQ)
		reason uint16
	}{
		{"MTU 0", func(r *mad.REQ) { r.PathMTU = 0 }, mad.RejInvalidMTU},
		{"MTU 6", func(r *mad.REQ) { r.PathMTU = 6 }, mad.RejInvalidMTU},
		{"RD", func(r *mad.REQ) { r.TransportServiceType = mad.ServiceRD }, mad.RejInvalidTransportType},
	} {
		h, m, _ := mad.Decode(out.Sends[0].MAD[:])
		req := m.(*mad.REQ)
		tc.mutate(req)
		req.LocalCommID++ // not a duplicate of the one before
		var in Output
		in.Sends = append(in.Sends, Send{})
		_, _ = mad.EncodeCM(in.Sends[0].MAD[:], h, req)
		if r := rejOf(t, deliver(t, &in, p.passive, activeIP)); r.Reason != tc.reason {
			t.Errorf("%s: REJ reason %d, want %d", tc.name, r.Reason, tc.reason)
		}
	}
}

// A REQ storm costs bounded memory: past MaxHalfOpen every REQ is answered
// REJ "no resources" (Table 112 reason 3) and counted; the established
// connection is untouched and still disconnects; the half-open entries go
// when the active side's retries would have run out.
func TestREQStormBoundedByMaxHalfOpen(t *testing.T) {
	p := newPair(t, Config{}, Config{MaxConns: 64, MaxHalfOpen: 8})
	aid, pid := p.establish(t)
	storm := NewTable(Config{LocalCAGUID: 0xe, MaxConns: 2000}, p.clock)
	attacker := netip.MustParseAddr("198.51.100.7")
	var out Output
	for i := range 1000 {
		out.Reset()
		cp := rpingConnect()
		cp.Src = netip.AddrPortFrom(attacker, uint16(i))
		cp.QPN = uint32(i + 100)
		if _, err := storm.Connect(cp, &out); err != nil {
			t.Fatal(err)
		}
		pOut := deliver(t, &out, p.passive, attacker)
		if i < 8 {
			only(t, pOut, EventConnectRequest)
		} else if r := rejOf(t, pOut); r.Reason != mad.RejNoResources {
			t.Fatalf("REQ %d: REJ reason %d", i, r.Reason)
		}
	}
	if n, half := p.passive.Len(); n != 9 || half != 8 || p.passive.Counters().RejectedFull != 992 {
		t.Errorf("%d connections, %d half-open, counters %+v", n, half, p.passive.Counters())
	}
	if c, _ := p.passive.Conn(pid); c.State != StateEstablished {
		t.Fatalf("established connection now %v", c.State)
	}
	out.Reset()
	_ = p.active.Disconnect(aid, nil, &out)
	only(t, deliver(t, &out, p.passive, activeIP), EventDisconnected)
	// Half-open requests nobody answers expire.
	var tOut Output
	for range 20 {
		wake, ok := p.passive.NextWake()
		if !ok {
			break
		}
		p.clock.AdvanceTo(wake)
		p.passive.OnTimer(wake, &tOut)
	}
	if _, half := p.passive.Len(); half != 0 || p.passive.Counters().HalfOpenExpired != 8 {
		t.Errorf("%d half-open left, counters %+v", half, p.passive.Counters())
	}
	// With DropWhenFull the storm gets no answers at all.
	q := NewTable(Config{MaxHalfOpen: 1, DropWhenFull: true}, p.clock)
	_, _ = q.Listen(ServiceID(PortSpaceTCP, 7174), netip.Addr{})
	for i := range 3 {
		out.Reset()
		cp := rpingConnect()
		cp.QPN = uint32(i + 1)
		_, _ = storm.Connect(cp, &out)
		qOut := deliver(t, &out, q, attacker)
		if i > 0 && len(qOut.Sends) != 0 {
			t.Errorf("REQ %d answered past the limit with DropWhenFull", i)
		}
	}
}

// The consumer API refuses what the state does not allow.
func TestConsumerCallsCheckState(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	aid, pid := p.establish(t)
	var out Output
	if err := p.passive.Accept(pid, rpingAccept(), &out); !errors.Is(err, ErrState) {
		t.Errorf("Accept established: %v", err)
	}
	if err := p.active.Accept(aid, rpingAccept(), &out); !errors.Is(err, ErrState) {
		t.Errorf("Accept on the active side: %v", err)
	}
	if err := p.passive.Reject(pid, 28, nil, nil, &out); !errors.Is(err, ErrState) {
		t.Errorf("Reject established: %v", err)
	}
	if err := p.passive.Accept(12345, rpingAccept(), &out); !errors.Is(err, ErrNoConn) {
		t.Errorf("Accept unknown: %v", err)
	}
	if _, err := p.passive.Listen(ServiceID(PortSpaceTCP, 7174), passiveIP); !errors.Is(err, ErrListening) {
		t.Errorf("second listener on a wildcard one: %v", err)
	}
	if len(out.Sends) != 0 {
		t.Error("refused calls sent MADs")
	}
}

// IBA 12.9.3 with cm.c cm_mra_handler: when the time an MRA asked for runs
// out with no REP, the REQ goes again (a retry, counted against Max CM
// Retries), and the active side waits a response timeout once more.
func TestMRAWaitOverResendsREQ(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	var out Output
	id, _ := p.active.Connect(rpingConnect(), &out)
	first := out.Sends[0].MAD
	var in Output
	in.Sends = append(in.Sends, Send{})
	_, _ = mad.EncodeCM(in.Sends[0].MAD[:], mad.CMHeader(1, 0), &mad.MRA{LocalCommID: 0x55, RemoteCommID: id,
		MessageMRAed: mad.MsgREQ, ServiceTimeout: 10})
	deliver(t, &in, p.active, passiveIP)
	wake, _ := p.active.NextWake()
	p.clock.AdvanceTo(wake)
	out.Reset()
	p.active.OnTimer(wake, &out)
	if len(out.Sends) != 1 || out.Sends[0].MAD != first || len(out.Events) != 0 {
		t.Fatalf("after the MRA wait: %s, events %v", attrs(sent(t, &out)), events(&out))
	}
	c, _ := p.active.Conn(id)
	if next, _ := p.active.NextWake(); c.State != StateREQSent || next != wake.Add(c.responseTimeout) {
		t.Errorf("state %v, next wake in %v", c.State, next.Sub(wake))
	}
	// A REP from the peer that sent the MRA is taken: its ID was learnt.
	var rep Output
	rep.Sends = append(rep.Sends, Send{})
	_, _ = mad.EncodeCM(rep.Sends[0].MAD[:], mad.CMHeader(1, 0), &mad.REP{LocalCommID: 0x66, RemoteCommID: id, LocalQPN: 5})
	if got := events(deliver(t, &rep, p.active, passiveIP)); len(got) != 0 {
		t.Errorf("REP from another comm ID than the MRA's: %v", got)
	}
	_, _ = mad.EncodeCM(rep.Sends[0].MAD[:], mad.CMHeader(1, 0), &mad.REP{LocalCommID: 0x55, RemoteCommID: id, LocalQPN: 5})
	only(t, deliver(t, &rep, p.active, passiveIP), EventEstablished)
}

// cm.c cm_init_qp_init_attr: a connected QP takes remote writes; reads and
// atomics only when it offers responder resources. The REP's resources are
// bounded by the REQ's offer (IBA 12.6.8: responder resources at most the
// REQ's initiator depth).
func TestQPAccessFollowsResponderResources(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	var out Output
	cp := rpingConnect()
	cp.InitDepth = 2
	_, _ = p.active.Connect(cp, &out)
	pOut := deliver(t, &out, p.passive, activeIP)
	id := pOut.Events[0].ID
	pOut.Reset()
	ap := rpingAccept()
	ap.RespRes, ap.InitDepth = 0, 4
	if err := p.passive.Accept(id, ap, pOut); err != nil {
		t.Fatal(err)
	}
	if a := pOut.Modify[0].Attr; pOut.Modify[0].State != QPStateInit || a.AccessFlags != AccessRemoteWrite ||
		a.MaxDestRdAtomic != 0 || a.MaxRdAtomic != 1 {
		t.Errorf("passive modify %+v", pOut.Modify[0])
	}
	rep := sent(t, pOut)[0].(*mad.REP)
	if rep.ResponderResources != 0 || rep.InitiatorDepth != 1 {
		t.Errorf("REP resources %d depth %d", rep.ResponderResources, rep.InitiatorDepth)
	}
	aOut := deliver(t, pOut, p.active, passiveIP)
	if a := aOut.Modify[0].Attr; a.AccessFlags != AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic ||
		a.MaxRdAtomic != 0 || a.MaxDestRdAtomic != 1 {
		t.Errorf("active modify %+v", aOut.Modify[0])
	}
}

// An active side that gives up while its REQ is unanswered sends REJ
// "Timeout" with no comm ID of ours (it never got one) and its CA GUID in
// the ARI (IBA 12.6.7); the passive side finds the request by the sender's
// comm ID and GUID, as the kernel's cm_acquire_rejected_id, and drops it
// with a REJECTED event instead of answering it for the REP's retries.
func TestActiveGivingUpBeforeREPRejectsThePassiveRequest(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	var out Output
	aid, err := p.active.Connect(rpingConnect(), &out)
	if err != nil {
		t.Fatal(err)
	}
	pOut := deliver(t, &out, p.passive, activeIP)
	only(t, pOut, EventConnectRequest)
	out.Reset()
	if err := p.active.Disconnect(aid, nil, &out); err != nil {
		t.Fatal(err)
	}
	ev := only(t, deliver(t, &out, p.passive, activeIP), EventRejected)
	if ev.Reason != mad.RejTimeout {
		t.Errorf("passive event %+v, want REJECTED reason Timeout", ev)
	}
	if n, _ := p.passive.Len(); n != 0 {
		t.Error("passive keeps the request its active side gave up")
	}
}
