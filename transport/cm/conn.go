package cm

import (
	"math/bits"
	"net/netip"
	"time"

	"github.com/vrnic/vrnicd/transport/clock"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
	"github.com/vrnic/vrnicd/verbsock/ibv"
)

// State is a connection's CM state (IBA 12.9.6, Figure 160 "CM state
// diagram"; the kernel's enum ib_cm_state): defined in verbsock/ibv (the
// client-visible vocabulary, ibv.CMState), aliased here.
type State = ibv.CMState

const (
	StateIdle        = ibv.CMStateIdle
	StateREQSent     = ibv.CMStateREQSent
	StateREQRcvd     = ibv.CMStateREQRcvd
	StateMRAREQSent  = ibv.CMStateMRAREQSent
	StateMRAREQRcvd  = ibv.CMStateMRAREQRcvd
	StateREPSent     = ibv.CMStateREPSent
	StateREPRcvd     = ibv.CMStateREPRcvd
	StateMRAREPSent  = ibv.CMStateMRAREPSent
	StateMRAREPRcvd  = ibv.CMStateMRAREPRcvd
	StateEstablished = ibv.CMStateEstablished
	StateDREQSent    = ibv.CMStateDREQSent
	StateDREQRcvd    = ibv.CMStateDREQRcvd
	StateTimewait    = ibv.CMStateTimewait
	StateSIDRREQSent = ibv.CMStateSIDRREQSent
	StateSIDRREQRcvd = ibv.CMStateSIDRREQRcvd
)

// isHalfOpen reports whether a passive connection in state s is one a REQ
// storm could pile up: the consumer or the peer has yet to finish it.
func isHalfOpen(s State) bool {
	switch s {
	case StateREQRcvd, StateMRAREQSent, StateREPSent, StateMRAREPRcvd, StateSIDRREQRcvd:
		return true
	}
	return false
}

// Conn is one communication: the cm_id_private of ib_cm. The Table owns it;
// consumers see copies (Table.Conn).
type Conn struct {
	ID         uint32 // local communication ID
	RemoteID   uint32 // the peer's communication ID (0 until known)
	RemoteGUID uint64 // the peer's CA GUID
	State      State
	Active     bool       // we sent the REQ (or SIDR_REQ)
	Peer       netip.Addr // the peer's QP1 address
	ServiceID  uint64
	Listener   uint64 // passive: the Listen handle
	TID        uint64 // the transaction ID of the exchange (the REQ's)

	QPType     uint8
	QPN        uint32 // ours
	RemoteQPN  uint32
	PSN        uint32 // our starting PSN
	RemotePSN  uint32
	Path       mad.Path // seen from this side
	PathMTU    uint8
	RespRes    uint8 // our QP's max_dest_rd_atomic
	InitDepth  uint8 // our QP's max_rd_atomic
	RetryCount uint8 // our QP's retry count
	RNRRetry   uint8 // our QP's RNR retry
	Timeout    uint8 // our QP's Local ACK Timeout exponent
	SRQ        bool
	Manual     bool // the consumer moves its QP (ConnectParams.Manual, AcceptParams.Manual)

	responseTimeout time.Duration // how long the peer may take to answer (kernel timeout_ms)
	maxRetries      uint8         // retransmissions allowed (REQ's Max CM Retries)
	retries         uint8         // retransmissions done of the message in last
	last            [mad.Size]byte
	hasLast         bool

	timer clock.Slot // the deadline of expire, in Table.timers
}

// qpTransitions are the QP modifications rdma_cm makes before it sends a
// REP or an RTU (cma.c cma_modify_qp_rtr, cma_modify_qp_rts; cm.c
// cm_init_qp_init_attr, cm_init_qp_rtr_attr, cm_init_qp_rts_attr): INIT
// again with remote write, and read and atomics when we are a responder
// for them; RTR with the peer's QPN; RTS with the timers.
//
// The PSNs are ib_cm's, not IBA's reading: the Starting PSN a side puts in
// its REQ or REP is the one it expects to receive (cm.c: ib_send_cm_req
// keeps the REQ's as rq_psn, cm_rep_handler takes the REP's as sq_psn, and
// the passive side the other way round). The kernel rping capture shows it:
// the client's first SEND carries the REP's Starting PSN, the server's
// first RDMA READ the REQ's; a kernel peer NAKs (PSN sequence error) a QP
// set up the IBA way.
func (c *Conn) qpTransitions(out *Output) {
	if c.Manual {
		return
	}
	attr := QPAttr{
		AccessFlags: AccessRemoteWrite,
		DestQPN:     c.RemoteQPN, RQPSN: c.PSN, SQPSN: c.RemotePSN, PathMTU: c.PathMTU, Path: c.Path,
		MaxDestRdAtomic: c.RespRes, MaxRdAtomic: c.InitDepth, Timeout: c.Timeout,
		RetryCount: c.RetryCount, RNRRetry: c.RNRRetry,
	}
	if c.RespRes > 0 {
		attr.AccessFlags |= AccessRemoteRead | AccessRemoteAtomic
	}
	out.Modify = append(out.Modify,
		QPModify{ID: c.ID, QPN: c.QPN, State: QPStateInit, Attr: attr},
		QPModify{ID: c.ID, QPN: c.QPN, State: QPStateRTR, Attr: attr},
		QPModify{ID: c.ID, QPN: c.QPN, State: QPStateRTS, Attr: attr})
}

func (c *Conn) qpError(out *Output) {
	if c.Manual {
		return // the consumer's QP, the consumer's move (rdma_cm without a QP on the id)
	}
	out.Modify = append(out.Modify, QPModify{ID: c.ID, QPN: c.QPN, State: QPStateErr})
}

// formTID is ib_cm's cm_form_tid: the MAD agent's high 32 bits and the local
// communication ID as the kernel stores it (big-endian bytes read by a
// little-endian CPU), so the TIDs we send look like an x86 kernel's.
func (t *Table) formTID(id uint32) uint64 {
	return uint64(t.cfg.HiTID)<<32 | uint64(bits.ReverseBytes32(id))
}

// send encodes msg to c's peer; remember keeps it for retransmission and
// for answering duplicates.
func (t *Table) send(out *Output, to netip.Addr, tid uint64, msg mad.Message) *Send {
	out.Sends = append(out.Sends, Send{To: to})
	s := &out.Sends[len(out.Sends)-1]
	_, _ = mad.EncodeCM(s.MAD[:], mad.CMHeader(tid, 0), msg) // cannot fail: the array is Size long
	return s
}

func (t *Table) sendConn(out *Output, c *Conn, tid uint64, msg mad.Message, remember bool) {
	s := t.send(out, c.Peer, tid, msg)
	if remember {
		c.last, c.hasLast, c.retries = s.MAD, true, 0
	}
}

// resend sends c's last message again.
func (t *Table) resend(out *Output, c *Conn) {
	if c.hasLast {
		out.Sends = append(out.Sends, Send{To: c.Peer, MAD: c.last})
	}
}

// awaitAnswer arms c's retransmission timer for the message in last.
func (t *Table) awaitAnswer(c *Conn, now time.Time) { t.arm(c, now.Add(c.responseTimeout)) }

// expire runs c's deadline: retransmit while retries last (IBA 12.9.3: REQ,
// REP and DREQ are resent after the response timeout, up to Max CM
// Retries), then give up as the kernel does on IB_WC_RESP_TIMEOUT_ERR.
func (t *Table) expire(c *Conn, now time.Time, out *Output) {
	switch c.State {
	case StateREQSent, StateREPSent, StateDREQSent, StateSIDRREQSent:
		if c.retries < c.maxRetries {
			c.retries++
			t.counters.Retransmits++
			t.resend(out, c)
			t.awaitAnswer(c, now)
			return
		}
		t.counters.Timeouts++
		t.giveUp(c, now, out)
	case StateMRAREQRcvd, StateMRAREPRcvd:
		// The MRA's service timeout ran out without the answer it
		// promised: the send it delayed goes again if retries are left
		// (the kernel's MRA only stretches the MAD's timeout, ib_modify_mad).
		if c.retries < c.maxRetries {
			c.retries++
			t.counters.Retransmits++
			if c.State == StateMRAREQRcvd {
				t.setState(c, StateREQSent)
			} else {
				t.setState(c, StateREPSent)
			}
			t.resend(out, c)
			t.awaitAnswer(c, now)
			return
		}
		t.counters.Timeouts++
		t.giveUp(c, now, out)
	case StateREQRcvd, StateMRAREQSent, StateSIDRREQRcvd:
		// The consumer never answered and the peer has stopped retrying:
		// the half-open entry goes (bounded memory under a REQ storm).
		t.counters.HalfOpenExpired++
		t.free(c)
		out.Events = append(out.Events, Event{Kind: EventUnreachable, ID: c.ID})
	case StateTimewait:
		t.free(c)
		out.Events = append(out.Events, Event{Kind: EventTimewaitExit, ID: c.ID})
	}
}

// giveUp ends an exchange whose peer stopped answering.
func (t *Table) giveUp(c *Conn, now time.Time, out *Output) {
	switch c.State {
	case StateDREQSent:
		// cm.c: IB_CM_DREQ_ERROR enters timewait like a DREP would.
		t.enterTimewait(c, now)
		out.Events = append(out.Events, Event{Kind: EventDisconnected, ID: c.ID})
	case StateSIDRREQSent:
		t.free(c)
		out.Events = append(out.Events, Event{Kind: EventUnreachable, ID: c.ID})
	default:
		// REQ or REP unanswered: RDMA_CM_EVENT_UNREACHABLE, the ID is idle.
		if !c.Active && c.State != StateREQSent {
			c.qpError(out)
		}
		t.free(c)
		out.Events = append(out.Events, Event{Kind: EventUnreachable, ID: c.ID})
	}
}

// enterTimewait holds c's comm ID and QPN for the QP's ACK timeout (cm.c
// cm_enter_timewait), so that packets of the old connection die before
// either is used again (IBA 12.9.8.6).
func (t *Table) enterTimewait(c *Conn, now time.Time) {
	t.setState(c, StateTimewait)
	c.hasLast = false
	t.arm(c, now.Add(t.timewait(c)))
}

func (t *Table) timewait(c *Conn) time.Duration {
	if t.cfg.Timewait > 0 {
		return t.cfg.Timewait
	}
	return kernelMs(c.Timeout)
}

// onMRA: the peer needs more time (IBA 12.6.6): stop retransmitting and wait
// the service timeout it names plus the path's round trip.
func (t *Table) onMRA(c *Conn, m *mad.MRA, now time.Time) {
	var next State
	switch {
	case m.MessageMRAed == mad.MsgREQ && c.State == StateREQSent:
		next = StateMRAREQRcvd
	case m.MessageMRAed == mad.MsgREP && c.State == StateREPSent:
		next = StateMRAREPRcvd
	default:
		t.counters.Dropped++
		return
	}
	if c.RemoteID == 0 {
		c.RemoteID = m.LocalCommID
	}
	t.setState(c, next)
	wait := kernelMs(m.ServiceTimeout) + kernelMs(c.Timeout)
	t.arm(c, now.Add(wait))
}

// onREP: the active side's answer (IBA 12.9.6.2): QP to RTR and RTS with the
// peer's QPN and PSN, RTU, established. A REP again after that is answered
// with the RTU again (cm.c cm_dup_rep_handler). A Manual connection stops
// in REP_RCVD with EventConnectResponse: the consumer moves its QP and
// calls Establish; a REP again meanwhile is dropped, as cm.c drops it.
func (t *Table) onREP(c *Conn, m *mad.REP, from netip.Addr, tid uint64, out *Output) {
	switch c.State {
	case StateREQSent, StateMRAREQRcvd:
	case StateREPRcvd:
		t.counters.DupREP++
		return
	case StateEstablished:
		if m.LocalCommID == c.RemoteID {
			t.counters.DupREP++
			t.resend(out, c)
			return
		}
		t.counters.Dropped++
		return
	default:
		t.counters.Dropped++
		return
	}
	c.RemoteID, c.RemoteGUID = m.LocalCommID, m.LocalCAGUID
	c.RemoteQPN, c.RemotePSN = m.LocalQPN, m.StartingPSN
	// The peer's resources bound ours (cm.c cm_rep_handler swaps them).
	c.InitDepth, c.RespRes = min(c.InitDepth, m.ResponderResources), min(c.RespRes, m.InitiatorDepth)
	c.RNRRetry = m.RNRRetryCount
	c.Timeout = ackTimeout(m.TargetACKDelay, t.cfg.PacketLifeTime)
	if old, ok := t.byQPN[qpnKey{c.RemoteQPN, GIDFromAddr(c.Peer)}]; ok && old != c.ID {
		// Another connection still holds the peer's QP: stale (IBA 12.9.8.3.1).
		t.counters.StaleConn++
		t.sendConn(out, c, tid, &mad.REJ{LocalCommID: c.ID, RemoteCommID: m.LocalCommID,
			MessageRejected: mad.MsgREP, Reason: mad.RejStaleConn}, false)
		t.free(c)
		out.Events = append(out.Events, Event{Kind: EventRejected, ID: c.ID, Reason: mad.RejStaleConn})
		return
	}
	t.indexRemote(c)
	t.disarm(c)
	t.setState(c, StateREPRcvd)
	if c.Manual {
		out.Events = append(out.Events, Event{Kind: EventConnectResponse, ID: c.ID, PrivateData: clonePriv(m.PrivateData[:])})
		return
	}
	c.qpTransitions(out)
	t.sendConn(out, c, c.TID, &mad.RTU{LocalCommID: c.ID, RemoteCommID: c.RemoteID}, true)
	t.setState(c, StateEstablished)
	out.Events = append(out.Events, Event{Kind: EventEstablished, ID: c.ID, PrivateData: clonePriv(m.PrivateData[:])})
}

// onRTU: the passive side is established (IBA 12.9.6.3).
func (t *Table) onRTU(c *Conn, m *mad.RTU, out *Output) {
	if c.State != StateREPSent && c.State != StateMRAREPRcvd {
		t.counters.Dropped++
		return
	}
	t.establishPassive(c, out, clonePriv(m.PrivateData[:]))
}

func (t *Table) establishPassive(c *Conn, out *Output, priv []byte) {
	t.disarm(c)
	c.hasLast = false
	t.setState(c, StateEstablished)
	out.Events = append(out.Events, Event{Kind: EventEstablished, ID: c.ID, PrivateData: priv})
}

// onREJ: the peer refused (IBA 12.6.7). A stale-connection REJ, or one of an
// established connection, leaves the IDs in timewait (cm.c cm_rej_handler);
// any other returns the connection to idle.
func (t *Table) onREJ(c *Conn, m *mad.REJ, now time.Time, out *Output) {
	switch c.State {
	case StateREQSent, StateMRAREQRcvd, StateREPSent, StateMRAREPRcvd, StateREQRcvd, StateMRAREQSent, StateREPRcvd:
	case StateEstablished, StateDREQSent, StateDREQRcvd:
	default:
		t.counters.Dropped++
		return
	}
	ev := Event{Kind: EventRejected, ID: c.ID, Reason: m.Reason, PrivateData: clonePriv(m.PrivateData[:])}
	if n := int(m.RejectedInfoLength); n > 0 {
		ev.ARI = append([]byte(nil), m.ARI[:min(n, len(m.ARI))]...)
	}
	if c.State != StateREQSent && c.State != StateMRAREQRcvd && c.State != StateREQRcvd && c.State != StateMRAREQSent {
		c.qpError(out)
	}
	if c.State == StateEstablished || c.State == StateDREQSent || c.State == StateDREQRcvd || m.Reason == mad.RejStaleConn {
		t.disarm(c)
		t.enterTimewait(c, now)
	} else {
		t.free(c)
	}
	out.Events = append(out.Events, ev)
}

// onDREQ: the peer disconnects (IBA 12.9.6.4). An RTU lost before it counts
// as received. The DREP waits for the consumer's Disconnect, as rdma_cm's
// does; a DREQ again in timewait is answered with the DREP again.
func (t *Table) onDREQ(c *Conn, m *mad.DREQ, tid uint64, now time.Time, out *Output) {
	switch c.State {
	case StateREPSent, StateMRAREPRcvd, StateEstablished:
		if m.RemoteQPN != c.QPN {
			// cm.c cm_dreq_handler: a DREQ for another QP is not ours.
			t.counters.Dropped++
			return
		}
		if c.State != StateEstablished {
			t.establishPassive(c, out, nil)
		}
		c.TID = tid
		t.setState(c, StateDREQRcvd)
		c.qpError(out)
		out.Events = append(out.Events, Event{Kind: EventDisconnected, ID: c.ID, PrivateData: clonePriv(m.PrivateData[:])})
	case StateDREQSent:
		// Both sides disconnect at once: answer, and the exchange is over.
		t.disarm(c)
		t.send(out, c.Peer, tid, &mad.DREP{LocalCommID: c.ID, RemoteCommID: c.RemoteID})
		t.enterTimewait(c, now)
		out.Events = append(out.Events, Event{Kind: EventDisconnected, ID: c.ID})
	case StateTimewait:
		t.counters.DupDREQ++
		t.send(out, c.Peer, tid, &mad.DREP{LocalCommID: c.ID, RemoteCommID: c.RemoteID})
	case StateDREQRcvd:
		t.counters.DupDREQ++
	default:
		t.counters.Dropped++
	}
}

// onDREP: our DREQ is answered; timewait (IBA 12.9.6.4).
func (t *Table) onDREP(c *Conn, m *mad.DREP, now time.Time, out *Output) {
	if c.State != StateDREQSent {
		t.counters.Dropped++
		return
	}
	t.disarm(c)
	t.enterTimewait(c, now)
	out.Events = append(out.Events, Event{Kind: EventDisconnected, ID: c.ID, PrivateData: clonePriv(m.PrivateData[:])})
}

// clonePriv copies private data for an event, nil when it is all zero
// (the kernel cannot tell zeros from nothing either; consumers get the
// full-length area when anything is set).
func clonePriv(b []byte) []byte {
	for _, x := range b {
		if x != 0 {
			return append([]byte(nil), b...)
		}
	}
	return nil
}
