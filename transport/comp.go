package transport

import (
	"encoding/binary"
	"time"

	"github.com/vrnic/vrnicd/transport/wire"
)

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
	before := ss.comp
	progress, lost := ss.completeBefore(s, psn, now)
	if lost {
		ss.settleResponse(s, now, before, progress, false)
		return
	}
	w := ss.oldestActive()
	if ss.advanceComp(w, psn) {
		progress = true
	}
	if w == nil || psn.Before(w.firstPSN) {
		ss.settleResponse(s, now, before, progress, false)
		return
	}
	rnr := false
	switch p.BTH.Opcode() {
	case wire.RCAcknowledge:
		progress, rnr = ss.acknowledge(s, w, p.AETH.Syndrome(), psn, now, progress)
	case wire.RCAtomicAcknowledge:
		progress = ss.atomicAck(w, p, psn) || progress
	case wire.RCRDMAReadResponseFirst, wire.RCRDMAReadResponseMiddle, wire.RCRDMAReadResponseLast, wire.RCRDMAReadResponseOnly:
		progress = ss.readResponse(s, w, p, psn, now) || progress
	default:
		q.inc(RcvdDropped)
	}
	ss.settleResponse(s, now, before, progress, rnr)
}

// completeBefore takes the acknowledgement of everything before psn: the
// SEND/WRITE WQEs that end before it are complete (coalesced ACKs), even
// while a resend of them is under way (every PSN before hi was sent). A
// READ or atomic that ends before it without its response lost that
// response: lost is true, a retry from it started and the response is
// handled.
func (ss *sendSide) completeBefore(s *qpSnap, psn wire.PSN, now time.Time) (progress, lost bool) {
	for {
		w := ss.oldestActive()
		if w == nil || !w.lastPSN().Before(psn) {
			return progress, false
		}
		if !w.sendWrite() {
			ss.lostResponse(s, w, now)
			return progress, true
		}
		ss.finish(w, WCSuccess)
		progress = true
	}
}

// advanceComp moves the oldest unacknowledged PSN up to psn, the response's
// PSN, with w the oldest WQE still waiting. PSNs before psn inside a READ
// count as acknowledged only as far as its responses have arrived, inside
// an atomic not at all. true: comp moved.
func (ss *sendSide) advanceComp(w *swqe, psn wire.PSN) bool {
	limit := psn
	if w != nil && !psn.Before(w.firstPSN) && !w.sendWrite() {
		limit = w.firstPSN.Add(w.rcvd)
	}
	if limit.After(ss.comp) {
		ss.comp = limit
		return true
	}
	return false
}

// acknowledge takes an ACKNOWLEDGE for psn inside w with AETH syndrome syn;
// progress says whether the response has made progress so far (also the
// forward progress that resets a PSN sequence NAK's retry count). It
// returns progress as it stands after the ACK or NAK, and whether it was
// an RNR NAK.
func (ss *sendSide) acknowledge(s *qpSnap, w *swqe, syn uint8, psn wire.PSN, now time.Time, progress bool) (bool, bool) {
	switch wire.SyndromeType(syn) {
	case wire.AETHAck:
		if !w.sendWrite() {
			return progress, false // a plain ACK inside a READ/atomic's PSNs answers nothing
		}
		ss.comp = psn.Add(1)
		if psn == w.lastPSN() { // also mid-resend: the responder has it all
			ss.finish(w, WCSuccess)
		}
		return true, false
	case wire.AETHRNRNak:
		ss.rnrNAK(s, w, syn, psn, now)
		return progress, true
	case wire.AETHNak:
		if syn != wire.NakPSNSeqError {
			ss.remoteNAK(w, syn)
		} else if ss.seqNAK(s, w, psn, now, progress) {
			return false, false // the resend is not progress
		}
	}
	return progress, false
}

// rnrNAK waits out an RNR NAK for psn, or with the RNR retries used up
// (rnr_retry 7 means for ever) fails w.
func (ss *sendSide) rnrNAK(s *qpSnap, w *swqe, syn uint8, psn wire.PSN, now time.Time) {
	q := ss.q
	q.inc(RcvdRNRErr)
	if s.attr.RNRRetry != 7 {
		if ss.rnrLeft == 0 {
			q.inc(RetryRNRExceededErr)
			ss.finish(w, WCRNRRetryExcErr)
			return
		}
		ss.rnrLeft--
	}
	ss.timerRNRWait(now, RNRTimer(wire.SyndromeValue(syn)), psn)
}

// seqNAK resends from psn after a PSN sequence error NAK, or with the
// retries used up fails w; advanced (the response made forward progress)
// resets the retry count first. true: a resend started.
func (ss *sendSide) seqNAK(s *qpSnap, w *swqe, psn wire.PSN, now time.Time, advanced bool) bool {
	q := ss.q
	q.inc(RcvdSeqErr)
	if !ss.rnrWake.IsZero() || (ss.inRetry && ss.retryFrom == psn) {
		return false // already waiting out an RNR, or already resending from there
	}
	if advanced {
		ss.retryLeft = s.attr.RetryCnt // forward progress resets the count
	}
	if ss.retryLeft == 0 {
		q.inc(RetryExceededErr)
		ss.finish(w, WCRetryExcErr)
		return false
	}
	ss.retryLeft--
	q.inc(CompleterRetryErr)
	ss.windowLoss()
	ss.retry(psn)
	ss.timerResponseRetry(s, now)
	return true
}

// remoteNAK fails w with the completion status the NAK's syndrome names.
func (ss *sendSide) remoteNAK(w *swqe, syn uint8) {
	switch syn {
	case wire.NakInvalidRequest:
		ss.finish(w, WCRemInvReqErr)
	case wire.NakRemoteAccess:
		ss.finish(w, WCRemAccessErr)
	default:
		ss.finish(w, WCRemOpErr)
	}
}

// atomicAck takes an ATOMIC ACKNOWLEDGE: the original value lands in the
// WQE's buffer. true: progress.
func (ss *sendSide) atomicAck(w *swqe, p *RxPacket, psn wire.PSN) bool {
	if w.wr.Opcode != WRAtomicCmpAndSwp && w.wr.Opcode != WRAtomicFetchAdd || psn != w.firstPSN {
		ss.finish(w, WCBadRespErr)
		return false
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], p.AtomicAckETH.Orig()) // host order, as rxe stores it
	ss.scatter(w, 0, b[:])
	ss.comp = psn.Add(1)
	ss.finish(w, WCSuccess)
	return true
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
	if psn != expected {
		// A gap in the responses is an implied NAK (IBA 9.7.5.1.3): ask
		// again from the first missing PSN at once, once per gap, rather
		// than wait for the retransmit timer as kernel rxe does.
		if psn.After(expected) && !(ss.inRetry && ss.retryFrom == expected) {
			ss.q.inc(CompleterRetryErr)
			ss.windowLoss()
			ss.retry(expected)
			ss.timerResponseRetry(s, now)
		}
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
	ss.windowLoss()
	ss.retry(from)
	ss.timerResponseRetry(s, now)
}

// settleResponse ends the handling of a response (before: the oldest
// unacknowledged PSN when it came): progress resets the retry counters,
// grows the send window, resumes the window after a probe and pushes the
// retransmit deadline out; with nothing outstanding the deadline stops.
func (ss *sendSide) settleResponse(s *qpSnap, now time.Time, before wire.PSN, progress, rnr bool) {
	if progress {
		if n := ss.comp.Diff(before); n > 0 {
			ss.windowAcked(n)
		}
		ss.rttAck(now)
		ss.tlpProgress()
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
		ss.timerAckProgress(s, now)
	} else if !ss.tlpAt.IsZero() {
		ss.tlpArm(now) // responses are coming: the path is alive, probing can wait
	}
	if !ss.outstanding() {
		ss.timerNothingOutstanding()
	}
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

// scatter copies src into the WQE's SGEs at message offset off (READ
// responses, atomic results).
func (ss *sendSide) scatter(w *swqe, off uint64, src []byte) {
	copySGL(w.wr.SGL, w.refs, off, src, true)
}
