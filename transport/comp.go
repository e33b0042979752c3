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
			ss.settleResponse(s, now, progress, rnr)
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
		ss.settleResponse(s, now, progress, rnr)
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
			ss.timerRNRWait(now, RNRTimer(wire.SyndromeValue(syn)), psn)
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
				ss.timerResponseRetry(s, now)
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
	ss.settleResponse(s, now, progress, rnr)
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
	ss.timerResponseRetry(s, now)
}

// settleResponse ends the handling of a response: progress resets the retry
// counters, resumes the window after a probe and pushes the retransmit
// deadline out; with nothing outstanding the deadline stops.
func (ss *sendSide) settleResponse(s *qpSnap, now time.Time, progress, rnr bool) {
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
		ss.timerAckProgress(s, now)
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
