package cm

import (
	"net/netip"
	"time"

	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
)

// SIDRParams is what rdma_connect knows for a UD ID (RDMA_PS_UDP): the
// route and the private data (cma.c cma_resolve_ib_udp).
type SIDRParams struct {
	Src, Dst    netip.AddrPort
	ServiceID   uint64 // 0: ServiceID(PortSpaceUDP, Dst.Port())
	PrivateData []byte // at most SIDRREQUserPrivateLen, after the cma_hdr
}

// ResolveSIDR sends a SIDR_REQ (IBA 12.11.1) and returns its request ID; the
// answer comes as EventSIDRResolved, or EventUnreachable after the retries.
func (t *Table) ResolveSIDR(p SIDRParams, out *Output) (uint32, error) {
	if p.ServiceID == 0 {
		p.ServiceID = ServiceID(PortSpaceUDP, p.Dst.Port())
	}
	req := &mad.SIDRREQ{PKey: 0xFFFF, ServiceID: p.ServiceID}
	var err error
	if mad.IsIPServiceID(p.ServiceID) {
		err = cmaPrivate(req.PrivateData[:], p.Src, p.Dst, p.PrivateData)
	} else {
		err = putPrivate(req.PrivateData[:], p.PrivateData)
	}
	if err != nil {
		return 0, err
	}
	c, err := t.newConn()
	if err != nil {
		return 0, err
	}
	req.RequestID = c.ID
	timeout := t.cfg.SIDRTimeout
	if timeout <= 0 {
		timeout = kernelMs(t.cfg.CMResponseTimeout) // cma.c: 1 << (CMA_CM_RESPONSE_TIMEOUT - 8) ms
	}
	*c = Conn{ID: c.ID, Active: true, Peer: p.Dst.Addr().Unmap(), ServiceID: p.ServiceID,
		TID: t.formTID(c.ID), responseTimeout: timeout, maxRetries: t.cfg.MaxCMRetries}
	t.sendConn(out, c, c.TID, req, true)
	t.setState(c, StateSIDRREQSent)
	t.awaitAnswer(c, t.clock.Now())
	return c.ID, nil
}

// onSIDRREP ends a resolution (IBA 12.11.2).
func (t *Table) onSIDRREP(m *mad.SIDRREP, from netip.Addr, out *Output) {
	c, ok := t.conns[m.RequestID]
	if !ok || c.State != StateSIDRREQSent || c.Peer != from {
		t.counters.Dropped++
		return
	}
	t.free(c)
	out.Events = append(out.Events, Event{Kind: EventSIDRResolved, ID: c.ID, PrivateData: clonePriv(m.PrivateData[:]),
		SIDR: &SIDRAnswer{Status: m.Status, QPN: m.QPN, QKey: m.QKey}})
}

// onSIDRREQ is the passive side of SIDR (cm.c cm_sidr_req_handler): a
// duplicate of a pending request is dropped, an unknown service answered
// "service ID not supported", a full table "rejected".
func (t *Table) onSIDRREQ(m *mad.SIDRREQ, from netip.Addr, tid uint64, now time.Time, out *Output) {
	if _, dup := t.bySIDR[sidrKey{m.RequestID, from}]; dup {
		t.counters.DupREQ++
		return
	}
	answer := func(status uint8) {
		t.send(out, from, tid, &mad.SIDRREP{RequestID: m.RequestID, Status: status, ServiceID: m.ServiceID})
	}
	if len(t.conns) >= t.cfg.MaxConns || t.halfOpen >= t.cfg.MaxHalfOpen {
		t.counters.RejectedFull++
		if !t.cfg.DropWhenFull {
			answer(mad.SIDRRejected)
		}
		return
	}
	var src, dst netip.AddrPort
	if mad.IsIPServiceID(m.ServiceID) {
		var err error
		if src, dst, err = parseCMA(m.PrivateData[:], m.ServiceID); err != nil {
			answer(mad.SIDRRejected)
			return
		}
	}
	lis := t.match(m.ServiceID, dst.Addr())
	if lis == 0 {
		t.counters.InvalidService++
		answer(mad.SIDRServiceNotFound)
		return
	}
	c, err := t.newConn()
	if err != nil {
		t.counters.RejectedFull++
		answer(mad.SIDRRejected)
		return
	}
	*c = Conn{ID: c.ID, Peer: from, ServiceID: m.ServiceID, Listener: lis, TID: tid, RemoteID: m.RequestID}
	t.setState(c, StateSIDRREQRcvd)
	t.bySIDR[sidrKey{m.RequestID, from}] = c.ID
	t.arm(c, now.Add(kernelMs(t.cfg.CMResponseTimeout)*time.Duration(int(t.cfg.MaxCMRetries)+1)))
	priv := m.PrivateData[:]
	if mad.IsIPServiceID(m.ServiceID) {
		priv = priv[CMAHeaderLen:]
	}
	out.Events = append(out.Events, Event{Kind: EventSIDRRequest, ID: c.ID, PrivateData: clonePriv(priv),
		Request: &Request{ServiceID: m.ServiceID, Listener: lis, Peer: from, Src: src, Dst: dst}})
}

// AnswerSIDR answers SIDR request id with a SIDR_REP (IBA 12.11.2): status,
// and for mad.SIDRValid the UD QP and its Q_Key (UDPQKey for rdma_cm).
func (t *Table) AnswerSIDR(id uint32, a SIDRAnswer, priv []byte, out *Output) error {
	c, ok := t.conns[id]
	if !ok {
		return ErrNoConn
	}
	if c.State != StateSIDRREQRcvd {
		return ErrState
	}
	rep := &mad.SIDRREP{RequestID: c.RemoteID, Status: a.Status, QPN: a.QPN & 0xFFFFFF, ServiceID: c.ServiceID, QKey: a.QKey}
	if err := putPrivate(rep.PrivateData[:], priv); err != nil {
		return err
	}
	t.sendConn(out, c, c.TID, rep, false)
	t.free(c)
	return nil
}
