package cm

import (
	"time"

	"github.com/vrnic/vrnicd/transport/clock"
)

// Clock is the package's only source of time (the project's one clock;
// the table reads only Now), so tests move time by hand.
type Clock = clock.Clock

// IBATime is the duration an IBA timeout exponent stands for, 4.096 µs ×
// 2^x (IBA 12.7.8 "CM Response Timeout", 9.7.6.1.3 "Local ACK Timeout"). A
// zero exponent means "no timeout" for the QP's Local ACK Timeout but is a
// real 4.096 µs here; callers decide what zero means.
func IBATime(x uint8) time.Duration {
	if x > 31 {
		x = 31
	}
	return time.Duration(4096<<x) * time.Nanosecond
}

// kernelMs is ib_cm's cm_convert_to_ms: 4.096 µs × 2^x rounded to a power
// of two milliseconds, never below 1 ms. The kernel times every CM message
// with it, so a peer sees our retransmissions when it expects the kernel's.
func kernelMs(x uint8) time.Duration {
	if x <= 8 {
		return time.Millisecond
	}
	if x > 31 {
		x = 31
	}
	return time.Duration(1<<(x-8)) * time.Millisecond
}

// ackTimeout is ib_cm's cm_ack_timeout: the QP's Local ACK Timeout for a
// path of packet life time plt to a CA whose ACK delay is caAckDelay (IBA
// 9.7.6.1.3: the timeout covers twice the life time plus the CA's delay; in
// exponents that is max(plt+1, caAckDelay) plus one when the two are close).
func ackTimeout(caAckDelay, plt uint8) uint8 {
	t := int(plt) + 1
	d := int(caAckDelay)
	if t >= d {
		if d >= t-1 {
			t++
		}
	} else {
		t = d
		if int(plt)+1 >= d-1 {
			t++
		}
	}
	return uint8(min(31, t))
}

// AckTimeout is the Local ACK Timeout exponent the kernel puts in a REQ's
// path and a QP's timeout attribute for a path of packet life time plt to a
// CA with ACK delay caAckDelay (cm.c cm_ack_timeout).
func AckTimeout(caAckDelay, plt uint8) uint8 { return ackTimeout(caAckDelay, plt) }

// arm sets c's deadline, replacing any earlier one. Table.timers orders
// the waiting connections, soonest first, so NextWake and OnTimer cost
// O(log n) however many connections there are.
func (t *Table) arm(c *Conn, at time.Time) { t.timers.Set(c, at) }

// disarm cancels c's deadline.
func (t *Table) disarm(c *Conn) { t.timers.Remove(c) }

// connSlot is where a Conn keeps its place in Table.timers.
func connSlot(c *Conn) *clock.Slot { return &c.timer }

// NextWake is when OnTimer next has work, and false when no connection
// waits for time.
func (t *Table) NextWake() (time.Time, bool) {
	_, at, ok := t.timers.Peek()
	return at, ok
}

// OnTimer runs every deadline at or before now: retransmissions, retries
// exhausted, half-open requests the consumer never answered, timewait exits.
func (t *Table) OnTimer(now time.Time, out *Output) {
	for {
		c, ok := t.timers.PopDue(now)
		if !ok {
			return
		}
		t.expire(c, now, out)
	}
}
