package mem

import "sync/atomic"

// Backing is memory the daemon can read and write on a peer's behalf: a test
// slice, or (in the verbsock layer) a client's sealed memfd mapped into the
// daemon.
//
// A registration takes one reference with Acquire and drops it with Release
// only after the last access through it has finished, so an implementation
// may unmap when its last reference goes. Bytes must return the same slice
// for as long as any reference is held. Implementations must be comparable
// (pointer types are): FastReg acquires once per run of equal pages.
type Backing interface {
	// Bytes is the memory. Its length bounds every registration on it.
	Bytes() []byte
	// Acquire takes a reference. It reports false if the memory is already
	// gone (closed, unmapped), and then the registration fails.
	Acquire() bool
	// Release drops a reference taken by Acquire.
	Release()
}

// PersistentBacking is implemented by a Backing that can say whether it is
// persistent memory. Only such memory may be registered with FlushPersistent
// (rxe refuses non-pmem pages the same way).
type PersistentBacking interface {
	Persistent() bool
}

func isPersistent(b Backing) bool {
	p, ok := b.(PersistentBacking)
	return ok && p.Persistent()
}

// Page is one entry of a REG_MR page list: pageSize bytes of a Backing
// starting at Offset.
type Page struct {
	Backing Backing
	Offset  uint64
}

// SliceBacking is a Backing over an ordinary byte slice, for tests and
// in-process users. It starts with one reference, its owner's, which Close
// drops; when the count reaches zero the memory counts as unmapped: Released
// reports true, OnRelease (if set before use) runs, and Acquire fails.
type SliceBacking struct {
	b         []byte
	refs      refCount
	released  atomic.Bool
	closed    atomic.Bool
	OnRelease func()
}

// NewSliceBacking wraps b.
func NewSliceBacking(b []byte) *SliceBacking {
	s := &SliceBacking{b: b}
	s.refs.Store(1)
	return s
}

func (s *SliceBacking) Bytes() []byte { return s.b }

func (s *SliceBacking) Acquire() bool { return s.refs.tryAcquire() }

func (s *SliceBacking) Release() {
	if s.refs.drop("mem: SliceBacking released more often than acquired") {
		s.released.Store(true)
		if s.OnRelease != nil {
			s.OnRelease()
		}
	}
}

// Close drops the owner's reference; a second Close does nothing.
func (s *SliceBacking) Close() {
	if s.closed.CompareAndSwap(false, true) {
		s.Release()
	}
}

// Released reports whether the last reference has gone.
func (s *SliceBacking) Released() bool { return s.released.Load() }

// Refs is the current reference count (the owner's included until Close).
func (s *SliceBacking) Refs() int64 { return s.refs.Load() }
