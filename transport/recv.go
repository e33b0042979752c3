package transport

import (
	"encoding/binary"

	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/transport/wire"
)

// maxRespPackets is how many response packets one RunRecv sends before it
// yields; a long READ response continues on the next run.
const maxRespPackets = 256

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

// rdRes is a responder resource: what it needs to answer a duplicate READ or
// atomic from saved state rather than by executing it again.
type rdRes struct {
	valid       bool
	op          wire.Opcode
	first, last wire.PSN
	va          uint64
	rkey        uint32
	length      uint32
	orig        uint64 // atomic: the original value it returned
}

// respItem is one queued response: a READ response stream, or a small
// packet (ACK, NAK, atomic ACK, zero-length read response) kept in order
// behind it.
type respItem struct {
	stream bool
	// stream
	ref    mem.Ref
	hasRef bool
	psn    wire.PSN // next response PSN
	last   wire.PSN
	first  bool // the next packet starts the response
	off    uint64
	length uint64 // bytes of the whole (re)sent response
	msn    uint32
	// small packet
	f wire.PacketFields
}

// recvSide is the responder of one QP.
type recvSide struct {
	q *QP

	rq             []RecvWR
	rqSGL          [][]SGE
	rqHead, rqTail uint64
	rqMask         uint64

	lastGen, lastResets uint64
	state               QPState

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
	tx    []TxPacket
	wc    WC
}

func (rs *recvSide) init(q *QP) {
	rs.q = q
	n := uint64(1)
	for n < uint64(q.cap.MaxRecvWR) {
		n <<= 1
	}
	rs.rq = make([]RecvWR, n)
	rs.rqSGL = make([][]SGE, n)
	k := int(max(q.cap.MaxRecvSGE, 1))
	sge := make([]SGE, int(n)*k)
	for i := range rs.rqSGL {
		rs.rqSGL[i] = sge[i*k : (i+1)*k : (i+1)*k]
	}
	rs.rqMask = n - 1
	rs.tx = make([]TxPacket, 0, txBatch)
	rs.state = StateReset
	rs.connected = false
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
		rs.flush()
		return false
	}
	rs.pump(s)
	rs.flushTx()
	q.pubRecvPSN.Store(uint32(rs.psn))
	return len(rs.respQ) > 0
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
		return // SRQ WQEs stay for the other QPs
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
		p.BTH.Opcode().Transport() != q.typ.wireTransport() {
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

// seqOK checks the opcode sequence of a message (IBA 9.7.4.1.2): inside a
// SEND only SEND MIDDLE/LAST, inside a WRITE only WRITE MIDDLE/LAST, and
// outside a message no MIDDLE/LAST.
func (rs *recvSide) seqOK(info *wire.OpInfo) bool {
	cont := info.Flags&(wire.FlagMiddle) != 0 || info.Flags&(wire.FlagEnd|wire.FlagStart) == wire.FlagEnd
	switch rs.inMsg {
	case msgSend:
		return cont && info.Has(wire.FlagSend)
	case msgWrite:
		return cont && info.Has(wire.FlagWrite)
	}
	return !cont
}

// accessOK checks the QP's remote access flags for the operation.
func accessOK(info *wire.OpInfo, a mem.Access) bool {
	switch {
	case info.Has(wire.FlagWrite), info.Has(wire.FlagAtomicWrite):
		return a&mem.RemoteWrite != 0
	case info.Has(wire.FlagRead):
		return a&mem.RemoteRead != 0
	case info.Has(wire.FlagAtomic):
		return a&mem.RemoteAtomic != 0
	case info.Has(wire.FlagFlush):
		return a&(mem.FlushGlobal|mem.FlushPersistent) != 0
	}
	return true
}

// lengthOK checks payload against the path MTU: FIRST and MIDDLE carry
// exactly one MTU, LAST 1 … MTU, ONLY at most one MTU.
func lengthOK(info *wire.OpInfo, n, mtu int) bool {
	switch {
	case info.Flags&wire.FlagPayload == 0:
		return n == 0
	case info.Has(wire.FlagAtomicWrite):
		return n == 8
	case info.Has(wire.FlagStart | wire.FlagEnd):
		return n <= mtu
	case info.Has(wire.FlagEnd):
		return n >= 1 && n <= mtu
	}
	return n == mtu // FIRST, MIDDLE
}

func (rs *recvSide) rcRequest(s *qpSnap, p *RxPacket) {
	q := rs.q
	psn := wire.PSN(p.BTH.PSN())
	info := p.Op
	switch d := psn.Diff(rs.psn); {
	case d > 0:
		q.inc(OutOfSeqRequest)
		if !rs.nakSent {
			rs.nakSent = true
			rs.queueAck(wire.NakPSNSeqError, rs.psn, s) // once, with the PSN we expect
		}
		return
	case d < 0:
		q.inc(DuplicateRequest)
		rs.duplicate(s, p, psn)
		return
	}
	rs.nakSent = false
	if !rs.seqOK(info) {
		rs.classC(s, psn, WCLocQPOpErr, "opcode out of sequence")
		return
	}
	if !accessOK(info, s.attr.AccessFlags) {
		rs.classC(s, psn, WCLocQPOpErr, "operation not enabled in qp_access_flags")
		return
	}
	if !lengthOK(info, len(p.Payload), s.mtu) {
		rs.classC(s, psn, WCLocLenErr, "payload length against path MTU")
		return
	}
	if info.Flags&(wire.FlagRead|wire.FlagAtomic|wire.FlagAtomicWrite|wire.FlagFlush) != 0 {
		if s.attr.MaxDestRdAtomic == 0 {
			rs.classC(s, psn, WCLocQPOpErr, "READ/atomic with max_dest_rd_atomic 0")
			return
		}
		if info.Has(wire.FlagRead) && rs.streams() >= maxStreams(s) {
			rs.classC(s, psn, WCLocQPOpErr, "more READs outstanding than max_dest_rd_atomic allows")
			return
		}
	}
	// A receive WQE is needed at SEND FIRST/ONLY and at the end of a
	// WRITE with immediate; without one, RNR NAK.
	needWQE := info.Has(wire.FlagRecvWQE) && (info.Has(wire.FlagSend) || info.Has(wire.FlagEnd))
	if needWQE && !rs.popRecv() {
		q.inc(SendRNRErr)
		rs.nakSent = true
		rs.queueAck(wire.AETHRNRNak|s.attr.MinRNRTimer&0x1f, psn, s)
		return
	}
	if needWQE && rs.cur.wr.Fault != WCSuccess {
		rs.fatalNAK(s, wire.NakRemoteOperation, psn, rs.cur.wr.Fault, EventQPFatal, "malformed receive WQE")
		return
	}
	switch {
	case info.Has(wire.FlagSend):
		if !rs.doSend(s, p, psn) {
			return
		}
	case info.Has(wire.FlagWrite):
		if !rs.doWrite(s, p, psn) {
			return
		}
	case info.Has(wire.FlagRead):
		rs.doRead(s, p, psn)
		return // the response packets are the acknowledgement
	case info.Has(wire.FlagAtomic):
		rs.doAtomic(s, p, psn)
		return
	case info.Has(wire.FlagAtomicWrite), info.Has(wire.FlagFlush):
		rs.doAtomicWriteFlush(s, p, psn)
		return
	}
	rs.psn = psn.Add(1)
	if p.BTH.AckReq() {
		rs.queueAck(wire.AETHAck|wire.AETHInvalidCredits, psn, s)
	}
}

// classC handles an invalid request (IBA class C): NAK, and the QP goes to
// ERR. A receive WQE in progress completes with st.
func (rs *recvSide) classC(s *qpSnap, psn wire.PSN, st WCStatus, why string) {
	rs.fatalNAK(s, wire.NakInvalidRequest, psn, st, EventQPReqErr, why)
}

func (rs *recvSide) fatalNAK(s *qpSnap, syn uint8, psn wire.PSN, st WCStatus, ev Event, why string) {
	q := rs.q
	// The QP is going to ERR: responses still queued will never be sent,
	// and the NAK must not wait behind them.
	for i := range rs.respQ {
		if rs.respQ[i].hasRef {
			rs.respQ[i].ref.Release()
		}
	}
	rs.respQ = rs.respQ[:0]
	rs.queueAck(syn, psn, s)
	rs.pump(s)
	rs.flushTx()
	if rs.hasCur {
		rs.abandon()
		rs.wc = WC{Status: st, Opcode: WCRecv}
		rs.completeRecv(&rs.wc)
	}
	q.log.Debug("responder error", "psn", uint32(psn), "reason", why)
	q.fatal(ev, "responder: "+why)
}

func (rs *recvSide) doSend(s *qpSnap, p *RxPacket, psn wire.PSN) bool {
	q := rs.q
	info := p.Op
	c := &rs.cur
	n := uint64(len(p.Payload))
	if c.off+n > c.length {
		rs.classC(s, psn, WCLocLenErr, "SEND longer than the receive buffer")
		return false
	}
	if n > 0 && !rs.scatterRecv(c.off, p.Payload) {
		rs.fatalNAK(s, wire.NakRemoteOperation, psn, WCLocProtErr, EventQPFatal, "receive WQE with a bad lkey")
		return false
	}
	c.off += n
	if !info.Has(wire.FlagEnd) {
		rs.inMsg = msgSend
		return true
	}
	rs.inMsg = msgNone
	rs.msn = (rs.msn + 1) & wire.PSNMask
	rs.wc = WC{Status: WCSuccess, Opcode: WCRecv, ByteLen: uint32(c.off), Solicited: p.BTH.SE()}
	if p.ImmDt != nil {
		rs.wc.Flags |= WCWithImm
		rs.wc.ImmData = p.ImmDt.Imm()
	}
	if p.IETH != nil {
		rkey := p.IETH.RKey()
		if err := q.env.Memory.RemoteInvalidate(q.pd, q.qpn, rkey); err != nil {
			q.log.Debug("SEND_WITH_INV of a key that cannot be invalidated", "rkey", rkey, "err", err)
			rs.classC(s, psn, WCRemInvReqErr, "SEND_WITH_INV with an invalid rkey")
			return false
		}
		rs.wc.Flags |= WCWithInv
		rs.wc.ImmData = rkey
	}
	rs.completeRecv(&rs.wc)
	return true
}

func (rs *recvSide) doWrite(s *qpSnap, p *RxPacket, psn wire.PSN) bool {
	q := rs.q
	info := p.Op
	if info.Has(wire.FlagStart) {
		va, rkey, l := p.RETH.VA(), p.RETH.RKey(), uint64(p.RETH.Length())
		if l > MaxMessageSize {
			rs.classC(s, psn, WCLocLenErr, "RETH length over 2^31")
			return false
		}
		if l > 0 {
			r, err := q.env.Memory.Remote(q.pd, q.qpn, rkey, va, l, mem.RemoteWrite)
			if err != nil {
				q.log.Debug("WRITE rkey check failed", "rkey", rkey, "va", va, "len", l, "err", err)
				rs.fatalNAK(s, nakFor(err), psn, WCLocAccessErr, EventQPAccessErr, "WRITE rkey check failed")
				return false
			}
			rs.writeRef, rs.hasWrite = r, true
		}
		rs.writeOff, rs.writeLen = 0, l
	}
	n := uint64(len(p.Payload))
	rest := rs.writeLen - rs.writeOff
	if n > rest || (info.Has(wire.FlagEnd) && n != rest) {
		rs.classC(s, psn, WCLocLenErr, "WRITE payload does not match the RETH length")
		return false
	}
	if n > 0 {
		rs.writeRef.WriteAt(p.Payload, int64(rs.writeOff))
	}
	rs.writeOff += n
	if !info.Has(wire.FlagEnd) {
		rs.inMsg = msgWrite
		return true
	}
	rs.inMsg = msgNone
	if rs.hasWrite {
		rs.writeRef.Release()
		rs.hasWrite = false
	}
	rs.msn = (rs.msn + 1) & wire.PSNMask
	if p.ImmDt != nil {
		rs.wc = WC{Status: WCSuccess, Opcode: WCRecvRDMAWithImm, ByteLen: uint32(rs.writeLen), Flags: WCWithImm, ImmData: p.ImmDt.Imm(), Solicited: p.BTH.SE()}
		rs.completeRecv(&rs.wc)
	}
	return true
}

// newRes takes the next responder resource (the oldest is reused: it is
// the requester's job not to exceed max_dest_rd_atomic).
func (rs *recvSide) newRes() *rdRes {
	r := &rs.res[rs.resNext]
	rs.resNext = (rs.resNext + 1) % len(rs.res)
	*r = rdRes{valid: true}
	return r
}

func (rs *recvSide) findRes(psn wire.PSN) *rdRes {
	for i := range rs.res {
		r := &rs.res[i]
		if r.valid && !psn.Before(r.first) && !psn.After(r.last) {
			return r
		}
	}
	return nil
}

func readPackets(length uint64, mtu int) uint32 {
	if length == 0 {
		return 1
	}
	return uint32((length + uint64(mtu) - 1) / uint64(mtu))
}

func (rs *recvSide) doRead(s *qpSnap, p *RxPacket, psn wire.PSN) {
	q := rs.q
	va, rkey, l := p.RETH.VA(), p.RETH.RKey(), uint64(p.RETH.Length())
	if l > MaxMessageSize {
		rs.classC(s, psn, WCLocLenErr, "READ length over 2^31")
		return
	}
	var ref mem.Ref
	if l > 0 {
		r, err := q.env.Memory.Remote(q.pd, q.qpn, rkey, va, l, mem.RemoteRead)
		if err != nil {
			q.log.Debug("READ rkey check failed", "rkey", rkey, "va", va, "len", l, "err", err)
			rs.fatalNAK(s, nakFor(err), psn, WCLocAccessErr, EventQPAccessErr, "READ rkey check failed")
			return
		}
		ref = r
	}
	npkts := readPackets(l, s.mtu)
	res := rs.newRes()
	res.op, res.first, res.last = wire.RCRDMAReadRequest, psn, psn.Add(npkts-1)
	res.va, res.rkey, res.length = va, rkey, uint32(l)
	rs.msn = (rs.msn + 1) & wire.PSNMask
	rs.psn = psn.Add(npkts)
	rs.respQ = append(rs.respQ, respItem{stream: true, ref: ref, hasRef: l > 0, psn: psn, last: res.last,
		first: true, length: l, msn: rs.msn})
}

func (rs *recvSide) doAtomic(s *qpSnap, p *RxPacket, psn wire.PSN) {
	q := rs.q
	a := p.AtomicETH
	va, rkey := a.VA(), a.RKey()
	if va&7 != 0 {
		rs.classC(s, psn, WCLocQPOpErr, "atomic on an address not 8-byte aligned")
		return
	}
	r, err := q.env.Memory.Remote(q.pd, q.qpn, rkey, va, 8, mem.RemoteAtomic)
	if err != nil {
		q.log.Debug("atomic rkey check failed", "rkey", rkey, "va", va, "err", err)
		rs.fatalNAK(s, nakFor(err), psn, WCLocAccessErr, EventQPAccessErr, "atomic rkey check failed")
		return
	}
	var orig uint64
	if p.BTH.Opcode() == wire.RCCompareSwap {
		orig, _ = r.CompareSwap(0, a.Compare(), a.SwapAdd())
	} else {
		orig, _ = r.FetchAdd(0, a.SwapAdd())
	}
	r.Release()
	res := rs.newRes()
	res.op, res.first, res.last, res.va, res.rkey, res.length, res.orig = p.BTH.Opcode(), psn, psn, va, rkey, 8, orig
	rs.msn = (rs.msn + 1) & wire.PSNMask
	rs.psn = psn.Add(1)
	rs.queueAtomicAck(psn, orig, s)
}

func (rs *recvSide) doAtomicWriteFlush(s *qpSnap, p *RxPacket, psn wire.PSN) {
	q := rs.q
	op := p.BTH.Opcode()
	va, rkey, l := p.RETH.VA(), p.RETH.RKey(), uint64(p.RETH.Length())
	if op == wire.RCAtomicWrite {
		if l != 8 || va&7 != 0 {
			rs.classC(s, psn, WCLocQPOpErr, "ATOMIC_WRITE not 8 bytes at an 8-byte aligned address")
			return
		}
		r, err := q.env.Memory.Remote(q.pd, q.qpn, rkey, va, 8, mem.RemoteWrite)
		if err != nil {
			rs.fatalNAK(s, nakFor(err), psn, WCLocAccessErr, EventQPAccessErr, "ATOMIC_WRITE rkey check failed")
			return
		}
		// The payload's bytes land as they are (rxe stores them with one
		// 64-bit store).
		_ = r.AtomicWrite(0, binary.LittleEndian.Uint64(p.Payload))
		r.Release()
	} else {
		access := mem.FlushGlobal
		if p.FETH.Placement()&wire.FlushPlacePersistence != 0 {
			access = mem.FlushPersistent
		}
		if p.FETH.Selectivity() == wire.FlushSelMR || l > 0 {
			r, err := q.env.Memory.Remote(q.pd, q.qpn, rkey, va, max(l, 1), access)
			if err != nil {
				rs.fatalNAK(s, nakFor(err), psn, WCLocAccessErr, EventQPAccessErr, "FLUSH rkey check failed")
				return
			}
			// Writes are already visible in the shared pages; there is no
			// deeper placement level to push them to.
			r.Release()
		}
	}
	res := rs.newRes()
	res.op, res.first, res.last, res.va, res.rkey, res.length = op, psn, psn, va, rkey, uint32(l)
	rs.msn = (rs.msn + 1) & wire.PSNMask
	rs.psn = psn.Add(1)
	rs.queueEmptyReadResponse(psn, s)
}

// duplicate answers a request with a PSN before the expected one (IBA
// 9.7.4.1.5): SEND/WRITE are acknowledged again, READ and atomics are
// answered from the saved resource and never executed a second time.
func (rs *recvSide) duplicate(s *qpSnap, p *RxPacket, psn wire.PSN) {
	q := rs.q
	info := p.Op
	switch {
	case info.Has(wire.FlagSend), info.Has(wire.FlagWrite):
		rs.queueAck(wire.AETHAck|wire.AETHInvalidCredits, rs.psn.Sub(1), s)
	case info.Has(wire.FlagRead):
		if rs.streams() >= maxStreams(s) {
			q.inc(RcvdDropped) // replays already queued cover it
			return
		}
		r := rs.findRes(psn)
		if r == nil || r.op != wire.RCRDMAReadRequest {
			q.inc(RcvdDropped)
			return
		}
		skip := uint64(psn.Diff(r.first)) * uint64(s.mtu)
		va, l := p.RETH.VA(), uint64(p.RETH.Length())
		if p.RETH.RKey() != r.rkey || va != r.va+skip || skip+l != uint64(r.length) {
			q.inc(RcvdDropped) // not the rest of the request we saved
			return
		}
		var ref mem.Ref
		if l > 0 {
			rr, err := q.env.Memory.Remote(q.pd, q.qpn, r.rkey, va, l, mem.RemoteRead)
			if err != nil {
				rs.fatalNAK(s, nakFor(err), psn, WCLocAccessErr, EventQPAccessErr, "replayed READ rkey check failed")
				return
			}
			ref = rr
		}
		rs.respQ = append(rs.respQ, respItem{stream: true, ref: ref, hasRef: l > 0, psn: psn, last: r.last,
			first: true, length: l, msn: rs.msn})
	case info.Has(wire.FlagAtomic):
		r := rs.findRes(psn)
		if r == nil || r.op != p.BTH.Opcode() {
			q.inc(RcvdDropped)
			return
		}
		rs.queueAtomicAck(psn, r.orig, s)
	case info.Has(wire.FlagAtomicWrite), info.Has(wire.FlagFlush):
		r := rs.findRes(psn)
		if r == nil || r.op != p.BTH.Opcode() {
			q.inc(RcvdDropped)
			return
		}
		rs.queueEmptyReadResponse(psn, s)
	}
}

func (rs *recvSide) ackFields(op wire.Opcode, psn wire.PSN, s *qpSnap) wire.PacketFields {
	return wire.PacketFields{BTH: wire.BTHFields{Opcode: op, PKey: wire.DefaultPKey, DestQP: s.attr.DestQPN, PSN: uint32(psn)}}
}

// queueAck queues an ACKNOWLEDGE with syndrome syn (ACK, RNR NAK or NAK).
func (rs *recvSide) queueAck(syn uint8, psn wire.PSN, s *qpSnap) {
	f := rs.ackFields(wire.RCAcknowledge, psn, s)
	f.AETH = wire.AETHFields{Syndrome: syn, MSN: rs.msn}
	if wire.SyndromeType(syn) != wire.AETHAck {
		rs.q.inc(NAKsSent)
	}
	rs.respQ = append(rs.respQ, respItem{f: f})
}

func (rs *recvSide) queueAtomicAck(psn wire.PSN, orig uint64, s *qpSnap) {
	f := rs.ackFields(wire.RCAtomicAcknowledge, psn, s)
	f.AETH = wire.AETHFields{Syndrome: wire.AETHAck | wire.AETHInvalidCredits, MSN: rs.msn}
	f.AtomicAckETH = orig
	rs.respQ = append(rs.respQ, respItem{f: f})
}

func (rs *recvSide) queueEmptyReadResponse(psn wire.PSN, s *qpSnap) {
	f := rs.ackFields(wire.RCRDMAReadResponseOnly, psn, s)
	f.AETH = wire.AETHFields{Syndrome: wire.AETHAck | wire.AETHInvalidCredits, MSN: rs.msn}
	rs.respQ = append(rs.respQ, respItem{f: f})
}

// pump sends queued responses in order, up to maxRespPackets.
func (rs *recvSide) pump(s *qpSnap) {
	sent := 0
	for len(rs.respQ) > 0 && sent < maxRespPackets {
		it := &rs.respQ[0]
		if !it.stream {
			rs.emit(&it.f, nil, 0, s)
			sent++
			rs.popResp()
			continue
		}
		for sent < maxRespPackets {
			mtu := uint64(s.mtu)
			n := min(mtu, it.length-it.off)
			lastPkt := it.psn == it.last
			var op wire.Opcode
			switch {
			case it.first && lastPkt:
				op = wire.RCRDMAReadResponseOnly
			case it.first:
				op = wire.RCRDMAReadResponseFirst
			case lastPkt:
				op = wire.RCRDMAReadResponseLast
			default:
				op = wire.RCRDMAReadResponseMiddle
			}
			f := rs.ackFields(op, it.psn, s)
			f.AETH = wire.AETHFields{Syndrome: wire.AETHAck | wire.AETHInvalidCredits, MSN: it.msn}
			rs.emit(&f, it, int(n), s)
			sent++
			it.off += n
			it.first = false
			if lastPkt {
				if it.hasRef {
					it.ref.Release()
				}
				rs.popResp()
				break
			}
			it.psn = it.psn.Add(1)
		}
	}
}

func (rs *recvSide) popResp() {
	copy(rs.respQ, rs.respQ[1:])
	rs.respQ[len(rs.respQ)-1] = respItem{}
	rs.respQ = rs.respQ[:len(rs.respQ)-1]
}

// emit builds one response packet; a stream item supplies n payload bytes
// from its MR at its current offset.
func (rs *recvSide) emit(f *wire.PacketFields, it *respItem, n int, s *qpSnap) {
	q := rs.q
	info := f.BTH.Opcode.Info()
	h := q.env.Out.Headroom()
	buf := q.env.Out.Alloc(wire.Len(info, n))
	pkt := buf[h:]
	f.EncodeHeaders(pkt, n)
	if n > 0 {
		it.ref.ReadAt(pkt[info.HdrLen:info.HdrLen+n], int64(it.off))
	}
	rs.tx = append(rs.tx, TxPacket{Buf: buf, Headroom: h, AV: &s.attr.AV, SrcPort: s.srcPort, SrcQPN: q.qpn})
	q.inc(SentPkts)
	if len(rs.tx) == cap(rs.tx) {
		rs.flushTx()
	}
}

func (rs *recvSide) flushTx() {
	if len(rs.tx) == 0 {
		return
	}
	rs.q.env.Out.Send(rs.tx)
	clear(rs.tx)
	rs.tx = rs.tx[:0]
}

// ucRequest: UC has no ACKs and no retries. A missing packet drops the rest
// of its message; the next FIRST or ONLY starts over.
func (rs *recvSide) ucRequest(s *qpSnap, p *RxPacket) {
	q := rs.q
	psn := wire.PSN(p.BTH.PSN())
	info := p.Op
	if rs.ucDrop || psn != rs.psn {
		if !info.Has(wire.FlagStart) {
			rs.ucDrop = true
			rs.abandon()
			q.inc(RcvdDropped)
			return
		}
		rs.ucDrop = false
		rs.abandon()
	}
	rs.psn = psn.Add(1)
	drop := func() {
		rs.ucDrop = true
		rs.abandon()
		q.inc(RcvdDropped)
	}
	if !rs.seqOK(info) || !accessOK(info, s.attr.AccessFlags) || !lengthOK(info, len(p.Payload), s.mtu) {
		drop()
		return
	}
	needWQE := info.Has(wire.FlagRecvWQE) && (info.Has(wire.FlagSend) || info.Has(wire.FlagEnd))
	if needWQE && !rs.popRecv() {
		drop()
		return
	}
	if needWQE && rs.cur.wr.Fault != WCSuccess {
		rs.wc = WC{Status: rs.cur.wr.Fault, Opcode: WCRecv}
		rs.completeRecv(&rs.wc)
		drop()
		return
	}
	switch {
	case info.Has(wire.FlagSend):
		c := &rs.cur
		n := uint64(len(p.Payload))
		if c.off+n > c.length || (n > 0 && !rs.scatterRecv(c.off, p.Payload)) {
			// IBA: a UC receive too small completes in error.
			rs.abandon()
			rs.wc = WC{Status: WCLocLenErr, Opcode: WCRecv}
			rs.completeRecv(&rs.wc)
			rs.ucDrop = !info.Has(wire.FlagEnd)
			return
		}
		c.off += n
		if !info.Has(wire.FlagEnd) {
			rs.inMsg = msgSend
			return
		}
		rs.inMsg = msgNone
		rs.wc = WC{Status: WCSuccess, Opcode: WCRecv, ByteLen: uint32(c.off), Solicited: p.BTH.SE()}
		if p.ImmDt != nil {
			rs.wc.Flags |= WCWithImm
			rs.wc.ImmData = p.ImmDt.Imm()
		}
		rs.completeRecv(&rs.wc)
	case info.Has(wire.FlagWrite):
		if info.Has(wire.FlagStart) {
			va, rkey, l := p.RETH.VA(), p.RETH.RKey(), uint64(p.RETH.Length())
			if l > 0 {
				r, err := q.env.Memory.Remote(q.pd, q.qpn, rkey, va, l, mem.RemoteWrite)
				if err != nil || l > MaxMessageSize {
					drop()
					return
				}
				rs.writeRef, rs.hasWrite = r, true
			}
			rs.writeOff, rs.writeLen = 0, l
		}
		n := uint64(len(p.Payload))
		rest := rs.writeLen - rs.writeOff
		if n > rest || (info.Has(wire.FlagEnd) && n != rest) {
			drop()
			return
		}
		if n > 0 {
			rs.writeRef.WriteAt(p.Payload, int64(rs.writeOff))
		}
		rs.writeOff += n
		if !info.Has(wire.FlagEnd) {
			rs.inMsg = msgWrite
			return
		}
		rs.inMsg = msgNone
		if rs.hasWrite {
			rs.writeRef.Release()
			rs.hasWrite = false
		}
		if p.ImmDt != nil {
			rs.wc = WC{Status: WCSuccess, Opcode: WCRecvRDMAWithImm, ByteLen: uint32(rs.writeLen), Flags: WCWithImm, ImmData: p.ImmDt.Imm(), Solicited: p.BTH.SE()}
			rs.completeRecv(&rs.wc)
		}
	default:
		drop()
	}
}

// GRHLen is the room a UD receive buffer keeps for the Global Route Header.
const GRHLen = 40

// udRequest: check the Q_Key, take a receive WQE, write the 40-byte GRH
// (IPv4: 20 zero bytes and the IPv4 header; IPv6: the IPv6 header), then
// the payload.
func (rs *recvSide) udRequest(s *qpSnap, p *RxPacket) {
	q := rs.q
	if p.DETH == nil || p.DETH.QKey() != s.attr.QKey || len(p.Payload) > s.mtu {
		q.inc(RcvdDropped)
		return
	}
	if !rs.popRecv() {
		q.inc(RcvdDropped) // UD has no RNR: no receive WQE, no message
		return
	}
	c := &rs.cur
	n := uint64(len(p.Payload))
	if c.wr.Fault != WCSuccess {
		rs.wc = WC{Status: c.wr.Fault, Opcode: WCRecv}
		rs.completeRecv(&rs.wc)
		return
	}
	if c.length < n+GRHLen {
		rs.wc = WC{Status: WCLocLenErr, Opcode: WCRecv}
		rs.completeRecv(&rs.wc)
		return
	}
	var grh [GRHLen]byte
	if len(p.IPHeader) == wire.IPv4HeaderLen {
		copy(grh[20:], p.IPHeader)
	} else {
		copy(grh[:], p.IPHeader)
	}
	if !rs.scatterRecv(0, grh[:]) || (n > 0 && !rs.scatterRecv(GRHLen, p.Payload)) {
		rs.wc = WC{Status: WCLocProtErr, Opcode: WCRecv}
		rs.completeRecv(&rs.wc)
		return
	}
	rs.psn = wire.PSN(p.BTH.PSN()).Add(1)
	rs.wc = WC{Status: WCSuccess, Opcode: WCRecv, ByteLen: uint32(n + GRHLen), Flags: WCWithGRH, SrcQP: p.DETH.SrcQP(), Solicited: p.BTH.SE()}
	if p.ImmDt != nil {
		rs.wc.Flags |= WCWithImm
		rs.wc.ImmData = p.ImmDt.Imm()
	}
	rs.completeRecv(&rs.wc)
}

// nakFor maps a memory-table error to the NAK the responder sends.
func nakFor(err error) uint8 {
	if syn, ok := mem.ClassOf(err).NAK(); ok {
		return syn
	}
	return wire.NakRemoteAccess
}

// streams counts READ responses queued or being sent.
func (rs *recvSide) streams() int {
	n := 0
	for i := range rs.respQ {
		if rs.respQ[i].stream {
			n++
		}
	}
	return n
}

// maxStreams bounds queued READ responses: a requester keeps at most
// max_dest_rd_atomic READs outstanding, and may have sent each once more
// while retrying; beyond that it is broken or hostile.
func maxStreams(s *qpSnap) int { return 2*int(s.attr.MaxDestRdAtomic) + 4 }
