package transport

import "sync"

// MemCQ is an in-memory completion queue for tests and in-process users.
type MemCQ struct {
	mu       sync.Mutex
	wcs      []WC
	cap      int
	overflow bool
	notify   func()
}

// NewMemCQ returns a CQ of n entries; notify, if set, is called after every
// push (a completion event).
func NewMemCQ(n int, notify func()) *MemCQ { return &MemCQ{cap: n, notify: notify} }

// Push implements CompletionQueue.
func (c *MemCQ) Push(wc *WC) bool {
	c.mu.Lock()
	if len(c.wcs) >= c.cap {
		c.overflow = true
		c.mu.Unlock()
		return false
	}
	c.wcs = append(c.wcs, *wc)
	c.mu.Unlock()
	if c.notify != nil {
		c.notify()
	}
	return true
}

// Poll takes up to len(out) completions (ibv_poll_cq).
func (c *MemCQ) Poll(out []WC) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := copy(out, c.wcs)
	c.wcs = c.wcs[:copy(c.wcs, c.wcs[n:])]
	return n
}

// Len is the number of completions waiting.
func (c *MemCQ) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.wcs)
}

// Overflowed reports whether a push ever found the CQ full.
func (c *MemCQ) Overflowed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.overflow
}
