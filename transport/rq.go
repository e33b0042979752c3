package transport

import (
	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/transport/wire"
)

// rwqe is a receive WQE being filled.
type rwqe struct {
	wr     RecvWR
	refs   []mem.Ref
	off    uint64 // bytes written so far
	length uint64 // room in the SGEs
}

type msgKind uint8

const (
	msgNone msgKind = iota
	msgSend
	msgWrite
)

// recvSide is the responder of one QP.
type recvSide struct {
	q *QP

	rq             []RecvWR
	rqSGL          [][]SGE
	rqHead, rqTail uint64
	rqMask         uint64
	rqFull         uint64 // the ring's size at the QP's depth; it grows up to it

	lastGen, lastResets uint64
	state               QPState
	lastWQE             bool // Last WQE Reached raised in this spell of ERR (SRQ QPs)

	psn       wire.PSN // next expected PSN
	msn       uint32
	connected bool // reached RTR since the last reset: psn and msn are the peer's
	nakSent   bool // a PSN-sequence or RNR NAK went out for psn: drop until it arrives
	ucDrop    bool // UC: dropping until the next FIRST/ONLY

	inMsg    msgKind
	cur      rwqe
	hasCur   bool
	writeRef mem.Ref
	hasWrite bool
	writeOff uint64
	writeLen uint64

	res     []rdRes
	resNext int

	respQ []respItem
	// ack is a plain ACK not queued yet (ackPending): the ACKs a batch of
	// requests earns coalesce into the last one, which acknowledges every
	// request up to its PSN (IBA 9.7.5.1.1; kernel rxe's completer takes
	// it so). It goes out at the owner's RunRecv after the batch, or ahead
	// of any other response, so responses never overtake it.
	ack        wire.PacketFields
	ackPending bool
	tx         []TxPacket
	wc         WC
}

func (rs *recvSide) init(q *QP) {
	rs.q = q
	rs.rqFull = pow2(q.cap.MaxRecvWR)
	rs.growRQ(min(rs.rqFull, initialSlots))
	rs.state = StateReset
	rs.connected = false
}

// growRQ makes the receive ring n slots, as sendSide.grow does: queued WQEs
// keep their index and their SGE buffers (a WQE taken into cur still
// points at its own), new slots get buffers of their own.
func (rs *recvSide) growRQ(n uint64) {
	oldRQ, oldSGL, oldMask := rs.rq, rs.rqSGL, rs.rqMask
	rs.rq, rs.rqSGL, rs.rqMask = make([]RecvWR, n), make([][]SGE, n), n-1
	for i := rs.rqHead; i < rs.rqTail && oldRQ != nil; i++ {
		rs.rq[i&rs.rqMask] = oldRQ[i&oldMask]
		rs.rqSGL[i&rs.rqMask] = oldSGL[i&oldMask]
	}
	k := int(max(rs.q.cap.MaxRecvSGE, 1))
	need := 0
	for _, b := range rs.rqSGL {
		if b == nil {
			need++
		}
	}
	sge := make([]SGE, need*k)
	j := 0
	for i := range rs.rqSGL {
		if rs.rqSGL[i] == nil {
			rs.rqSGL[i] = sge[j*k : (j+1)*k : (j+1)*k]
			j++
		}
	}
}

func (rs *recvSide) sync() *qpSnap {
	s := rs.q.snap.Load()
	if s.gen == rs.lastGen {
		return s
	}
	rs.lastGen = s.gen
	if s.resets != rs.lastResets {
		rs.lastResets = s.resets
		rs.reset(false)
	}
	st := s.attr.State
	if rs.state < StateRTR && st >= StateRTR && st != StateErr {
		rs.psn = wire.PSN(s.attr.RQPSN)
		rs.msn = 0
		rs.connected = true
		rs.nakSent, rs.ucDrop = false, false
		n := max(int(s.attr.MaxDestRdAtomic), 1)
		rs.res = make([]rdRes, n)
		rs.resNext = 0
	}
	if st != StateErr {
		rs.lastWQE = false
	}
	rs.state = st
	return s
}

// reset drops the current message and queued responses; with the RQ too
// unless keepRQ (modify to RESET empties it without completions).
func (rs *recvSide) reset(keepRQ bool) {
	rs.abandon()
	for i := range rs.respQ {
		if rs.respQ[i].hasRef {
			rs.respQ[i].ref.Release()
		}
	}
	rs.respQ = rs.respQ[:0]
	rs.ackPending = false
	if !keepRQ {
		rs.rqHead, rs.rqTail = 0, 0
	}
	rs.state = StateReset
}

// abandon drops the message in progress; a receive WQE it had taken goes
// back to the front of the queue (a UC message that lost a packet leaves the
// WQE for the next one).
func (rs *recvSide) abandon() {
	if rs.hasWrite {
		rs.writeRef.Release()
		rs.hasWrite = false
	}
	if rs.hasCur {
		rs.cur.refs = releaseRefs(rs.cur.refs)
		rs.cur.off = 0
	}
	rs.inMsg = msgNone
}

// PostRecv queues a receive work request (ibv_post_recv). Called by the
// receive owner; wr is copied.
func (q *QP) PostRecv(wr *RecvWR) error {
	rs := &q.rcv
	s := rs.sync()
	if s.attr.State == StateReset {
		return ErrState
	}
	if q.srq != nil {
		return ErrInvalid // the QP takes its receives from its SRQ
	}
	if uint32(len(wr.SGL)) > q.cap.MaxRecvSGE && wr.Fault == WCSuccess {
		return ErrInvalid
	}
	if rs.rqTail-rs.rqHead >= uint64(q.cap.MaxRecvWR) {
		return ErrFull
	}
	if rs.rqTail-rs.rqHead == uint64(len(rs.rq)) {
		rs.growRQ(2 * uint64(len(rs.rq))) // below rqFull: MaxRecvWR <= rqFull
	}
	i := rs.rqTail & rs.rqMask
	sgl := rs.rqSGL[i][:0]
	if len(wr.SGL) <= cap(sgl) {
		sgl = append(sgl, wr.SGL...)
	}
	rs.rq[i] = RecvWR{ID: wr.ID, SGL: sgl, Fault: wr.Fault}
	rs.rqTail++
	return nil
}

// popRecv takes the next receive WQE into rs.cur.
func (rs *recvSide) popRecv() bool {
	if rs.hasCur {
		return true
	}
	var wr RecvWR
	if rs.q.srq != nil {
		var ok bool
		if wr, ok = rs.q.srq.pop(); !ok {
			return false
		}
	} else {
		if rs.rqHead == rs.rqTail {
			return false
		}
		wr = rs.rq[rs.rqHead&rs.rqMask]
		rs.rqHead++
	}
	rs.cur.wr = wr
	rs.cur.wr.Fault = wr.Fault
	rs.cur.off = 0
	rs.cur.length = 0
	for _, s := range wr.SGL {
		rs.cur.length += uint64(s.Length)
	}
	rs.cur.refs = rs.cur.refs[:0]
	rs.hasCur = true
	return true
}

// scatterRecv writes data at offset off of the current receive WQE,
// resolving its SGEs the first time. false: a bad lkey.
func (rs *recvSide) scatterRecv(off uint64, data []byte) bool {
	c := &rs.cur
	if len(c.refs) == 0 && len(c.wr.SGL) > 0 {
		var err error
		if c.refs, err = resolveSGL(rs.q.env.Memory, rs.q.pd, c.wr.SGL, mem.LocalWrite, c.refs); err != nil {
			return false
		}
	}
	copySGL(c.wr.SGL, c.refs, off, data, true)
	return true
}

// completeRecv delivers the current receive WQE's completion.
func (rs *recvSide) completeRecv(wc *WC) {
	q := rs.q
	rs.cur.refs = releaseRefs(rs.cur.refs)
	rs.hasCur = false
	q.retiredRecv()
	wc.WRID = rs.cur.wr.ID
	wc.QPN = q.qpn
	if !q.recvCQ.Push(wc) {
		q.fatal(EventQPFatal, "receive CQ overflow")
	}
}

// RunRecv does what the receive side has to do outside packet arrival:
// flush on ERR, and continue long READ responses. It returns true while
// responses remain queued (the owner should run it again soon).
func (q *QP) RunRecv() bool {
	rs := &q.rcv
	s := rs.sync()
	if s.attr.State == StateErr {
		rs.sendPendingAck(s)
		rs.flush()
		return false
	}
	rs.queuePendingAck()
	rs.pump(s)
	rs.flushTx()
	q.pubRecvPSN.Store(uint32(rs.psn))
	return len(rs.respQ) > 0
}

// sendPendingAck sends the coalesced ACK still waiting as the QP enters
// ERR: the requests it acknowledges were executed and completed, and the
// application may already have acted on their completions (a disconnect
// is what moves a QP to ERR), so the requester must learn of them rather
// than retry into a QP that no longer answers. Nothing else queued is
// sent in ERR.
func (rs *recvSide) sendPendingAck(s *qpSnap) {
	if !rs.ackPending {
		return
	}
	rs.ackPending = false
	rs.emit(&rs.ack, nil, 0, s)
	rs.flushTx()
}

func (rs *recvSide) flush() {
	q := rs.q
	rs.flushTx()
	if rs.hasCur {
		rs.abandon()
		rs.wc = WC{Status: WCWRFlushErr, Opcode: WCRecv}
		rs.completeRecv(&rs.wc)
	}
	rs.reset(true)
	rs.state = StateErr
	if q.srq != nil {
		// SRQ WQEs stay for the other QPs. The consumer learns that this
		// QP takes no more of them (IBA 11.6.3.2 Last WQE Reached; kernel
		// rxe raises it when it flushes), once per entry into ERR.
		if !rs.lastWQE {
			rs.lastWQE = true
			q.event(EventQPLastWQE)
		}
		return
	}
	for rs.rqHead < rs.rqTail {
		wr := rs.rq[rs.rqHead&rs.rqMask]
		rs.rqHead++
		q.retiredRecv()
		rs.wc = WC{WRID: wr.ID, Status: WCWRFlushErr, Opcode: WCRecv, QPN: q.qpn}
		q.recvCQ.Push(&rs.wc)
	}
}

// HandleRequest processes one request packet (SEND, WRITE, READ request,
// atomics, FLUSH, ATOMIC_WRITE). Called by the receive owner.
func (q *QP) HandleRequest(p *RxPacket) {
	rs := &q.rcv
	s := rs.sync()
	st := s.attr.State
	if st == StateReset || st == StateInit || st == StateErr || p.Op.Flags&wire.FlagRequest == 0 ||
		p.BTH.Opcode().Transport() != wireTransport(q.typ) {
		q.inc(RcvdDropped)
		return
	}
	q.inc(RcvdPkts)
	switch q.typ {
	case QPTypeRC:
		rs.rcRequest(s, p)
	case QPTypeUC:
		rs.ucRequest(s, p)
	default:
		rs.udRequest(s, p)
	}
	rs.pump(s)
	rs.flushTx()
	q.pubRecvPSN.Store(uint32(rs.psn))
}
