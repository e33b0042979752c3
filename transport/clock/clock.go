// Package clock is vrnicd's one source of time and timers: the engine,
// the CM, the netstack's neighbour cache and the datapath workers all take
// a Clock, so tests drive every deadline by hand with Manual, in the
// manner of gVisor's faketime.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time and runs timers.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f on a goroutine of its own (System) or inside
	// Advance (Manual) once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface {
	// Stop prevents the call if it has not happened; it reports whether it
	// stopped it.
	Stop() bool
}

// System is the real, monotonic clock.
type System struct{}

func (System) Now() time.Time { return time.Now() }

func (System) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Manual is a Clock that moves only when told to; its timers fire inside
// Advance and AdvanceTo, in deadline order, with the clock reading their
// deadline.
type Manual struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer
}

// NewManual starts a Manual clock at start.
func NewManual(start time.Time) *Manual { return &Manual{now: start} }

type manualTimer struct {
	c       *Manual
	when    time.Time
	f       func()
	stopped bool
}

func (c *Manual) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *Manual) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{c: c, when: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *manualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

// Advance moves the clock forward by d, firing every timer that falls due.
func (c *Manual) Advance(d time.Duration) { c.AdvanceTo(c.Now().Add(d)) }

// AdvanceTo moves the clock to end if end is later, firing every timer
// that falls due; a timer's function runs without the clock's lock, so it
// may set timers of its own (those due by end fire too).
func (c *Manual) AdvanceTo(end time.Time) {
	c.mu.Lock()
	for {
		next, ni := c.nextDueLocked(end)
		if next == nil {
			break
		}
		c.timers = append(c.timers[:ni], c.timers[ni+1:]...)
		next.stopped = true
		if next.when.After(c.now) {
			c.now = next.when
		}
		c.mu.Unlock()
		next.f()
		c.mu.Lock()
	}
	if end.After(c.now) {
		c.now = end
	}
	live := c.timers[:0]
	for _, t := range c.timers {
		if !t.stopped {
			live = append(live, t)
		}
	}
	c.timers = live
	c.mu.Unlock()
}

// nextDueLocked is the earliest live timer due by end.
func (c *Manual) nextDueLocked(end time.Time) (*manualTimer, int) {
	var next *manualTimer
	ni := -1
	for i, t := range c.timers {
		if !t.stopped && !t.when.After(end) && (next == nil || t.when.Before(next.when)) {
			next, ni = t, i
		}
	}
	return next, ni
}

var _, _ Clock = System{}, (*Manual)(nil)
