package transport

import (
	"time"

	"github.com/vrnic/vrnicd/transport/wire"
)

// Early retransmission: a tail loss probe that costs no retry. A lost last
// packet, a lost ACK or a lost sequence NAK leaves nothing that would make
// the responder speak again, and the IBA timer (67 ms at timeout 14) is
// the only way out; a round trip on a LAN is tens of microseconds. The
// requester measures the round trip from ACKs of packets sent once (RFC
// 6298's SRTT and RTTVAR, Karn's rule: no sample across a retry) and, when
// the oldest unacknowledged packet has seen no progress for the probe time
// (pto), sends that packet again with AckReq, once, beside the window: the
// oldest, because a responder (kernel rxe's too) drops everything past a
// gap after its one NAK. A duplicate is answered with an ACK of all the
// responder has, the missing packet fills the gap; either is progress.
// Probes back off (pto doubles per probe without progress) and stop where
// the IBA deadline would run out: the deadline still runs from the last
// progress and counts the QP's retries, so a dead peer ends in
// RETRY_EXC_ERR no sooner than without probes, and a slow one is not
// declared dead sooner.

const (
	// tlpFloor bounds the probe time from below: the responder's own
	// scheduling delay must not look like loss.
	tlpFloor = 100 * time.Microsecond
	// tlpMaxBackoff bounds the doubling: from the floor, ten probes reach
	// 100 ms, past any IBA timeout a LAN uses, so a dead peer gets about
	// ten probes before its retries run out, not one per probe time.
	tlpMaxBackoff = 10
)

// rttStart times psn, sent for the first time at now, unless a sample runs.
func (ss *sendSide) rttStart(psn wire.PSN, now time.Time) {
	if !ss.rttOn {
		ss.rttOn, ss.rttPSN, ss.rttSent = true, psn, now
	}
}

// rttAck takes a sample when the acknowledgement covers the timed PSN
// (RFC 6298 2.2/2.3: alpha 1/8, beta 1/4).
func (ss *sendSide) rttAck(now time.Time) {
	if !ss.rttOn || !ss.comp.After(ss.rttPSN) {
		return
	}
	ss.rttOn = false
	r := now.Sub(ss.rttSent)
	if r <= 0 {
		return
	}
	if ss.srtt == 0 {
		ss.srtt, ss.rttvar = r, r/2
		return
	}
	d := ss.srtt - r
	if d < 0 {
		d = -d
	}
	ss.rttvar += (d - ss.rttvar) / 4
	ss.srtt += (r - ss.srtt) / 8
}

// pto is the probe time: two round trips, or the round trip and four
// times its variation if that is more, at least tlpFloor; 0 (no probes)
// until a round trip was measured.
func (ss *sendSide) pto() time.Duration {
	if ss.srtt == 0 {
		return 0
	}
	return max(2*ss.srtt, ss.srtt+4*ss.rttvar, tlpFloor)
}

// tlpArm sets the probe deadline from now, backed off by the probes sent
// since the last progress; none when it would not come a quarter of the
// timeout before the IBA deadline: a probe that close to it is the
// timeout's own retransmission early, and on the wire it could not be
// told from one.
func (ss *sendSide) tlpArm(now time.Time) {
	ss.tlpAt = time.Time{}
	pto := ss.pto()
	if pto == 0 || ss.deadline.IsZero() {
		return
	}
	if at := now.Add(pto << ss.tlpN); at.Before(ss.deadline.Add(-ss.rto / 4)) {
		ss.tlpAt = at
	}
}

// tlpProgress: a response made progress. A probe was spurious when the
// responder acknowledges past the probed packet: it had that one and later
// ones, the window was only slow. (A probe of the one packet outstanding
// whose ACK was lost is not told apart: that ACK looks the same either
// way.) Packets sent before the probe that are still unacknowledged are
// probably lost (a responder drops everything past a gap, so they were
// dropped if the probe filled one): if the next probe time passes with
// them still unacknowledged, the requester goes back to the oldest at
// once (tlpGoBack) instead of probing them one by one. A responder that is
// only slow keeps acknowledging, which keeps that time away.
func (ss *sendSide) tlpProgress() {
	if !ss.tlpOut {
		return
	}
	if ss.comp.After(ss.tlpPSN.Add(1)) {
		ss.q.inc(TLPSpurious)
	}
	ss.tlpGoBack = ss.comp.Before(ss.tlpHi)
	ss.tlpOut, ss.tlpN = false, 0
}

// timerProbeDue: the probe deadline passed with PSNs outstanding; the
// oldest unacknowledged packet goes again (unless a timeout's probe is
// out already), and the next probe deadline backs off.
func (ss *sendSide) timerProbeDue(s *qpSnap, now time.Time) {
	ss.tlpAt = time.Time{}
	w := ss.oldestActive()
	if w == nil || !ss.outstanding() || ss.probe {
		return
	}
	if ss.tlpGoBack {
		ss.tlpGoBack = false
		if ss.comp.Before(ss.tlpHi) {
			ss.q.inc(CompleterRetryErr)
			ss.windowLoss()
			ss.retry(ss.comp)
			ss.tlpArm(now)
			return
		}
	}
	if !ss.sendTLP(s, w) {
		return
	}
	ss.q.inc(TLPProbes)
	ss.tlpOut, ss.tlpPSN, ss.tlpHi = true, ss.comp, ss.hi
	if ss.tlpN < tlpMaxBackoff {
		ss.tlpN++
	}
	ss.tlpArm(now)
}

// sendTLP queues the packet of w at the oldest unacknowledged PSN again,
// with AckReq, leaving the send cursors as they are. false: that packet
// has not been sent yet (a resend is about to send it anyway).
func (ss *sendSide) sendTLP(s *qpSnap, w *swqe) bool {
	saved := w.sent
	defer func() { w.sent = saved }()
	if w.sendWrite() {
		idx := uint32(ss.comp.Diff(w.firstPSN))
		if ss.comp.Before(w.firstPSN) || idx >= w.sent {
			return false
		}
		w.sent = idx
	}
	psn, off, n := ss.nextPacket(s, w)
	last := w.sent+1 >= w.npkts || !w.sendWrite()
	var f wire.PacketFields
	ss.requestHeaders(&f, s, w, psn, off, last)
	f.BTH.AckReq = true
	ss.queueRequest(&f, s, w, off, n)
	ss.q.inc(RetransmittedPkts)
	return true
}
