package transport

import (
	"time"

	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/transport/wire"
)

// RunSend does everything the send side has to do now: timers, new and
// retransmitted packets, local operations, completions. It returns when the
// side has to wait (for credits, window, ACKs or time) and the time at
// which it wants to run again (zero: only when something happens).
func (q *QP) RunSend() time.Time {
	ss := &q.snd
	s := ss.sync()
	defer ss.publish()
	switch s.attr.State {
	case StateErr:
		ss.flush()
		return time.Time{}
	case StateSQE:
		ss.flush()
		return time.Time{}
	case StateReset, StateInit, StateRTR:
		return time.Time{}
	}
	now := q.env.Clock.Now()
	ss.runTimers(s, now)
	budget := maxRunPackets
	for budget > 0 && q.State() != StateErr {
		sent, more := ss.transmit(s, budget)
		budget -= sent
		// A WQE waiting at the issue cursor (LOCAL_INV behind earlier
		// WQEs, a fence or the rd_atomic limit behind READ/atomic credits)
		// may be free to start once complete retires what it waited for:
		// go round again, nothing else would wake this side for it.
		if retired := ss.complete(); !more && retired == 0 {
			break
		}
	}
	ss.flushTx()
	if q.State() == StateErr || q.State() == StateSQE {
		ss.flush()
		return time.Time{}
	}
	if s.attr.State == StateSQD && ss.head == ss.issue && !ss.drained {
		ss.drained = true
		if s.attr.SQDrainNotify {
			q.event(EventSQDrained)
		}
	}
	if budget <= 0 {
		return now // more to send: yield, and run again at once
	}
	return ss.nextWake()
}

// transmit sends up to budget packets. more is false when it has to wait.
func (ss *sendSide) transmit(s *qpSnap, budget int) (sent int, more bool) {
	for sent < budget {
		if ss.net < ss.issue {
			w := ss.slot(ss.net)
			if w.state != wqeActive || ss.fullySent(w) {
				ss.net++
				continue
			}
			if !ss.sendNext(s, w) {
				return sent, false
			}
			sent++
			continue
		}
		if ss.issue == ss.tail || ss.stopIssue || s.attr.State == StateSQD || !ss.rnrWake.IsZero() {
			return sent, false
		}
		if !ss.start(s, ss.slot(ss.issue)) {
			return sent, false
		}
	}
	return sent, true
}

func (ss *sendSide) fullySent(w *swqe) bool {
	if w.sendWrite() {
		return w.sent >= w.npkts
	}
	return w.sent >= 1
}

// start begins the WQE at the issue cursor: a local operation executes
// here, once; a network WQE gets its PSNs. false means it must wait.
func (ss *sendSide) start(s *qpSnap, w *swqe) bool {
	q := ss.q
	if w.wr.Fault != WCSuccess {
		ss.finish(w, w.wr.Fault)
		ss.issue++
		ss.net = ss.issue
		return true
	}
	if w.wr.Flags&SendFence != 0 && ss.rdInFlight > 0 {
		return false // IBV_SEND_FENCE: earlier READ/ATOMIC must finish first
	}
	if isLocal(w.wr.Opcode) {
		if w.wr.Opcode == WRLocalInv && ss.head != ss.issue {
			return false // LIF: LOCAL_INV waits for every earlier WQE to complete
		}
		if w.executed {
			q.inc(LocalOpReplays) // cannot happen: the issue cursor never moves back
		} else {
			w.executed = true
			w.status = ss.execLocal(w)
			q.inc(LocalOpsExecuted)
		}
		ss.finish(w, w.status)
		ss.issue++
		ss.net = ss.issue
		return true
	}
	mtu := uint64(s.mtu)
	switch {
	case w.length > MaxMessageSize:
		ss.finish(w, WCLocLenErr)
	case isDatagram(q.typ) && w.length > mtu:
		ss.finish(w, WCLocLenErr) // a UD message must fit one packet
	}
	if w.state == wqeDone {
		ss.issue++
		ss.net = ss.issue
		return true
	}
	if isRdAtomic(w.wr.Opcode) {
		if s.attr.MaxRdAtomic == 0 {
			ss.finish(w, WCLocQPOpErr) // the QP allows no outstanding READ/atomic
			ss.issue++
			ss.net = ss.issue
			return true
		}
		if ss.rdInFlight >= int(s.attr.MaxRdAtomic) {
			return false
		}
	}
	if q.typ == QPTypeRC && ss.windowFull(ss.psn) {
		return false
	}
	if st := ss.resolve(w); st != WCSuccess {
		ss.finish(w, st)
		ss.issue++
		ss.net = ss.issue
		return true
	}
	npkts := uint32(1)
	if w.sendWrite() && w.length > mtu {
		npkts = uint32((w.length + mtu - 1) / mtu)
	}
	w.npkts = npkts
	w.npsn = npkts
	if w.wr.Opcode == WRRDMARead && w.length > mtu {
		w.npsn = uint32((w.length + mtu - 1) / mtu) // one PSN per response packet
	}
	w.firstPSN = ss.psn
	w.sent, w.rcvd = 0, 0
	w.state = wqeActive
	if isRdAtomic(w.wr.Opcode) {
		ss.rdInFlight++
		w.credit = true
	}
	if q.typ == QPTypeRC {
		ss.psn = ss.psn.Add(w.npsn)
	} else {
		ss.psn = ss.psn.Add(w.npkts)
	}
	ss.issue++
	return true
}

// resolve looks up the WQE's SGEs once for the whole message.
func (ss *sendSide) resolve(w *swqe) WCStatus {
	var access mem.Access
	switch w.wr.Opcode {
	case WRRDMARead, WRAtomicCmpAndSwp, WRAtomicFetchAdd:
		access = mem.LocalWrite // the result lands in local memory
	}
	var err error
	if w.refs, err = resolveSGL(ss.q.env.Memory, ss.q.pd, w.wr.SGL, access, w.refs); err != nil {
		ss.q.log.Debug("send SGE lookup failed", "wr_id", w.wr.ID, "err", err)
		return WCLocProtErr
	}
	return WCSuccess
}

func (ss *sendSide) execLocal(w *swqe) WCStatus {
	q := ss.q
	var err error
	switch w.wr.Opcode {
	case WRRegMR:
		r := w.wr.RegMR
		if err = q.env.Memory.FastReg(q.pd, r.Key, r.Pages, r.PageSize, r.IOVA, r.Length, r.Access); err != nil {
			q.log.Debug("REG_MR failed", "key", w.wr.RegMR.Key, "err", err)
			return WCLocQPOpErr
		}
	case WRLocalInv:
		if err = q.env.Memory.LocalInvalidate(q.pd, q.qpn, w.wr.ImmData); err != nil {
			q.log.Debug("LOCAL_INV failed", "key", w.wr.ImmData, "err", err)
			return WCLocQPOpErr
		}
	case WRBindMW:
		b := w.wr.Bind
		if err = q.env.Memory.BindMWWR(q.pd, q.qpn, b.MWKey, b.MRKey, b.Addr, b.Length, b.Access); err != nil {
			q.log.Debug("BIND_MW failed", "mw", w.wr.Bind.MWKey, "mr", w.wr.Bind.MRKey, "err", err)
			return WCMWBindErr
		}
	}
	return WCSuccess
}

// sendNext sends the WQE's next request packet. false: the PSN window is
// full, or a probe is out and waits for its answer.
func (ss *sendSide) sendNext(s *qpSnap, w *swqe) bool {
	rc := ss.q.typ == QPTypeRC
	psn, off, n := ss.nextPacket(s, w)
	if rc && ss.windowFull(psn) {
		return false
	}
	if ss.probe && ss.probeSent {
		return false
	}
	last := w.sent+1 >= w.npkts || !w.sendWrite()
	var f wire.PacketFields
	ss.requestHeaders(&f, s, w, psn, off, last)
	if rc {
		ss.requestAck(&f, w, psn, last)
	}
	ss.queueRequest(&f, s, w, off, n)
	if rc {
		ss.rcSent(s, w, psn)
	}
	w.sent++
	if !rc && ss.fullySent(w) {
		ss.finish(w, WCSuccess) // UC and UD complete once sent
	}
	return true
}

// nextPacket says where the WQE's next request packet is: its PSN, the
// message offset it starts at and how many payload bytes it carries.
func (ss *sendSide) nextPacket(s *qpSnap, w *swqe) (psn wire.PSN, off, n uint64) {
	mtu := uint64(s.mtu)
	switch {
	case w.sendWrite():
		psn = w.firstPSN.Add(w.sent)
		off = uint64(w.sent) * mtu
		n = min(mtu, w.length-off)
	case w.wr.Opcode == WRRDMARead:
		psn = w.firstPSN.Add(w.rcvd) // a retried READ asks only for what is missing
		off = uint64(w.rcvd) * mtu
	default:
		psn = w.firstPSN
		if w.wr.Opcode == WRAtomicWrite {
			n = 8
		}
	}
	return psn, off, n
}

// requestHeaders fills the request packet's headers: BTH, and the RETH,
// AtomicETH, FETH, immediate data, IETH or DETH its opcode carries.
func (ss *sendSide) requestHeaders(f *wire.PacketFields, s *qpSnap, w *swqe, psn wire.PSN, off uint64, last bool) {
	f.BTH.PKey = wire.DefaultPKey
	f.BTH.PSN = uint32(psn)
	f.BTH.DestQP = s.attr.DestQPN
	f.BTH.Opcode = ss.opcode(w, last)
	switch w.wr.Opcode {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		if w.sent == 0 {
			f.RETH = wire.RETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, Length: uint32(w.length)}
		}
		f.Imm = w.wr.ImmData
		f.BTH.SE = last && w.wr.Opcode == WRRDMAWriteWithImm && w.wr.Flags&SendSolicited != 0
	case WRSend, WRSendWithImm, WRSendWithInv:
		f.Imm = w.wr.ImmData
		f.IETH = w.wr.ImmData
		f.BTH.SE = last && w.wr.Flags&SendSolicited != 0
	case WRRDMARead:
		f.RETH = wire.RETHFields{VA: w.wr.RemoteAddr + off, RKey: w.wr.RKey, Length: uint32(w.length - off)}
	case WRAtomicCmpAndSwp:
		f.AtomicETH = wire.AtomicETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, SwapAdd: w.wr.Swap, Compare: w.wr.CompareAdd}
	case WRAtomicFetchAdd:
		f.AtomicETH = wire.AtomicETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, SwapAdd: w.wr.CompareAdd}
	case WRAtomicWrite:
		f.RETH = wire.RETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, Length: 8}
	case WRFlush:
		f.RETH = wire.RETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, Length: uint32(w.length)}
		f.FETH = wire.FETHFields{Selectivity: w.wr.FlushType, Placement: w.wr.FlushLevel}
	}
	if isDatagram(ss.q.typ) {
		ss.datagramHeaders(f, s, w)
	}
}

// datagramHeaders addresses a UD or GSI packet: destination QP and DETH.
func (ss *sendSide) datagramHeaders(f *wire.PacketFields, s *qpSnap, w *swqe) {
	q := ss.q
	f.BTH.DestQP = w.wr.RemoteQPN
	qkey := w.wr.RemoteQKey
	if qkey&0x80000000 != 0 {
		qkey = s.attr.QKey // IBA: a Q_Key with the high bit set means the QP's own
	}
	if q.typ == QPTypeGSI {
		qkey = wire.GSIQKey
	}
	f.DETH = wire.DETHFields{QKey: qkey, SrcQP: q.qpn}
}

// requestAck sets AckReq on an RC request: on a message's last packet, at
// least every maxPktsPerAck packets or half a window (kernel rxe's 64 of
// its 128 PSNs), on the packet that fills the window (without it a window
// shorter than a message would wait for a probe or the timer to open
// again), and on a probe, which also records the PSNs it asks for.
func (ss *sendSide) requestAck(f *wire.PacketFields, w *swqe, psn wire.PSN, last bool) {
	ss.noAck++
	every := min(maxPktsPerAck, max(int(ss.window()/2), 1))
	if last || ss.noAck >= every || ss.windowFull(psn.Add(1)) || ss.probe {
		f.BTH.AckReq = true
		ss.noAck = 0
	}
	if ss.probe {
		ss.probeSent = true
		ss.probeEnd = psn.Add(1)
		if w.wr.Opcode == WRRDMARead {
			ss.probeEnd = w.lastPSN().Add(1) // one request, every missing response
		}
	}
}

// queueRequest encodes the packet with n payload bytes from message offset
// off and queues it, handing the batch to the link when it is full.
func (ss *sendSide) queueRequest(f *wire.PacketFields, s *qpSnap, w *swqe, off, n uint64) {
	q := ss.q
	info := f.BTH.Opcode.Info()
	h := q.env.Out.Headroom()
	buf := q.env.Out.Alloc(wire.Len(info, int(n)))
	pkt := buf[h:]
	f.EncodeHeaders(pkt, int(n))
	if n > 0 {
		ss.gather(w, off, pkt[info.HdrLen:info.HdrLen+int(n)])
	}
	av := &s.attr.AV
	if isDatagram(q.typ) {
		av = w.wr.AH
	}
	ss.tx = append(ss.tx, TxPacket{Buf: buf, Headroom: h, AV: av, SrcPort: s.srcPort, SrcQPN: q.qpn})
	if len(ss.tx) >= txBatch {
		ss.flushTx()
	}
	q.inc(SentPkts)
}

// rcSent accounts an RC request packet that was queued: retransmissions
// are counted, hi moves past what it asks for, and the retransmit deadline
// learns of it.
func (ss *sendSide) rcSent(s *qpSnap, w *swqe, psn wire.PSN) {
	q := ss.q
	if psn.Before(ss.hi) {
		q.inc(RetransmittedPkts)
		ss.checkChanged(w)
	}
	end := psn.Add(1)
	if w.wr.Opcode == WRRDMARead {
		end = w.firstPSN.Add(w.npsn)
	}
	wasIdle := !ss.outstanding()
	if !psn.Before(ss.hi) && !ss.rttOn {
		ss.rttStart(psn, ss.q.env.Clock.Now())
	}
	if end.After(ss.hi) {
		ss.hi = end
	}
	ss.timerPacketSent(s, wasIdle)
}

// opcode picks the wire opcode for the WQE's next packet.
func (ss *sendSide) opcode(w *swqe, last bool) wire.Opcode {
	first := w.sent == 0
	t := wire.Opcode(wireTransport(ss.q.typ))
	if isDatagram(ss.q.typ) {
		if w.wr.Opcode == WRSendWithImm {
			return wire.UDSendOnlyWithImmediate
		}
		return wire.UDSendOnly
	}
	switch w.wr.Opcode {
	case WRSend, WRSendWithImm, WRSendWithInv:
		switch {
		case first && last:
			switch w.wr.Opcode {
			case WRSendWithImm:
				return t + wire.RCSendOnlyWithImmediate
			case WRSendWithInv:
				return wire.RCSendOnlyWithInvalidate
			}
			return t + wire.RCSendOnly
		case first:
			return t + wire.RCSendFirst
		case last:
			switch w.wr.Opcode {
			case WRSendWithImm:
				return t + wire.RCSendLastWithImmediate
			case WRSendWithInv:
				return wire.RCSendLastWithInvalidate
			}
			return t + wire.RCSendLast
		}
		return t + wire.RCSendMiddle
	case WRRDMAWrite, WRRDMAWriteWithImm:
		imm := w.wr.Opcode == WRRDMAWriteWithImm
		switch {
		case first && last:
			if imm {
				return t + wire.RCRDMAWriteOnlyWithImm
			}
			return t + wire.RCRDMAWriteOnly
		case first:
			return t + wire.RCRDMAWriteFirst
		case last:
			if imm {
				return t + wire.RCRDMAWriteLastWithImm
			}
			return t + wire.RCRDMAWriteLast
		}
		return t + wire.RCRDMAWriteMiddle
	case WRRDMARead:
		return wire.RCRDMAReadRequest
	case WRAtomicCmpAndSwp:
		return wire.RCCompareSwap
	case WRAtomicFetchAdd:
		return wire.RCFetchAdd
	case WRAtomicWrite:
		return wire.RCAtomicWrite
	case WRFlush:
		return wire.RCFlush
	}
	return wire.RCSendOnly
}

// gather copies message bytes [off, off+len(dst)) from the WQE's SGEs or
// inline data into dst.
func (ss *sendSide) gather(w *swqe, off uint64, dst []byte) {
	if w.wr.Flags&SendInline != 0 {
		copy(dst, w.wr.Inline[off:])
		return
	}
	copySGL(w.wr.SGL, w.refs, off, dst, false)
}

func (ss *sendSide) flushTx() {
	if len(ss.tx) > 0 {
		ss.q.env.Out.Send(ss.tx)
		clear(ss.tx)
		ss.tx = ss.tx[:0]
	}
	ss.timerBatchLeft()
}
