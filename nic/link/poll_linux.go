package link

import (
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

// sockErr takes the socket's pending error, which a ring, unlike
// recvmmsg, does not report by itself. ENETDOWN (the interface went down)
// is no error of the link's: the socket receives again once the interface
// is up (af_packet re-registers it on NETDEV_UP), and the port's state is
// the netlink watch's to report (Watch).
func (r *Raw) sockErr() error {
	if r.rc.events()&pollBad == 0 {
		return nil
	}
	var soErr int
	var gerr error
	_ = r.rc.Control(func(fd uintptr) { soErr, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR) })
	switch {
	case gerr != nil:
		return r.fdErr(gerr)
	case soErr == int(unix.ENETDOWN):
		return nil
	case soErr != 0:
		return r.fdErr(unix.Errno(soErr))
	}
	return nil
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

// WaitReadable implements Poller. Readiness is the kernel's: with a
// ring, a block (V3) or slot (V2) handed over; without, a frame queued.
func (r *Raw) WaitReadable(timeout time.Duration) (bool, error) {
	ok, err := r.rc.waitReadable(timeout, r.readable)
	if err != nil {
		return false, r.fdErr(err)
	}
	return ok, nil
}

const pollBad = unix.POLLERR | unix.POLLHUP | unix.POLLNVAL

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
		if r.rc.events()&pollBad != 0 {
			r.errPending.Store(true) // for the TryRead that follows
			return true
		}
		return false
	}
	return r.rc.events()&(unix.POLLIN|pollBad) != 0
}

// Wake implements Poller: it ends a WaitReadable in progress, or the next
// one if none is, with (false, nil).
func (r *Raw) Wake() { r.rc.Wake() }

var (
	_ Poller     = (*Raw)(nil)
	_ RingReader = (*Raw)(nil)
)

// PollFD implements Poller: with a receive ring the socket is readable
// when the ring holds a frame for user space (packet_poll).
func (r *Raw) PollFD() (int, error) { return pollFD(r.rc) }

// PollError implements Poller: the socket's pending error (the
// interface went away), which a ring does not report by itself.
func (r *Raw) PollError() error { return r.sockErr() }

// PollFD implements Poller.
func (t *TAP) PollFD() (int, error) { return pollFD(t.rc) }

// pollFD is the descriptor a WaitSet may hold until the link is closed.
func pollFD(s *sysFD) (int, error) {
	fd := -1
	if err := s.Control(func(f uintptr) { fd = int(f) }); err != nil {
		return -1, err
	}
	return fd, nil
}

// PollError implements Poller: a TAP whose device is gone polls as an
// error, and its reads fail with EBADFD.
func (t *TAP) PollError() error {
	if t.closed.Load() {
		return closedError(t.name)
	}
	if t.rc.events()&pollBad != 0 {
		return t.fdErr(unix.EBADFD)
	}
	return nil
}
