package link

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// pipeSignal is a pipe end's polling face: ready is an eventfd readable
// while frames may wait (level-triggered, as a socket is), wake ends a
// WaitReadable. A writer signals ready only when it is not already
// signalled; TryRead clears it when it finds the queue empty and then looks
// once more, so a frame queued in between is never left unsignalled.
type pipeSignal struct {
	ready, wake int
	pending     atomic.Bool
	// mu keeps the descriptors open while they are used: Close takes it
	// to close them, so no write can reach a reused descriptor number.
	mu sync.RWMutex

	// closed: the descriptors are gone (guarded by mu; checklocks misreads
	// an annotation here as guarding mu itself).
	closed bool
}

func newPipeSignal(s *pipeSignal) error {
	s.ready, s.wake = -1, -1
	r, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return err
	}
	w, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(r)
		return err
	}
	s.ready, s.wake = r, w
	return nil
}

// use runs f with the descriptors open, unless they are closed.
func (s *pipeSignal) use(f func()) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if !s.closed && s.ready >= 0 {
		f()
	}
}

var one = [8]byte{1}

// signal marks frames waiting (a writer, after queueing).
func (s *pipeSignal) signal() {
	if s.pending.CompareAndSwap(false, true) {
		s.use(func() { _, _ = unix.Write(s.ready, one[:]) })
	}
}

// clear takes the mark (the reader found the queue empty).
func (s *pipeSignal) clear() {
	if s.pending.Swap(false) {
		s.use(func() {
			var b [8]byte
			_, _ = unix.Read(s.ready, b[:])
		})
	}
}

// close wakes whoever waits, then closes the descriptors.
func (s *pipeSignal) close() {
	s.use(func() {
		_, _ = unix.Write(s.wake, one[:])
		_, _ = unix.Write(s.ready, one[:])
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	for _, fd := range []int{s.ready, s.wake} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// TryRead implements Poller: the frames queued now, at most len(bufs).
func (p *PipeEnd) TryRead(bufs [][]byte, sizes []int, offset int) (int, error) {
	if p.isClosed() {
		return 0, closedError(p.name)
	}
	n := p.take(bufs, sizes, offset)
	if n == 0 {
		p.sig.clear()
		n = p.take(bufs, sizes, offset) // queued between the look and the clear
		if n > 0 {
			p.sig.signal()
		}
	}
	return n, nil
}

// take copies out the frames queued, at most len(bufs), without waiting.
func (p *PipeEnd) take(bufs [][]byte, sizes []int, offset int) int {
	n := 0
	for n < len(bufs) {
		select {
		case f := <-p.rx:
			sizes[n] = copy(bufs[n][offset:], *f)
			frames.Put(f)
			n++
		default:
			return n
		}
	}
	return n
}

// WaitReadable implements Poller.
func (p *PipeEnd) WaitReadable(timeout time.Duration) (bool, error) {
	if p.isClosed() {
		return false, closedError(p.name)
	}
	if len(p.rx) > 0 {
		return true, nil
	}
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	var err error
	p.sig.use(func() {
		fds := []unix.PollFd{{Fd: int32(p.sig.ready), Events: unix.POLLIN}, {Fd: int32(p.sig.wake), Events: unix.POLLIN}}
		if _, err = unix.Poll(fds, ms); err == unix.EINTR {
			err = nil
		}
		if fds[1].Revents != 0 {
			var b [8]byte
			_, _ = unix.Read(p.sig.wake, b[:])
		}
	})
	if err != nil {
		return false, err
	}
	if p.isClosed() {
		return false, closedError(p.name)
	}
	return len(p.rx) > 0, nil
}

// Wake implements Poller.
func (p *PipeEnd) Wake() { p.sig.use(func() { _, _ = unix.Write(p.sig.wake, one[:]) }) }

// PollFD implements Poller: readable while frames may wait.
func (p *PipeEnd) PollFD() (int, error) {
	if p.sig.ready < 0 {
		return -1, p.sigErr
	}
	return p.sig.ready, nil
}

// PollError implements Poller: a pipe has no socket errors.
func (p *PipeEnd) PollError() error { return nil }

var _ Poller = (*PipeEnd)(nil)
