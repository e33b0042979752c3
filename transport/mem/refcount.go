package mem

import "sync/atomic"

// refCount counts the holders of something that is freed when the last one
// lets go. Once it has reached zero it stays there: tryAcquire fails, so a
// lookup racing with the final release cannot revive what is being freed.
type refCount struct{ atomic.Int64 }

// tryAcquire takes a reference unless the count has already drained.
func (c *refCount) tryAcquire() bool {
	for {
		n := c.Load()
		if n <= 0 {
			return false
		}
		if c.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// drop releases one reference and reports whether it was the last; it
// panics with msg if there was none to release.
func (c *refCount) drop(msg string) bool {
	n := c.Add(-1)
	if n < 0 {
		panic(msg)
	}
	return n == 0
}
