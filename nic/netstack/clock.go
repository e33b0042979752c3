package netstack

import (
	"sync"
	"time"
)

// Clock is the stack's source of time and timers, so tests drive the
// neighbour cache's expiry and retries by hand.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f on its own goroutine after d.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface {
	Stop() bool
}

// SystemClock is the real clock.
type SystemClock struct{}

func (SystemClock) Now() time.Time { return time.Now() }
func (SystemClock) AfterFunc(d time.Duration, f func()) Timer {
	return time.AfterFunc(d, f)
}

// ManualClock is a Clock that moves only when Advance is called; timers
// fire synchronously inside Advance, in deadline order.
type ManualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer
}

// NewManualClock starts at an arbitrary fixed time.
func NewManualClock() *ManualClock {
	return &ManualClock{now: time.Unix(1_000_000, 0)}
}

type manualTimer struct {
	c       *ManualClock
	when    time.Time
	f       func()
	stopped bool
}

func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *ManualClock) AfterFunc(d time.Duration, f func()) Timer {
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

// Advance moves time forward by d, firing every timer that falls due.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	for {
		var next *manualTimer
		ni := -1
		for i, t := range c.timers {
			if !t.stopped && !t.when.After(end) && (next == nil || t.when.Before(next.when)) {
				next, ni = t, i
			}
		}
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
	c.now = end
	// Forget stopped timers.
	live := c.timers[:0]
	for _, t := range c.timers {
		if !t.stopped {
			live = append(live, t)
		}
	}
	c.timers = live
	c.mu.Unlock()
}
