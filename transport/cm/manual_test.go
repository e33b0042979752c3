package cm

import (
	"errors"
	"testing"

	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
)

// rdma_cm with no QP on the id (librdmacm's rdma_connect and rdma_accept
// with conn_param->qp_num, then rdma_init_qp_attr and rdma_establish): the
// CM moves no QP on either side; the active side's REP is CONNECT_RESPONSE
// (cma.c cma_ib_handler, IB_CM_REP_RECEIVED without a QP) and its RTU
// waits for Establish; a REP again meanwhile is dropped (cm.c
// cm_dup_rep_handler in REP_RCVD); the passive side is established by the
// RTU as always.
func TestManualConnectionMovesNoQP(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	var out Output
	cp := rpingConnect()
	cp.Manual = true
	aid, err := p.active.Connect(cp, &out)
	if err != nil {
		t.Fatal(err)
	}
	pOut := deliver(t, &out, p.passive, activeIP)
	pid := only(t, pOut, EventConnectRequest).ID
	pOut.Reset()
	ap := rpingAccept()
	ap.Manual = true
	if err := p.passive.Accept(pid, ap, pOut); err != nil {
		t.Fatal(err)
	}
	if len(pOut.Modify) != 0 {
		t.Errorf("manual accept moved the QP: %+v", pOut.Modify)
	}
	aOut := deliver(t, pOut, p.active, passiveIP)
	ev := only(t, aOut, EventConnectResponse)
	if len(aOut.Modify) != 0 || len(aOut.Sends) != 0 {
		t.Fatalf("REP of a manual connection: modify %+v, sent %s; want neither before Establish", aOut.Modify, attrs(sent(t, aOut)))
	}
	if typ, _ := ev.RDMACMEvent(); typ != RDMACMEventConnectResponse {
		t.Errorf("rdma_cm event %d, want CONNECT_RESPONSE", typ)
	}
	c, _ := p.active.Conn(aid)
	if c.State != StateREPRcvd || c.RemoteQPN != ap.QPN || c.RemotePSN != ap.PSN || c.PSN != cp.PSN {
		t.Errorf("after the REP: %v, remote QPN %#x PSN %#x, our PSN %#x", c.State, c.RemoteQPN, c.RemotePSN, c.PSN)
	}
	if again := deliver(t, pOut, p.active, passiveIP); len(again.Sends)+len(again.Events) != 0 {
		t.Errorf("a REP again before Establish: sent %s, events %v", attrs(sent(t, again)), events(again))
	}
	if err := p.passive.Establish(pid, &Output{}); !errors.Is(err, ErrState) {
		t.Errorf("Establish of the passive side: %v, want ErrState", err)
	}
	aOut.Reset()
	if err := p.active.Establish(aid, aOut); err != nil {
		t.Fatal(err)
	}
	if ms := sent(t, aOut); len(ms) != 1 || len(aOut.Modify) != 0 || len(aOut.Events) != 0 {
		t.Fatalf("Establish: sent %s, modify %+v, events %v; want the RTU alone", attrs(ms), aOut.Modify, events(aOut))
	} else if _, ok := ms[0].(*mad.RTU); !ok {
		t.Fatalf("Establish sent %s", attrs(ms))
	}
	if err := p.active.Establish(aid, &Output{}); !errors.Is(err, ErrState) {
		t.Errorf("Establish again: %v, want ErrState", err)
	}
	only(t, deliver(t, aOut, p.passive, activeIP), EventEstablished)
	// Disconnect: a DREQ, and no QP moved to error on either side.
	aOut.Reset()
	if err := p.active.Disconnect(aid, nil, aOut); err != nil || len(aOut.Modify) != 0 {
		t.Fatalf("disconnect: %v, modify %+v", err, aOut.Modify)
	}
	if pOut = deliver(t, aOut, p.passive, activeIP); len(pOut.Modify) != 0 {
		t.Errorf("DREQ moved the manual passive QP: %+v", pOut.Modify)
	}
}

// A manual consumer that destroys its id before Establish rejects the REP
// (cm.c ib_send_cm_rej in REP_RCVD): the passive side is rejected.
func TestManualREPNotEstablishedRejected(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	var out Output
	cp := rpingConnect()
	cp.Manual = true
	aid, err := p.active.Connect(cp, &out)
	if err != nil {
		t.Fatal(err)
	}
	pOut := deliver(t, &out, p.passive, activeIP)
	pid := only(t, pOut, EventConnectRequest).ID
	pOut.Reset()
	if err := p.passive.Accept(pid, rpingAccept(), pOut); err != nil {
		t.Fatal(err)
	}
	aOut := deliver(t, pOut, p.active, passiveIP)
	only(t, aOut, EventConnectResponse)
	aOut.Reset()
	if err := p.active.Disconnect(aid, nil, aOut); err != nil {
		t.Fatal(err)
	}
	if r := rejOf(t, aOut); r.MessageRejected != mad.MsgREP || r.Reason != mad.RejConsumerDefined {
		t.Errorf("REJ %+v", r)
	}
	if n, _ := p.active.Len(); n != 0 {
		t.Errorf("active keeps %d connections", n)
	}
	if ev := only(t, deliver(t, aOut, p.passive, activeIP), EventRejected); ev.Reason != mad.RejConsumerDefined {
		t.Errorf("passive: rejected with %d", ev.Reason)
	}
}
