package transport

import (
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
	full uint64 // the ring's size at the QP's depth; it grows up to it

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

	// The retransmit deadline belongs to the oldest unacknowledged PSN
	// (zero: stopped). Only the timer transitions in timers.go change it,
	// armAtFlush and rnrWake.
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

	// Early retransmission (tlp.go): the round trip (zero: not measured
	// yet), the sample being timed, the probe deadline (zero: none), the
	// probes since the last progress and the PSN the last one asked for.
	srtt, rttvar time.Duration
	rttOn        bool
	rttPSN       wire.PSN
	rttSent      time.Time
	tlpAt        time.Time
	rto          time.Duration // the IBA timeout the deadline last ran for
	tlpN         uint8
	tlpOut       bool
	tlpPSN       wire.PSN // the PSN the last probe asked for
	tlpHi        wire.PSN // hi when it went: what was sent before it
	tlpGoBack    bool     // packets sent before the answered probe are unacknowledged

	// The send window (window.go): PSNs that may be unacknowledged (0:
	// windowMax), what has been acknowledged toward its next step, and
	// the loss episode being recovered (until comp reaches recoverAt).
	cwnd, cwndAcc int32
	recovering    bool
	recoverAt     wire.PSN

	stopIssue bool // an errored WQE is waiting for its in-order completion
	drained   bool // SQ drained event sent for this SQD

	tx []TxPacket
	wc WC
}

// initialSlots is how many WQE slots a queue starts with; it doubles, up to
// its depth, as posts fill it, so that an idle QP costs little whatever
// depth it was created with.
const initialSlots = 8

func (ss *sendSide) init(q *QP) {
	ss.q = q
	ss.full = pow2(q.cap.MaxSendWR)
	ss.grow(min(ss.full, initialSlots))
	ss.state = StateReset
}

// grow makes the ring n slots, every queued WQE (head to tail) keeping its
// index and its slot's buffers; new slots get buffers of their own. Only
// the send owner calls it, between runs, so no WQE pointer is held.
func (ss *sendSide) grow(n uint64) {
	old, oldMask := ss.ring, ss.mask
	ss.ring, ss.mask = make([]swqe, n), n-1
	for i := ss.head; i < ss.tail && old != nil; i++ {
		ss.ring[i&ss.mask] = old[i&oldMask]
	}
	k := int(max(ss.q.cap.MaxSendSGE, 1))
	in := int(ss.q.cap.MaxInlineData)
	need := 0
	for i := range ss.ring {
		if ss.ring[i].sglBuf == nil {
			need++
		}
	}
	sge := make([]SGE, need*k)
	refs := make([]mem.Ref, need*k)
	var inl []byte
	if in > 0 {
		inl = make([]byte, need*in)
	}
	j := 0
	for i := range ss.ring {
		w := &ss.ring[i]
		if w.sglBuf != nil {
			continue
		}
		w.sglBuf = sge[j*k : (j+1)*k : (j+1)*k]
		w.refs = refs[j*k : j*k : (j+1)*k] // resolve's, so it never allocates
		if in > 0 {
			w.inline = inl[j*in : (j+1)*in : (j+1)*in]
		}
		j++
	}
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
	ss.timerStopAll()
	ss.inRetry, ss.stopIssue, ss.drained = false, false, false
	ss.probe, ss.probeSent = false, false
	ss.srtt, ss.rttvar, ss.rttOn, ss.tlpN, ss.tlpOut, ss.tlpGoBack = 0, 0, false, 0, false, false
	ss.cwnd, ss.cwndAcc, ss.recovering = 0, 0, false
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
	if ss.tail-ss.head >= uint64(max(q.cap.MaxSendWR, 1)) {
		return ErrFull
	}
	if ss.tail-ss.head == uint64(len(ss.ring)) {
		if uint64(len(ss.ring)) >= ss.full {
			return ErrFull
		}
		ss.grow(2 * uint64(len(ss.ring)))
	}
	w := ss.slot(ss.tail)
	sglBuf, inline, refs := w.sglBuf, w.inline, w.refs[:0]
	*w = swqe{wr: *wr, sglBuf: sglBuf, inline: inline, refs: refs}
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
	if !OpcodeAllowed(q.typ, op) {
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
	if isDatagram(q.typ) && wr.AH == nil {
		return fmt.Errorf("%w: UD send without address handle", ErrInvalid)
	}
	return nil
}

func (ss *sendSide) publish() {
	q := ss.q
	q.pubSendPSN.Store(uint32(ss.psn))
	q.pubCompPSN.Store(uint32(ss.comp))
	q.pubOutstanding.Store(int64(ss.tail - ss.head))
	q.pubWindow.Store(ss.window())
	q.pubSRTT.Store(int64(ss.srtt))
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
	ss.timerStopAll()
	ss.stopIssue = false
	ss.comp = ss.hi
}
