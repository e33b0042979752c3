package transport

import "github.com/vrnic/vrnicd/transport/wire"

// The send window. Go-back-N resends everything in flight after a loss, so
// what is in flight beyond the bandwidth-delay product costs nothing
// without loss and a resend of it with every loss. The window (in PSNs)
// starts at kernel rxe's 128, halves on a loss, once per loss episode
// (until what was in flight when it was seen is acknowledged: TCP's
// recovery point), and grows back by one PSN per window acknowledged
// without loss, additive increase as TCP's congestion avoidance. It never
// goes below windowFloor: measured on this project's bench (two raw-mode
// daemons, MTU 9000, 64 KiB WRITEs), a lossless link keeps its rate down
// to 32 PSNs of window and loses 12 % at 16, while at 1 % loss each way 32
// PSNs keep 0.78 of the lossless rate where 128 keep 0.5.
const (
	windowFloor = 32
	windowMax   = maxUnackedPSNs
)

// window is how many PSNs may be unacknowledged now.
func (ss *sendSide) window() int32 {
	if ss.cwnd == 0 {
		return windowMax
	}
	return ss.cwnd
}

// windowAcked grows the window for n newly acknowledged PSNs, unless a
// loss episode is still being recovered.
func (ss *sendSide) windowAcked(n int32) {
	if ss.recovering {
		if !ss.comp.Before(ss.recoverAt) {
			ss.recovering = false
		}
		return
	}
	w := ss.window()
	if w >= windowMax {
		return
	}
	ss.cwndAcc += n
	if ss.cwndAcc >= w {
		ss.cwndAcc -= w
		ss.cwnd = w + 1
	}
}

// windowLoss halves the window for a loss, once per loss episode: the
// episode lasts until what was sent when it began is acknowledged.
func (ss *sendSide) windowLoss() {
	if ss.recovering {
		return
	}
	ss.recovering, ss.recoverAt = true, ss.hi
	ss.cwnd, ss.cwndAcc = max(ss.window()/2, windowFloor), 0
}

// windowTimeout: the peer said nothing for a whole timeout; start again
// from the floor.
func (ss *sendSide) windowTimeout() {
	ss.recovering, ss.recoverAt = true, ss.hi
	ss.cwnd, ss.cwndAcc = windowFloor, 0
}

// windowFull says whether psn is past the window.
func (ss *sendSide) windowFull(psn wire.PSN) bool { return psn.Diff(ss.comp) >= ss.window() }
