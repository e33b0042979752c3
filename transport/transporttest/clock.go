// Package transporttest joins transport engines over a simulated link with
// a manual clock and seeded fault injection (loss, reordering, duplication,
// corruption), so every IBA rule can be checked deterministically, in the
// manner of gVisor's faketime and link/channel.
package transporttest

import (
	"sync"
	"time"
)

// ManualClock is a transport.Clock that moves only when told to.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock starts at a fixed, arbitrary moment.
func NewManualClock() *ManualClock {
	return &ManualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// AdvanceTo moves the clock to t if t is later.
func (c *ManualClock) AdvanceTo(t time.Time) {
	c.mu.Lock()
	if t.After(c.now) {
		c.now = t
	}
	c.mu.Unlock()
}
