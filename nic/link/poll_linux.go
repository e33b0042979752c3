package link

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// TryRead implements Poller: Read without waiting. With a ring it costs no
// system call.
func (r *Raw) TryRead(bufs [][]byte, sizes []int, offset int) (int, error) {
	if len(bufs) > r.batch {
		bufs = bufs[:r.batch]
	}
	if len(bufs) == 0 {
		return 0, nil
	}
	if r.ring != nil {
		return r.copyRing(bufs, sizes, offset)
	}
	for {
		n, err := r.recv(bufs, sizes, offset, false)
		if err != nil || n == 0 {
			return 0, err
		}
		if n = keepFrames(bufs, sizes, offset, n, r.auxStatus); n > 0 {
			return n, nil
		}
	}
}

// ReadRing implements RingReader: up to max frames, in place, without
// waiting. A Raw opened without RawConfig.Ring returns an error.
func (r *Raw) ReadRing(max int, fn func(frame []byte)) (int, error) {
	if r.ring == nil {
		return 0, errNoRing
	}
	r.ringMu.RLock()
	defer r.ringMu.RUnlock()
	if r.closed.Load() {
		return 0, closedError(r.name)
	}
	return r.ring.frames(max, fn), nil
}

// copyRing copies up to len(bufs) ring frames to bufs[i][offset:].
func (r *Raw) copyRing(bufs [][]byte, sizes []int, offset int) (int, error) {
	n := 0
	_, err := r.ReadRing(len(bufs), func(f []byte) {
		sizes[n] = copy(bufs[n][offset:], f)
		n++
	})
	return n, err
}

// readRing is Read over the ring: TryRead, and sleep while it finds nothing.
func (r *Raw) readRing(bufs [][]byte, sizes []int, offset int) (int, error) {
	for {
		n, err := r.TryRead(bufs, sizes, offset)
		if n > 0 || err != nil {
			return n, err
		}
		if _, err := r.WaitReadable(-1); err != nil {
			return 0, err
		}
	}
}

// WaitReadable implements Poller. Readiness is the kernel's (the socket
// on the Go netpoller, so the wait costs no thread): with a ring, a block
// handed over; without, a frame queued.
func (r *Raw) WaitReadable(timeout time.Duration) (bool, error) {
	if timeout == 0 {
		return r.readable(), nil
	}
	var dl time.Time
	if timeout > 0 {
		dl = time.Now().Add(timeout)
	}
	if err := r.f.SetReadDeadline(dl); err != nil {
		return false, r.fdErr(err)
	}
	// The flag is checked after the deadline is set: a Wake that comes
	// later moves the deadline to the past, one that came before is seen.
	if r.wake.Swap(false) {
		return false, nil
	}
	ready := false
	err := r.rc.Read(func(uintptr) bool {
		ready = r.readable()
		return ready || r.wake.Load()
	})
	r.wake.Store(false)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return false, nil
	}
	if err != nil {
		return false, r.fdErr(err)
	}
	return ready, nil
}

// readable reports whether a Read would find a frame now.
func (r *Raw) readable() bool {
	if r.closed.Load() {
		return false
	}
	if r.ring != nil {
		r.ringMu.RLock()
		defer r.ringMu.RUnlock()
		return !r.closed.Load() && r.ring.ready()
	}
	ready := false
	_ = r.rc.Control(func(fd uintptr) {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(p, 0)
		ready = err == nil && n > 0 && p[0].Revents&unix.POLLIN != 0
	})
	return ready
}

// Wake implements Poller: it ends a WaitReadable in progress, or the next
// one if none is, with (false, nil).
func (r *Raw) Wake() {
	r.wake.Store(true)
	_ = r.f.SetReadDeadline(time.Unix(1, 0))
}

var (
	_ Poller     = (*Raw)(nil)
	_ RingReader = (*Raw)(nil)
)
