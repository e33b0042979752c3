package transport

import (
	"time"

	"github.com/vrnic/vrnicd/transport/wire"
)

// The send side's timers, in one place. The retransmit deadline belongs to
// the oldest unacknowledged PSN: armed when a packet leaves with nothing
// outstanding, pushed out by every acknowledgement that makes progress,
// stopped when nothing is outstanding. The RNR wait replaces it while the
// requester waits out an RNR NAK. Every change of ss.deadline, ss.armAtFlush
// and ss.rnrWake is one of the transitions below, named for the event that
// causes it:
//
//	timerPacketSent          an RC request packet is queued       start the deadline when the batch leaves, if idle or stopped
//	timerBatchLeft           the batch was handed to the link     a pending start runs from a fresh clock reading
//	timerAckProgress         a response made progress             the deadline runs again from now
//	timerNothingOutstanding  every sent PSN is acknowledged       stop the deadline
//	timerResponseRetry       a NAK or a lost response resends     the deadline runs again from now
//	timerRetransmitTimeout   the deadline expired                 stop it; a resend restarts it when it has left
//	timerRNRWait             an RNR NAK is taken                  stop the deadline, wake at the end of the RNR timer
//	timerRNRWaitOver         the RNR timer ran out                resend from the NAKed PSN, deadline as after a timeout
//	timerStopAll             reset or flush                       nothing runs
//
// The probe deadline (ss.tlpAt, tlp.go) follows the retransmit deadline:
// every restart of the latter sets it a probe time ahead (backed off by
// the probes since the last progress), provided that comes before the
// retransmit deadline; whatever stops the latter stops it too.
//
//	timerProbeDue            the probe deadline passed            the oldest unacknowledged packet goes again; back off

// outstanding reports whether sent PSNs wait for acknowledgement.
func (ss *sendSide) outstanding() bool { return ss.comp != ss.hi }

// runTimers fires what is due at now: the end of an RNR wait, then an
// expired retransmit deadline (which does not run while an RNR wait does).
func (ss *sendSide) runTimers(s *qpSnap, now time.Time) {
	if !ss.rnrWake.IsZero() && !now.Before(ss.rnrWake) {
		ss.timerRNRWaitOver(s)
	}
	if !ss.deadline.IsZero() && !now.Before(ss.deadline) && ss.rnrWake.IsZero() {
		ss.timerRetransmitTimeout(s)
	}
	if !ss.tlpAt.IsZero() && !now.Before(ss.tlpAt) && ss.rnrWake.IsZero() {
		ss.timerProbeDue(s, now)
	}
}

// nextWake is when the send side wants to run again for its timers (zero:
// no timer runs).
func (ss *sendSide) nextWake() time.Time {
	at := ss.deadline
	for _, t := range [...]time.Time{ss.rnrWake, ss.tlpAt} {
		if !t.IsZero() && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	return at
}

// timerPacketSent: an RC request packet was queued; wasIdle says nothing
// was outstanding before it. A packet that starts the deadline (nothing
// outstanding, or the deadline stopped) arms it only when its batch has
// left (timerBatchLeft), so that time the owner spent building the batch
// (or descheduled) is never taken out of the peer's timeout.
func (ss *sendSide) timerPacketSent(s *qpSnap, wasIdle bool) {
	if wasIdle || ss.deadline.IsZero() {
		ss.deadline = time.Time{}
		ss.armAtFlush = s
	}
}

// timerBatchLeft: the queued packets were handed to the link; a deadline
// waiting for them starts now.
func (ss *sendSide) timerBatchLeft() {
	if s := ss.armAtFlush; s != nil {
		ss.armAtFlush = nil
		ss.restartDeadline(s, ss.q.env.Clock.Now())
	}
}

// timerAckProgress: a response acknowledged something new; the deadline
// now belongs to the next oldest unacknowledged PSN and runs from now.
func (ss *sendSide) timerAckProgress(s *qpSnap, now time.Time) { ss.restartDeadline(s, now) }

// timerNothingOutstanding: every PSN sent is acknowledged; no deadline.
func (ss *sendSide) timerNothingOutstanding() { ss.deadline, ss.tlpAt = time.Time{}, time.Time{} }

// timerResponseRetry: a response (a PSN sequence NAK, or an ACK past a READ
// or atomic whose response was lost) started a resend; the deadline runs
// from now.
func (ss *sendSide) timerResponseRetry(s *qpSnap, now time.Time) { ss.restartDeadline(s, now) }

// timerRetransmitTimeout: the deadline expired. It stops; when a
// retransmission follows, it starts again once that has left.
func (ss *sendSide) timerRetransmitTimeout(s *qpSnap) {
	ss.deadline, ss.tlpAt = time.Time{}, time.Time{}
	if ss.timeout() {
		ss.armAtFlush = s
	}
}

// timerRNRWait: an RNR NAK for psn was taken; the requester sends nothing
// until the RNR timer runs out, and no retransmit deadline runs meanwhile.
func (ss *sendSide) timerRNRWait(now time.Time, wait time.Duration, psn wire.PSN) {
	ss.rnrWake = now.Add(wait)
	ss.rnrPSN = psn
	ss.deadline, ss.tlpAt = time.Time{}, time.Time{}
}

// timerRNRWaitOver: the RNR timer ran out; resend from the NAKed PSN, with
// the deadline started as after a timeout, when the resend has left.
func (ss *sendSide) timerRNRWaitOver(s *qpSnap) {
	ss.rnrWake = time.Time{}
	ss.retry(ss.rnrPSN)
	ss.armAtFlush = s
}

// timerStopAll: the QP was reset or flushed; no timer runs.
func (ss *sendSide) timerStopAll() {
	ss.deadline, ss.rnrWake, ss.armAtFlush, ss.tlpAt = time.Time{}, time.Time{}, nil, time.Time{}
}

// restartDeadline starts the retransmit deadline from now, or stops it when
// none should run: not RC, nothing outstanding, an RNR wait running, or the
// QP's timeout is 0 (infinite).
func (ss *sendSide) restartDeadline(s *qpSnap, now time.Time) {
	if ss.q.typ != QPTypeRC || !ss.outstanding() || !ss.rnrWake.IsZero() {
		ss.deadline, ss.tlpAt = time.Time{}, time.Time{}
		return
	}
	if d := LocalAckTimeout(s.attr.Timeout); d > 0 {
		ss.deadline, ss.rto = now.Add(d), d
	} else {
		ss.deadline = time.Time{}
	}
	ss.tlpArm(now)
}

// retry rewinds the network cursor to the WQE holding PSN from. WRITE and
// SEND resume at that packet, a READ asks again for what it has not
// received, and local operations are skipped: they already ran.
func (ss *sendSide) retry(from wire.PSN) {
	ss.probe, ss.probeSent = false, false
	ss.rttOn = false // Karn: no sample across a retransmission
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

// timeout handles an expired retransmit deadline: a retry from the oldest
// unacknowledged PSN, with only that packet sent (the probe), or, with the
// retries used up, the oldest WQE fails. true: a resend was started.
func (ss *sendSide) timeout() bool {
	q := ss.q
	if !ss.outstanding() {
		return false
	}
	q.inc(RetransmitTimeouts)
	if ss.retryLeft == 0 {
		q.inc(RetryExceededErr)
		if w := ss.oldestActive(); w != nil {
			ss.finish(w, WCRetryExcErr)
		}
		return false
	}
	ss.retryLeft--
	q.inc(CompleterRetryErr)
	ss.windowTimeout()
	ss.retry(ss.comp)
	ss.probe = q.typ == QPTypeRC
	return true
}
