package transport

import (
	"encoding/binary"

	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/transport/wire"
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

// needsRecvWQE: a receive WQE is taken at SEND FIRST/ONLY and at the end
// of a WRITE with immediate.
func needsRecvWQE(info *wire.OpInfo) bool {
	return info.Has(wire.FlagRecvWQE) && (info.Has(wire.FlagSend) || info.Has(wire.FlagEnd))
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
	needWQE := needsRecvWQE(info)
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
		if why := rs.placeSend(p); why != placed {
			rs.rcPlaceFailed(s, psn, why, nil)
			return
		}
	case info.Has(wire.FlagWrite):
		if why, err := rs.placeWrite(p); why != placed {
			rs.rcPlaceFailed(s, psn, why, err)
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
	rs.nextMSN()
	rs.psn = psn.Add(npkts)
	rs.queue(respItem{stream: true, ref: ref, hasRef: l > 0, psn: psn, last: res.last,
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
	rs.nextMSN()
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
	rs.nextMSN()
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
		rs.queue(respItem{stream: true, ref: ref, hasRef: l > 0, psn: psn, last: r.last,
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
