package link

import (
	"errors"
	"os"
	"sync/atomic"
	"syscall"
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

// HasRing implements RingReader.
func (r *Raw) HasRing() bool { return r.ring != nil }

// copyRing copies up to len(bufs) ring frames to bufs[i][offset:].
func (r *Raw) copyRing(bufs [][]byte, sizes []int, offset int) (int, error) {
	n := 0
	_, err := r.ReadRing(len(bufs), func(f []byte) {
		sizes[n] = copy(bufs[n][offset:], f)
		n++
	})
	if n == 0 && err == nil && r.errPending.Swap(false) {
		err = r.sockErr() // the wait saw an error on the socket, not a frame
	}
	return n, err
}

// sockErr takes the socket's pending error (the interface went away:
// ENETDOWN), which a ring, unlike recvmmsg, does not report by itself.
func (r *Raw) sockErr() error {
	if !pollErr(r.rc) {
		return nil
	}
	var soErr int
	var gerr error
	_ = r.rc.Control(func(fd uintptr) { soErr, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR) })
	switch {
	case gerr != nil:
		return r.fdErr(gerr)
	case soErr != 0:
		return r.fdErr(unix.Errno(soErr))
	}
	return nil
}

// pollErr reports whether fd has an error or hang-up pending.
func pollErr(rc syscall.RawConn) bool { return pollEvents(rc)&pollBad != 0 }

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
// (V3) or slot (V2) handed over; without, a frame queued.
func (r *Raw) WaitReadable(timeout time.Duration) (bool, error) {
	ok, err := waitReadable(r.f, r.rc, &r.wake, timeout, r.readable)
	if err != nil {
		return false, r.fdErr(err)
	}
	return ok, nil
}

// waitReadable is WaitReadable for a file on the netpoller: readable is
// checked after arming (so nothing is missed between a last try and the
// sleep), wake is the flag Wake sets before moving the deadline.
func waitReadable(f *os.File, rc syscall.RawConn, wake *atomic.Bool, timeout time.Duration, readable func() bool) (bool, error) {
	if timeout == 0 {
		return readable(), nil
	}
	var dl time.Time
	if timeout > 0 {
		dl = time.Now().Add(timeout)
	}
	if err := f.SetReadDeadline(dl); err != nil {
		return false, err
	}
	// The flag is checked after the deadline is set: a Wake that comes
	// later moves the deadline to the past, one that came before is seen.
	if wake.Swap(false) {
		return false, nil
	}
	ready := false
	err := rc.Read(func(uintptr) bool {
		ready = readable()
		return ready || wake.Load()
	})
	wake.Store(false)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return false, nil
	}
	return ready, err
}

// wakeFile is Wake for a file on the netpoller.
func wakeFile(f *os.File, wake *atomic.Bool) {
	wake.Store(true)
	_ = f.SetReadDeadline(time.Unix(1, 0))
}

// pollEvents is fd's poll(2) readiness for input, without waiting.
func pollEvents(rc syscall.RawConn) int16 {
	var ev int16
	_ = rc.Control(func(fd uintptr) {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, err := unix.Poll(p, 0); err == nil && n > 0 {
			ev = p[0].Revents
		}
	})
	return ev
}

const pollBad = unix.POLLERR | unix.POLLHUP | unix.POLLNVAL

// pollIn reports whether fd has input queued, or an error a read would
// return (the interface went away: POLLERR), without waiting.
func pollIn(rc syscall.RawConn) bool { return pollEvents(rc)&(unix.POLLIN|pollBad) != 0 }

// readable reports whether a Read would find a frame now.
func (r *Raw) readable() bool {
	if r.closed.Load() {
		return false
	}
	if r.ring != nil {
		r.ringMu.RLock()
		defer r.ringMu.RUnlock()
		if !r.closed.Load() && r.ring.ready() {
			return true
		}
		if pollErr(r.rc) {
			r.errPending.Store(true) // for the TryRead that follows
			return true
		}
		return false
	}
	return pollIn(r.rc)
}

// Wake implements Poller: it ends a WaitReadable in progress, or the next
// one if none is, with (false, nil).
func (r *Raw) Wake() { wakeFile(r.f, &r.wake) }

var (
	_ Poller     = (*Raw)(nil)
	_ RingReader = (*Raw)(nil)
)
