package transport

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/transport/wire"
)

// Implementation limits shared with kernel rxe (rxe_param.h).
const (
	maxUnackedPSNs = 128     // RXE_MAX_UNACKED_PSNS
	maxPktsPerAck  = 64      // RXE_MAX_PKT_PER_ACK: AckReq at least this often
	MaxMessageSize = 1 << 31 // max_msg_sz
	txBatch        = 64      // packets handed to Output.Send at once
	maxRunPackets  = 1024    // packets one RunSend sends before it yields
)

type wqeState uint8

const (
	wqePosted wqeState = iota // not started
	wqeActive                 // network WQE with PSNs assigned
	wqeDone                   // finished (status says how), waiting for in-order completion
)

// swqe is a send WQE as the send owner keeps it. Only the send goroutine
// touches it; the client's copy in its ring is never read again.
type swqe struct {
	wr       SendWR
	sglBuf   []SGE  // backing of wr.SGL, preallocated per slot
	inline   []byte // backing of wr.Inline, preallocated per slot
	state    wqeState
	status   WCStatus
	length   uint64
	firstPSN wire.PSN
	npsn     uint32 // PSNs the WQE consumes
	npkts    uint32 // request packets (SEND/WRITE: one per MTU; others: 1)
	sent     uint32 // request packets sent in the current pass
	rcvd     uint32 // READ: response packets received in order
	refs     []mem.Ref
	executed bool // local op ran
	credit   bool // holds an initiator-depth (rd_atomic) credit
	warned   bool // mr_changed_under_unacked_wqe counted
}

func (w *swqe) sendWrite() bool {
	switch w.wr.Opcode {
	case WRSend, WRSendWithImm, WRSendWithInv, WRRDMAWrite, WRRDMAWriteWithImm:
		return true
	}
	return false
}

func (w *swqe) lastPSN() wire.PSN { return w.firstPSN.Add(w.npsn - 1) }

// sendSide is the requester and the completer of one QP, with their
// timers. The SQ has three cursors: head (oldest WQE not yet completed),
// issue (next WQE to start: local operations execute here, exactly once),
// and net (the network cursor: the WQE whose packets go out next). A retry
// rewinds only net, and net skips local operations, so nothing local ever
// runs twice.
type sendSide struct {
	q    *QP
	ring []swqe
	mask uint64

	head, issue, net, tail uint64

	lastGen, lastResets uint64
	state               QPState

	psn  wire.PSN // next PSN to assign (req.psn)
	hi   wire.PSN // one past the highest PSN sent
	comp wire.PSN // oldest unacknowledged PSN (comp.psn)

	rdInFlight int
	noAck      int // packets sent without AckReq
	retryLeft  uint8
	rnrLeft    uint8

	// The retransmit deadline belongs to the oldest unacknowledged PSN:
	// armed when a packet leaves with nothing outstanding, pushed out by
	// every acknowledgement that makes progress, stopped when nothing is
	// outstanding. Zero means stopped.
	deadline time.Time
	// armAtFlush: a packet that starts the deadline is queued; it is armed
	// when the batch has been handed to the link, from a fresh clock
	// reading, so that time the owner spent building (or descheduled)
	// before the frame left is never taken out of the peer's timeout.
	armAtFlush *qpSnap
	rnrWake    time.Time // waiting out an RNR NAK until then; zero: not waiting
	rnrPSN     wire.PSN

	inRetry   bool // a retry from retryFrom started and no progress since
	retryFrom wire.PSN
	// probe: after a retransmit timeout only the oldest unacknowledged
	// packet goes out again, with AckReq, and the rest of the window waits
	// for a response that makes progress (probeSent: it has left). A peer
	// that is slow rather than lossy then gets one packet per timeout, not
	// the whole window again on top of its backlog (go-back-N after every
	// timeout is how a slow responder is driven into collapse).
	probe, probeSent bool
	probeEnd         wire.PSN // the PSN after those the probe asked for

	stopIssue bool // an errored WQE is waiting for its in-order completion
	drained   bool // SQ drained event sent for this SQD

	tx []TxPacket
	wc WC
}

func (ss *sendSide) init(q *QP) {
	ss.q = q
	n := uint64(1)
	for n < uint64(q.cap.MaxSendWR) {
		n <<= 1
	}
	if q.cap.MaxSendWR == 0 {
		n = 1
	}
	ss.ring = make([]swqe, n)
	ss.mask = n - 1
	sge := make([]SGE, int(n)*int(max(q.cap.MaxSendSGE, 1)))
	for i := range ss.ring {
		k := int(max(q.cap.MaxSendSGE, 1))
		ss.ring[i].sglBuf = sge[i*k : (i+1)*k : (i+1)*k]
	}
	if q.cap.MaxInlineData > 0 {
		in := make([]byte, int(n)*int(q.cap.MaxInlineData))
		k := int(q.cap.MaxInlineData)
		for i := range ss.ring {
			ss.ring[i].inline = in[i*k : (i+1)*k : (i+1)*k]
		}
	}
	ss.tx = make([]TxPacket, 0, txBatch)
	ss.state = StateReset
}

func (ss *sendSide) slot(i uint64) *swqe { return &ss.ring[i&ss.mask] }

// sync picks up the latest attribute snapshot and applies the state
// transitions the send side must act on.
func (ss *sendSide) sync() *qpSnap {
	s := ss.q.snap.Load()
	if s.gen == ss.lastGen {
		return s
	}
	ss.lastGen = s.gen
	if s.resets != ss.lastResets {
		ss.lastResets = s.resets
		ss.reset()
	}
	st := s.attr.State
	if ss.state < StateRTS && (st == StateRTS || st == StateSQD) {
		ss.psn = wire.PSN(s.attr.SQPSN)
		ss.hi, ss.comp = ss.psn, ss.psn
		ss.retryLeft, ss.rnrLeft = s.attr.RetryCnt, s.attr.RNRRetry
	}
	if st != StateSQD {
		ss.drained = false
	}
	ss.state = st
	return s
}

// reset discards every WQE without completions (modify to RESET).
func (ss *sendSide) reset() {
	for i := ss.head; i < ss.tail; i++ {
		ss.releaseRefs(ss.slot(i))
	}
	ss.head, ss.issue, ss.net, ss.tail = 0, 0, 0, 0
	ss.rdInFlight, ss.noAck = 0, 0
	ss.deadline, ss.rnrWake, ss.armAtFlush = time.Time{}, time.Time{}, nil
	ss.inRetry, ss.stopIssue, ss.drained = false, false, false
	ss.probe, ss.probeSent = false, false
	ss.state = StateReset
}

// PostSend queues a send work request (ibv_post_send). It is called by the
// send owner; wr is copied. Errors are what ibv_post_send returns: the WR is
// not queued. A QP in ERR accepts the WR and flushes it.
func (q *QP) PostSend(wr *SendWR) error {
	ss := &q.snd
	s := ss.sync()
	switch s.attr.State {
	case StateReset, StateInit, StateRTR:
		return fmt.Errorf("%w: post_send in %v", ErrState, s.attr.State)
	}
	if wr.Fault == WCSuccess {
		if err := q.checkSendWR(wr); err != nil {
			return err
		}
	}
	if ss.tail-ss.head == uint64(len(ss.ring)) || ss.tail-ss.head >= uint64(max(q.cap.MaxSendWR, 1)) {
		return ErrFull
	}
	w := ss.slot(ss.tail)
	sglBuf, inline := w.sglBuf, w.inline
	*w = swqe{wr: *wr, sglBuf: sglBuf, inline: inline}
	if len(wr.SGL) > cap(sglBuf) {
		w.wr.SGL = sglBuf[:0] // only a faulted WR gets here; it never touches memory
	} else {
		w.wr.SGL = append(sglBuf[:0], wr.SGL...)
	}
	if wr.Flags&SendInline != 0 && len(wr.Inline) <= cap(inline) {
		w.wr.Inline = append(inline[:0], wr.Inline...)
		w.wr.SGL = w.wr.SGL[:0]
	} else {
		w.wr.Inline = nil
	}
	w.length = w.wr.length()
	ss.tail++
	return nil
}

func (q *QP) checkSendWR(wr *SendWR) error {
	op := wr.Opcode
	ok := false
	switch q.typ {
	case QPTypeRC:
		switch op {
		case WRRDMAWrite, WRRDMAWriteWithImm, WRSend, WRSendWithImm, WRRDMARead, WRAtomicCmpAndSwp,
			WRAtomicFetchAdd, WRLocalInv, WRBindMW, WRSendWithInv, WRRegMR, WRFlush, WRAtomicWrite:
			ok = true
		}
	case QPTypeUC:
		switch op {
		case WRRDMAWrite, WRRDMAWriteWithImm, WRSend, WRSendWithImm, WRLocalInv, WRBindMW, WRRegMR:
			ok = true
		}
	case QPTypeUD, QPTypeGSI:
		ok = op == WRSend || op == WRSendWithImm
	}
	if !ok {
		return fmt.Errorf("%w: %v on a %v QP", ErrInvalid, op, q.typ)
	}
	if uint32(len(wr.SGL)) > q.cap.MaxSendSGE {
		return fmt.Errorf("%w: %d SGEs, max_send_sge is %d", ErrInvalid, len(wr.SGL), q.cap.MaxSendSGE)
	}
	if wr.Flags&SendInline != 0 {
		switch op {
		case WRSend, WRSendWithImm, WRSendWithInv, WRRDMAWrite, WRRDMAWriteWithImm, WRAtomicWrite:
		default:
			return fmt.Errorf("%w: inline data on %v", ErrInvalid, op)
		}
		if uint32(len(wr.Inline)) > q.cap.MaxInlineData {
			return fmt.Errorf("%w: %d bytes inline, max_inline_data is %d", ErrInvalid, len(wr.Inline), q.cap.MaxInlineData)
		}
	}
	switch op {
	case WRAtomicCmpAndSwp, WRAtomicFetchAdd:
		if wr.length() != 8 {
			return fmt.Errorf("%w: atomic needs an 8-byte local buffer, got %d", ErrInvalid, wr.length())
		}
	case WRAtomicWrite:
		if wr.length() != 8 {
			return fmt.Errorf("%w: ATOMIC_WRITE carries exactly 8 bytes, got %d", ErrInvalid, wr.length())
		}
	case WRRegMR:
		if wr.RegMR == nil {
			return fmt.Errorf("%w: REG_MR without registration", ErrInvalid)
		}
	case WRBindMW:
		if wr.Bind == nil {
			return fmt.Errorf("%w: BIND_MW without binding", ErrInvalid)
		}
	}
	if q.typ.datagram() && wr.AH == nil {
		return fmt.Errorf("%w: UD send without address handle", ErrInvalid)
	}
	return nil
}

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
	if !ss.rnrWake.IsZero() && !now.Before(ss.rnrWake) {
		ss.rnrWake = time.Time{}
		ss.retry(ss.rnrPSN)
		ss.armAtFlush = s // as after a timeout: from when the resend has left
	}
	if !ss.deadline.IsZero() && !now.Before(ss.deadline) && ss.rnrWake.IsZero() {
		ss.timeout(s)
	}
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

func (ss *sendSide) nextWake() time.Time {
	switch {
	case ss.rnrWake.IsZero():
		return ss.deadline
	case ss.deadline.IsZero() || ss.rnrWake.Before(ss.deadline):
		return ss.rnrWake
	}
	return ss.deadline
}

func (ss *sendSide) publish() {
	q := ss.q
	q.pubSendPSN.Store(uint32(ss.psn))
	q.pubCompPSN.Store(uint32(ss.comp))
	q.pubOutstanding.Store(int64(ss.tail - ss.head))
}

// outstanding reports whether sent PSNs wait for acknowledgement.
func (ss *sendSide) outstanding() bool { return ss.comp != ss.hi }

func (ss *sendSide) armTimer(s *qpSnap, now time.Time) {
	if ss.q.typ != QPTypeRC || !ss.outstanding() || !ss.rnrWake.IsZero() {
		ss.deadline = time.Time{}
		return
	}
	if d := LocalAckTimeout(s.attr.Timeout); d > 0 {
		ss.deadline = now.Add(d)
	} else {
		ss.deadline = time.Time{}
	}
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
	if w.wr.Opcode.local() {
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
	case q.typ.datagram() && w.length > mtu:
		ss.finish(w, WCLocLenErr) // a UD message must fit one packet
	}
	if w.state == wqeDone {
		ss.issue++
		ss.net = ss.issue
		return true
	}
	if w.wr.Opcode.rdAtomic() {
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
	if q.typ == QPTypeRC && ss.psn.Diff(ss.comp) >= maxUnackedPSNs {
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
	if w.wr.Opcode.rdAtomic() {
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

func (ss *sendSide) releaseRefs(w *swqe) { w.refs = releaseRefs(w.refs) }

// finish marks a WQE done; its completion goes out in SQ order.
func (ss *sendSide) finish(w *swqe, st WCStatus) {
	w.state = wqeDone
	w.status = st
	if st != WCSuccess {
		ss.stopIssue = true
	}
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
// full.
func (ss *sendSide) sendNext(s *qpSnap, w *swqe) bool {
	q := ss.q
	mtu := uint64(s.mtu)
	var psn wire.PSN
	var off, n uint64
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
	if q.typ == QPTypeRC && psn.Diff(ss.comp) >= maxUnackedPSNs {
		return false
	}
	if ss.probe && ss.probeSent {
		return false
	}
	last := w.sent+1 >= w.npkts || !w.sendWrite()
	f := wire.PacketFields{}
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
	if q.typ.datagram() {
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
	if q.typ == QPTypeRC {
		ss.noAck++
		if last || ss.noAck >= maxPktsPerAck || ss.probe {
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
	info := f.BTH.Opcode.Info()
	h := q.env.Out.Headroom()
	buf := q.env.Out.Alloc(wire.Len(info, int(n)))
	pkt := buf[h:]
	f.EncodeHeaders(pkt, int(n))
	if n > 0 {
		ss.gather(w, off, pkt[info.HdrLen:info.HdrLen+int(n)])
	}
	av := &s.attr.AV
	if q.typ.datagram() {
		av = w.wr.AH
	}
	ss.tx = append(ss.tx, TxPacket{Buf: buf, Headroom: h, AV: av, SrcPort: s.srcPort, SrcQPN: q.qpn})
	if len(ss.tx) == cap(ss.tx) {
		ss.flushTx()
	}
	q.inc(SentPkts)
	if q.typ == QPTypeRC {
		if psn.Before(ss.hi) {
			q.inc(RetransmittedPkts)
			ss.checkChanged(w)
		}
		end := psn.Add(1)
		if w.wr.Opcode == WRRDMARead {
			end = w.firstPSN.Add(w.npsn)
		}
		wasIdle := !ss.outstanding()
		if end.After(ss.hi) {
			ss.hi = end
		}
		if wasIdle || ss.deadline.IsZero() {
			ss.deadline = time.Time{}
			ss.armAtFlush = s
		}
	}
	w.sent++
	if q.typ != QPTypeRC && ss.fullySent(w) {
		ss.finish(w, WCSuccess) // UC and UD complete once sent
	}
	return true
}

// opcode picks the wire opcode for the WQE's next packet.
func (ss *sendSide) opcode(w *swqe, last bool) wire.Opcode {
	first := w.sent == 0
	t := wire.Opcode(ss.q.typ.wireTransport())
	if ss.q.typ.datagram() {
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

// scatter copies src into the WQE's SGEs at message offset off (READ
// responses, atomic results).
func (ss *sendSide) scatter(w *swqe, off uint64, src []byte) {
	copySGL(w.wr.SGL, w.refs, off, src, true)
}

// checkChanged counts, once per WQE, a consumer that changed an MR or MW
// the unacknowledged WQE uses (a retransmission would send what is there now).
func (ss *sendSide) checkChanged(w *swqe) {
	if w.warned {
		return
	}
	for i := range w.refs {
		if w.refs[i].Changed() {
			w.warned = true
			ss.q.inc(MRChangedUnderUnacked)
			ss.q.log.Warn("MR changed while a WQE using it is unacknowledged",
				"wr_id", w.wr.ID, "opcode", w.wr.Opcode, "lkey", w.wr.SGL[i].LKey, "rkey", w.wr.RKey)
			return
		}
	}
}

func (ss *sendSide) flushTx() {
	if len(ss.tx) > 0 {
		ss.q.env.Out.Send(ss.tx)
		clear(ss.tx)
		ss.tx = ss.tx[:0]
	}
	if s := ss.armAtFlush; s != nil {
		ss.armAtFlush = nil
		ss.armTimer(s, ss.q.env.Clock.Now())
	}
}

// retry rewinds the network cursor to the WQE holding PSN from. WRITE and
// SEND resume at that packet, a READ asks again for what it has not
// received, and local operations are skipped: they already ran.
func (ss *sendSide) retry(from wire.PSN) {
	ss.probe, ss.probeSent = false, false
	ss.inRetry = true
	ss.retryFrom = from
	ss.noAck = 0
	found := false
	for i := ss.head; i < ss.issue; i++ {
		w := ss.slot(i)
		if w.state != wqeActive {
			continue
		}
		if w.lastPSN().Before(from) {
			continue
		}
		if !found {
			found = true
			ss.net = i
		}
		w.sent = 0
		if w.sendWrite() && !from.Before(w.firstPSN) {
			w.sent = uint32(from.Diff(w.firstPSN))
		}
	}
	if !found {
		ss.net = ss.issue
	}
}

// timeout handles an expired retransmit deadline.
func (ss *sendSide) timeout(s *qpSnap) {
	q := ss.q
	ss.deadline = time.Time{}
	if !ss.outstanding() {
		return
	}
	q.inc(RetransmitTimeouts)
	if ss.retryLeft == 0 {
		q.inc(RetryExceededErr)
		if w := ss.oldestActive(); w != nil {
			ss.finish(w, WCRetryExcErr)
		}
		return
	}
	ss.retryLeft--
	q.inc(CompleterRetryErr)
	ss.retry(ss.comp)
	ss.probe = q.typ == QPTypeRC
	ss.armAtFlush = s // restarted when the retransmission has left
}

// oldestActive is the oldest network WQE still waiting for its response.
func (ss *sendSide) oldestActive() *swqe {
	for i := ss.head; i < ss.issue; i++ {
		if w := ss.slot(i); w.state == wqeActive {
			return w
		}
	}
	return nil
}

// complete delivers completions in SQ order and returns how many WQEs it
// retired.
func (ss *sendSide) complete() (retired int) {
	q := ss.q
	for ss.head < ss.issue {
		w := ss.slot(ss.head)
		if w.state != wqeDone {
			return retired
		}
		if w.credit {
			ss.rdInFlight--
			w.credit = false
		}
		if w.status == WCSuccess && len(w.refs) > 0 {
			ss.checkChanged(w)
		}
		ss.releaseRefs(w)
		ss.head++
		retired++
		q.retiredSend()
		if q.sigAll || w.wr.Flags&SendSignaled != 0 || w.status != WCSuccess {
			ss.wc = WC{WRID: w.wr.ID, Status: w.status, Opcode: wcOpcode(w.wr.Opcode), ByteLen: uint32(w.length), QPN: q.qpn}
			if !q.sendCQ.Push(&ss.wc) {
				q.fatal(EventQPFatal, "send CQ overflow")
				return retired
			}
		}
		if w.status != WCSuccess {
			q.inc(SendErr)
			if q.typ == QPTypeRC {
				q.fatal(EventQPFatal, fmt.Sprintf("send WQE %v completed with %v", w.wr.Opcode, w.status))
			} else {
				q.sendQueueError(fmt.Sprintf("send WQE %v completed with %v", w.wr.Opcode, w.status))
			}
			return retired
		}
	}
	return retired
}

// flush completes every remaining WQE with WR_FLUSH_ERR.
func (ss *sendSide) flush() {
	q := ss.q
	for ss.head < ss.tail {
		w := ss.slot(ss.head)
		ss.releaseRefs(w)
		ss.head++
		q.retiredSend()
		ss.wc = WC{WRID: w.wr.ID, Status: WCWRFlushErr, Opcode: wcOpcode(w.wr.Opcode), QPN: q.qpn}
		q.sendCQ.Push(&ss.wc)
	}
	ss.issue, ss.net = ss.tail, ss.tail
	ss.rdInFlight = 0
	ss.deadline, ss.rnrWake, ss.armAtFlush = time.Time{}, time.Time{}, nil
	ss.stopIssue = false
	ss.comp = ss.hi
}

// HandleResponse processes an ACK, NAK, read response or atomic ACK. It is
// called by the send owner, which calls RunSend afterwards.
func (q *QP) HandleResponse(p *RxPacket) {
	ss := &q.snd
	s := ss.sync()
	if q.typ != QPTypeRC || (s.attr.State != StateRTS && s.attr.State != StateSQD) {
		q.inc(RcvdDropped)
		return
	}
	q.inc(RcvdPkts)
	now := q.env.Clock.Now()
	psn := wire.PSN(p.BTH.PSN())
	if psn.Before(ss.comp) || !psn.Before(ss.hi) {
		return // a duplicate, or a response to nothing we sent
	}
	op := p.BTH.Opcode()
	progress := false
	rnr := false
	// Everything before psn is acknowledged: SEND/WRITE WQEs that end
	// before it are complete (coalesced ACKs); a READ or atomic that ends
	// before it without its response lost that response.
	for {
		w := ss.oldestActive()
		if w == nil || !w.lastPSN().Before(psn) {
			break
		}
		// A SEND/WRITE is complete once a later PSN is acknowledged, even
		// while a resend of it is under way: every PSN before hi was sent.
		if !w.sendWrite() {
			ss.lostResponse(s, w, now)
			ss.after(s, now, progress, rnr)
			return
		}
		ss.finish(w, WCSuccess)
		progress = true
	}
	advanced := progress
	w := ss.oldestActive()
	// PSNs before psn inside a READ count as acknowledged only as far as
	// its responses have arrived, inside an atomic not at all.
	limit := psn
	if w != nil && !psn.Before(w.firstPSN) && !w.sendWrite() {
		limit = w.firstPSN.Add(w.rcvd)
	}
	if limit.After(ss.comp) {
		ss.comp = limit
		progress, advanced = true, true
	}
	if w == nil || psn.Before(w.firstPSN) {
		ss.after(s, now, progress, rnr)
		return
	}
	switch op {
	case wire.RCAcknowledge:
		syn := p.AETH.Syndrome()
		switch wire.SyndromeType(syn) {
		case wire.AETHAck:
			if !w.sendWrite() {
				break // a plain ACK inside a READ/atomic's PSNs answers nothing
			}
			ss.comp = psn.Add(1)
			progress = true
			if psn == w.lastPSN() { // also mid-resend: the responder has it all
				ss.finish(w, WCSuccess)
			}
		case wire.AETHRNRNak:
			q.inc(RcvdRNRErr)
			rnr = true
			if s.attr.RNRRetry != 7 {
				if ss.rnrLeft == 0 {
					q.inc(RetryRNRExceededErr)
					ss.finish(w, WCRNRRetryExcErr)
					break
				}
				ss.rnrLeft--
			}
			ss.rnrWake = now.Add(RNRTimer(wire.SyndromeValue(syn)))
			ss.rnrPSN = psn
			ss.deadline = time.Time{}
		case wire.AETHNak:
			switch syn {
			case wire.NakPSNSeqError:
				q.inc(RcvdSeqErr)
				if !ss.rnrWake.IsZero() || (ss.inRetry && ss.retryFrom == psn) {
					break // already waiting out an RNR, or already resending from there
				}
				if advanced {
					ss.retryLeft = s.attr.RetryCnt // forward progress resets the count
				}
				if ss.retryLeft == 0 {
					q.inc(RetryExceededErr)
					ss.finish(w, WCRetryExcErr)
					break
				}
				ss.retryLeft--
				q.inc(CompleterRetryErr)
				ss.retry(psn)
				progress = false
				ss.armTimer(s, now)
			case wire.NakInvalidRequest:
				ss.finish(w, WCRemInvReqErr)
			case wire.NakRemoteAccess:
				ss.finish(w, WCRemAccessErr)
			default:
				ss.finish(w, WCRemOpErr)
			}
		}
	case wire.RCAtomicAcknowledge:
		if w.wr.Opcode != WRAtomicCmpAndSwp && w.wr.Opcode != WRAtomicFetchAdd || psn != w.firstPSN {
			ss.finish(w, WCBadRespErr)
			break
		}
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], p.AtomicAckETH.Orig()) // host order, as rxe stores it
		ss.scatter(w, 0, b[:])
		ss.comp = psn.Add(1)
		progress = true
		ss.finish(w, WCSuccess)
	case wire.RCRDMAReadResponseFirst, wire.RCRDMAReadResponseMiddle, wire.RCRDMAReadResponseLast, wire.RCRDMAReadResponseOnly:
		progress = ss.readResponse(s, w, p, psn, now) || progress
	default:
		q.inc(RcvdDropped)
	}
	ss.after(s, now, progress, rnr)
}

// readResponse takes one RDMA READ response packet (also the zero-length
// answer to ATOMIC_WRITE and FLUSH).
func (ss *sendSide) readResponse(s *qpSnap, w *swqe, p *RxPacket, psn wire.PSN, now time.Time) bool {
	op := p.BTH.Opcode()
	if w.wr.Opcode == WRAtomicWrite || w.wr.Opcode == WRFlush {
		if op != wire.RCRDMAReadResponseOnly || psn != w.firstPSN || len(p.Payload) != 0 {
			ss.finish(w, WCBadRespErr)
			return false
		}
		ss.comp = psn.Add(1)
		ss.finish(w, WCSuccess)
		return true
	}
	if w.wr.Opcode != WRRDMARead {
		ss.finish(w, WCBadRespErr)
		return false
	}
	if p.AETH != nil && wire.SyndromeType(p.AETH.Syndrome()) != wire.AETHAck {
		ss.finish(w, WCBadRespErr)
		return false
	}
	expected := w.firstPSN.Add(w.rcvd)
	switch {
	case psn != expected:
		// A gap may be reordering as well as loss: resending on every gap
		// would multiply traffic on a reordering path, so a missing response
		// packet is left to a later response or the retransmit timer, as
		// kernel rxe does.
		return false
	}
	start := op == wire.RCRDMAReadResponseFirst || op == wire.RCRDMAReadResponseOnly
	if !start && w.rcvd == 0 {
		return false // MIDDLE/LAST cannot begin a READ's data
	}
	mtu := uint64(s.mtu)
	off := uint64(w.rcvd) * mtu
	rest := w.length - off
	end := op == wire.RCRDMAReadResponseLast || op == wire.RCRDMAReadResponseOnly
	n := uint64(len(p.Payload))
	if (!end && n != mtu) || (end && n != rest) || n > rest {
		ss.finish(w, WCBadRespErr)
		return false
	}
	ss.scatter(w, off, p.Payload)
	w.rcvd++
	ss.comp = psn.Add(1)
	if end {
		ss.finish(w, WCSuccess)
	}
	return true
}

// lostResponse: a later PSN was acknowledged while w (a READ or atomic)
// still waits for its response, so the response was lost; retry from it.
func (ss *sendSide) lostResponse(s *qpSnap, w *swqe, now time.Time) {
	from := w.firstPSN.Add(w.rcvd)
	if ss.inRetry && ss.retryFrom == from {
		return
	}
	if from.After(ss.comp) {
		ss.comp = from
	}
	ss.q.inc(CompleterRetryErr)
	ss.retry(from)
	ss.armTimer(s, now)
}

// after finishes handling a response: progress resets the retry counters
// and pushes the retransmit deadline out (or stops it).
func (ss *sendSide) after(s *qpSnap, now time.Time, progress, rnr bool) {
	if progress {
		ss.retryLeft = s.attr.RetryCnt
		if !rnr {
			ss.rnrLeft = s.attr.RNRRetry
		}
		ss.inRetry = false
		if ss.probe {
			// The peer is answering: the rest of the window goes out
			// again from what it has not acknowledged, except what the
			// probe itself asked for: a probing READ's first response
			// is progress while the rest of its responses are on the way.
			from := ss.comp
			if ss.probeSent && ss.probeEnd.After(from) {
				from = ss.probeEnd
			}
			ss.retry(from)
		}
		if ss.net < ss.head {
			ss.net = ss.head
		}
		ss.armTimer(s, now)
	}
	if !ss.outstanding() {
		ss.deadline = time.Time{}
	}
}
