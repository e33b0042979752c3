package link

import (
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// sysFD is a link's non-blocking descriptor, kept off the Go netpoller.
// A datapath worker sleeps on the descriptor in its own epoll set
// (WaitSet); had the netpoller registered it too, every frame received
// and every sent frame freed (EPOLLOUT) would also wake the runtime's
// netpoller thread, which finds no goroutine waiting and sleeps again: one
// futile thread wake-up per frame, measured as the daemon's busiest
// system call (epoll_pwait) before this type. It implements
// syscall.RawConn, and its waits are poll(2) on the caller's thread.
//
// Wake and Close kick one eventfd. Wake ends the WaitReadable in progress,
// or else the next one (a blocked Read or Write goes on waiting); Close
// ends every wait, then closes the descriptor once no call is using it,
// so a number is never used after it was closed (or reused).
type sysFD struct {
	fd     int
	kick   int          // eventfd: Wake and Close end waits
	mu     sync.RWMutex // held shared by every use of fd; Close takes it alone
	closed atomic.Bool
	woken  atomic.Bool // a Wake not yet seen by WaitReadable
}

// newSysFD takes fd over (it must be non-blocking).
func newSysFD(fd int) (*sysFD, error) {
	kick, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, err
	}
	return &sysFD{fd: fd, kick: kick}, nil
}

// Control implements syscall.RawConn.
func (s *sysFD) Control(f func(fd uintptr)) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return os.ErrClosed
	}
	f(uintptr(s.fd))
	return nil
}

// Read implements syscall.RawConn: f until it reports done, waiting for
// input between calls.
func (s *sysFD) Read(f func(fd uintptr) bool) error { return s.rw(unix.POLLIN, f) }

// Write implements syscall.RawConn: f until it reports done, waiting for
// room between calls.
func (s *sysFD) Write(f func(fd uintptr) bool) error { return s.rw(unix.POLLOUT, f) }

func (s *sysFD) rw(ev int16, f func(fd uintptr) bool) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for {
		if s.closed.Load() {
			return os.ErrClosed
		}
		if f(uintptr(s.fd)) {
			return nil
		}
		if _, err := s.poll(ev, -1); err != nil {
			return err
		}
	}
}

// waitReadable sleeps until readable reports true (checked before and
// after each sleep, so nothing that arrived before the call is missed),
// timeout passes (negative: no limit) or Wake is called (false, nil).
func (s *sysFD) waitReadable(timeout time.Duration, readable func() bool) (bool, error) {
	if s.woken.Swap(false) {
		return false, nil
	}
	if readable() || timeout == 0 {
		return readable(), nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return false, os.ErrClosed
	}
	var end time.Time
	if timeout > 0 {
		end = time.Now().Add(timeout)
	}
	for {
		left := time.Duration(-1)
		if timeout > 0 {
			if left = time.Until(end); left <= 0 {
				return false, nil
			}
		}
		if _, err := s.poll(unix.POLLIN, left); err != nil {
			return false, err
		}
		if s.closed.Load() {
			return false, os.ErrClosed
		}
		if s.woken.Swap(false) {
			return false, nil
		}
		if readable() {
			return true, nil
		}
	}
}

// poll is one poll(2) of fd for ev and of the kick; the caller holds mu
// shared. It reports fd's events (0: the kick or the timeout ended it).
func (s *sysFD) poll(ev int16, timeout time.Duration) (int16, error) {
	p := [2]unix.PollFd{{Fd: int32(s.fd), Events: ev}, {Fd: int32(s.kick), Events: unix.POLLIN}}
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	_, err := unix.Poll(p[:], ms)
	if err != nil && err != unix.EINTR {
		return 0, err
	}
	if p[1].Revents != 0 {
		var b [8]byte
		_, _ = unix.Read(s.kick, b[:])
	}
	return p[0].Revents, nil
}

// events is fd's poll(2) readiness for input, without waiting.
func (s *sysFD) events() int16 {
	var ev int16
	_ = s.Control(func(fd uintptr) {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, err := unix.Poll(p, 0); err == nil && n > 0 {
			ev = p[0].Revents
		}
	})
	return ev
}

// kickWaits writes the eventfd.
func (s *sysFD) kickWaits() {
	one := [8]byte{1}
	_, _ = unix.Write(s.kick, one[:])
}

// Wake ends the WaitReadable in progress, or else the next one.
func (s *sysFD) Wake() {
	s.woken.Store(true)
	s.kickWaits()
}

// Close ends every wait and closes the descriptor once nothing uses it.
func (s *sysFD) Close() error {
	if s.closed.Swap(true) {
		return os.ErrClosed
	}
	s.kickWaits()
	s.mu.Lock()
	defer s.mu.Unlock()
	err := unix.Close(s.fd)
	unix.Close(s.kick)
	return err
}
