package cm

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
)

// onREQ is the passive side's REQ (IBA 12.9.6.1; cm.c cm_req_handler),
// checked in the kernel's order: a duplicate of a REQ we hold, room in the
// table, a QP still connected (stale), a listener, what the REQ asks.
func (t *Table) onREQ(m *mad.REQ, from netip.Addr, tid uint64, now time.Time, out *Output) {
	if id, ok := t.byRemote[remoteKey{m.LocalCommID, m.LocalCAGUID}]; ok {
		t.dupREQ(t.conns[id], from, tid, out)
		return
	}
	rej := func(reason uint16, ari []byte) {
		r := &mad.REJ{RemoteCommID: m.LocalCommID, MessageRejected: mad.MsgREQ, Reason: reason,
			RejectedInfoLength: uint8(len(ari))}
		copy(r.ARI[:], ari)
		t.send(out, from, tid, r)
	}
	if len(t.conns) >= t.cfg.MaxConns || t.halfOpen >= t.cfg.MaxHalfOpen {
		t.counters.RejectedFull++
		if !t.cfg.DropWhenFull {
			rej(mad.RejNoResources, nil)
		}
		return
	}
	if id, ok := t.byQPN[qpnKey{m.LocalQPN, GIDFromAddr(from)}]; ok {
		t.counters.StaleConn++
		rej(mad.RejStaleConn, nil)
		if old := t.conns[id]; old.State == StateEstablished {
			t.sendDREQ(old, nil, now, out)
		}
		return
	}
	var src, dst netip.AddrPort
	if mad.IsIPServiceID(m.ServiceID) {
		var err error
		if src, dst, err = parseCMA(m.PrivateData[:], m.ServiceID); err != nil {
			rej(mad.RejConsumerDefined, nil)
			return
		}
	}
	lis := t.match(m.ServiceID, dst.Addr())
	switch {
	case lis == 0:
		t.counters.InvalidService++
		rej(mad.RejInvalidServiceID, nil)
		return
	case m.TransportServiceType != mad.ServiceRC && m.TransportServiceType != mad.ServiceUC:
		rej(mad.RejInvalidTransportType, nil)
		return
	case !ValidMTU(m.PathMTU):
		rej(mad.RejInvalidMTU, nil)
		return
	}
	c, err := t.newConn()
	if err != nil {
		t.counters.RejectedFull++
		rej(mad.RejNoResources, nil)
		return
	}
	t.acceptREQ(c, m, from, tid, lis)
	t.arm(c, now.Add(halfOpenAge(m)))
	priv := m.PrivateData[:]
	if mad.IsIPServiceID(m.ServiceID) {
		priv = priv[CMAHeaderLen:]
	}
	out.Events = append(out.Events, Event{Kind: EventConnectRequest, ID: c.ID, PrivateData: clonePriv(priv),
		Request: &Request{
			ServiceID: m.ServiceID, Listener: lis, Peer: from, Src: src, Dst: dst,
			RemoteQPN: m.LocalQPN, RemotePSN: m.StartingPSN, QPType: m.TransportServiceType,
			RespRes: m.ResponderResources, InitDepth: m.InitiatorDepth, RetryCount: m.RetryCount,
			RNRRetry: m.RNRRetryCount, PathMTU: m.PathMTU, SRQ: m.SRQ, Path: c.Path,
		}})
}

// acceptREQ files a new passive connection for REQ m in REQ_RCVD.
func (t *Table) acceptREQ(c *Conn, m *mad.REQ, from netip.Addr, tid uint64, lis uint64) {
	*c = Conn{
		ID: c.ID, Peer: from, ServiceID: m.ServiceID, Listener: lis, TID: tid,
		RemoteID: m.LocalCommID, RemoteGUID: m.LocalCAGUID, QPType: m.TransportServiceType,
		RemoteQPN: m.LocalQPN, RemotePSN: m.StartingPSN, Path: reversePath(m.Primary), PathMTU: m.PathMTU,
		// Our reads and atomics are bounded by what the REQ offers
		// (cm.c cm_req_handler swaps them): Accept may only lower them.
		RespRes: m.InitiatorDepth, InitDepth: m.ResponderResources,
		RetryCount: m.RetryCount, RNRRetry: m.RNRRetryCount, Timeout: m.Primary.LocalACKTimeout,
		responseTimeout: kernelMs(m.LocalCMResponseTimeout), maxRetries: m.MaxCMRetries,
	}
	if c.Timeout == 0 {
		c.Timeout = ackTimeout(t.cfg.CAAckDelay, t.cfg.PacketLifeTime)
	}
	t.setState(c, StateREQRcvd)
	t.indexRemote(c)
}

// halfOpenAge is how long the active side of m keeps retrying: after that a
// REQ the consumer never answered can only be forgotten.
func halfOpenAge(m *mad.REQ) time.Duration {
	life := max(int(m.Primary.LocalACKTimeout)-1, 0)
	per := 2*kernelMs(uint8(life)) + kernelMs(m.RemoteCMResponseTimeout)
	return per * time.Duration(int(m.MaxCMRetries)+1)
}

// dupREQ answers a REQ we already hold (cm.c cm_dup_req_handler, IBA
// 12.9.6.1): the MRA or REP we sent goes again (the first repeat of a REQ
// not yet answered gets an MRA), and a REQ for a connection in timewait is
// stale.
func (t *Table) dupREQ(c *Conn, from netip.Addr, tid uint64, out *Output) {
	t.counters.DupREQ++
	if c.Peer != from {
		t.counters.Dropped++
		return
	}
	switch c.State {
	case StateREQRcvd:
		// The consumer is slow: tell the peer to wait (cma.c's delayed MRA,
		// sent only when the REQ comes again).
		if !c.Active && !t.cfg.NoLazyMRA {
			_ = t.SendMRA(c.ID, t.cfg.MRAServiceTimeout, nil, out)
		}
	case StateMRAREQSent, StateREPSent, StateMRAREPRcvd:
		t.resend(out, c)
	case StateTimewait:
		t.counters.StaleConn++
		t.send(out, from, tid, &mad.REJ{LocalCommID: c.ID, RemoteCommID: c.RemoteID,
			MessageRejected: mad.MsgREQ, Reason: mad.RejStaleConn})
	}
}

// AcceptParams is the consumer's answer to a connect request: its QP and
// what rdma_accept's conn_param holds.
type AcceptParams struct {
	QPN         uint32
	PSN         uint32 // our starting PSN, 24 bits
	QKey        uint32 // UC/RC: 0
	RespRes     uint8  // at most the REQ's initiator depth
	InitDepth   uint8  // at most the REQ's responder resources
	RNRRetry    uint8  // how often the peer retries our RNR NAKs, 0-7
	SRQ         bool
	PrivateData []byte // at most REPPrivateLen
	Manual      bool   // the consumer has moved its QP to RTS itself: no QPModify
}

// Accept answers connect request id with a REP (IBA 12.9.6.1): the QP goes
// to RTR and RTS first, as rdma_cm's cma_accept_ib does, then the REP waits
// for the RTU, resent until it comes.
func (t *Table) Accept(id uint32, p AcceptParams, out *Output) error {
	c, ok := t.conns[id]
	if !ok {
		return ErrNoConn
	}
	if c.Active || (c.State != StateREQRcvd && c.State != StateMRAREQSent) {
		return ErrState
	}
	rep := &mad.REP{LocalCommID: c.ID, RemoteCommID: c.RemoteID, LocalQKey: p.QKey, LocalQPN: p.QPN & 0xFFFFFF,
		StartingPSN: p.PSN & 0xFFFFFF, TargetACKDelay: t.cfg.CAAckDelay, RNRRetryCount: min(p.RNRRetry, 7),
		SRQ: p.SRQ, LocalCAGUID: t.cfg.LocalCAGUID}
	if err := putPrivate(rep.PrivateData[:], p.PrivateData); err != nil {
		return err
	}
	if t.qpInUse(rep.LocalQPN, c.ID) {
		return fmt.Errorf("%w: QPN %#x", ErrQPInUse, rep.LocalQPN)
	}
	c.QPN, c.PSN, c.SRQ, c.Manual = rep.LocalQPN, rep.StartingPSN, p.SRQ, p.Manual
	c.RespRes, c.InitDepth = min(c.RespRes, p.RespRes), min(c.InitDepth, p.InitDepth)
	rep.ResponderResources, rep.InitiatorDepth = c.RespRes, c.InitDepth
	c.qpTransitions(out)
	t.sendConn(out, c, c.TID, rep, true)
	t.setState(c, StateREPSent)
	t.awaitAnswer(c, t.clock.Now())
	return nil
}

// Reject refuses connect request id with a REJ of the given reason (28,
// mad.RejConsumerDefined, is rdma_reject's), ARI and private data, and
// forgets it.
func (t *Table) Reject(id uint32, reason uint16, ari, priv []byte, out *Output) error {
	c, ok := t.conns[id]
	if !ok {
		return ErrNoConn
	}
	if c.Active || (c.State != StateREQRcvd && c.State != StateMRAREQSent) {
		return ErrState
	}
	rej := &mad.REJ{LocalCommID: c.ID, RemoteCommID: c.RemoteID, MessageRejected: mad.MsgREQ, Reason: reason}
	if err := putPrivate(rej.PrivateData[:], priv); err != nil {
		return err
	}
	if err := putPrivate(rej.ARI[:], ari); err != nil {
		return err
	}
	rej.RejectedInfoLength = uint8(len(ari))
	t.sendConn(out, c, c.TID, rej, false)
	t.free(c)
	return nil
}

// SendMRA tells the active side of connect request id that the answer will
// take up to 4.096 µs × 2^serviceTimeout (IBA 12.6.6), so it stops
// resending the REQ; a duplicate REQ is answered with the MRA again.
func (t *Table) SendMRA(id uint32, serviceTimeout uint8, priv []byte, out *Output) error {
	c, ok := t.conns[id]
	if !ok {
		return ErrNoConn
	}
	if c.Active || c.State != StateREQRcvd {
		return ErrState
	}
	mra := &mad.MRA{LocalCommID: c.ID, RemoteCommID: c.RemoteID, MessageMRAed: mad.MsgREQ,
		ServiceTimeout: min(serviceTimeout, 31)}
	if err := putPrivate(mra.PrivateData[:], priv); err != nil {
		return err
	}
	t.sendConn(out, c, c.TID, mra, true)
	t.setState(c, StateMRAREQSent)
	t.arm(c, c.timer.At().Add(kernelMs(mra.ServiceTimeout)))
	return nil
}

// guidARI is a CA GUID as REJ additional rejection information (reason 4
// "timeout" carries the rejecting CA's GUID, IBA Table 112).
func guidARI(guid uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, guid)
}
