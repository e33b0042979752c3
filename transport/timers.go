package transport

import (
	"time"

	"github.com/vrnic/vrnicd/transport/wire"
)

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

func (ss *sendSide) nextWake() time.Time {
	switch {
	case ss.rnrWake.IsZero():
		return ss.deadline
	case ss.deadline.IsZero() || ss.rnrWake.Before(ss.deadline):
		return ss.rnrWake
	}
	return ss.deadline
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
