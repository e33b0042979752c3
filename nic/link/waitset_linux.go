package link

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// WaitSet is one sleep over many descriptors: an epoll instance whose own
// descriptor sits on the Go netpoller. A datapath worker puts its link's
// socket and its QPs' doorbells in one, so that a frame or a client's
// doorbell readies the worker itself, with no goroutine per doorbell to
// hand the event over, and a sleeping worker holds no thread. (Sleeping in
// epoll_wait on the worker's own thread was tried: the thread keeps its P
// through the system call until sysmon takes it back, which with two Ps
// stalled the rest of the daemon for milliseconds.) Members are
// level-triggered unless added edge-triggered: what a caller leaves unread
// is reported again. Wake (an eventfd member) is for everyone else.
type WaitSet struct {
	f         *os.File // epfd on the Go netpoller
	rc        syscall.RawConn
	epfd, efd int
	woken     atomic.Bool // a Wake is in efd, not yet taken
	woke      bool        // wait took a Wake
	evs       []unix.EpollEvent
}

// maxReady bounds the descriptors one Poll or Wait reports; the rest stay
// ready for the next.
const maxReady = 64

// NewWaitSet makes an empty set.
func NewWaitSet() (*WaitSet, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("link: epoll_create1: %w", err)
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("link: eventfd: %w", err)
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		unix.Close(efd)
		return nil, err
	}
	f := os.NewFile(uintptr(epfd), "vrnic-waitset")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		unix.Close(efd)
		return nil, err
	}
	s := &WaitSet{f: f, rc: rc, epfd: epfd, efd: efd, evs: make([]unix.EpollEvent, maxReady)}
	if err := s.Add(efd, false); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Add watches fd for input. Errors and hang-ups are reported too (epoll
// always does): a level-triggered member that fails must be removed. An
// edge-triggered one (edge) is reported once per new event, which suits
// a link the caller reads until empty before it waits.
func (s *WaitSet) Add(fd int, edge bool) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
	if edge {
		ev.Events |= unix.EPOLLET
	}
	if err := unix.EpollCtl(s.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("link: epoll add %d: %w", fd, err)
	}
	return nil
}

// Remove stops watching fd; it must be called before fd is closed if the
// caller may still poll (the number could be reused).
func (s *WaitSet) Remove(fd int) error {
	if err := unix.EpollCtl(s.epfd, unix.EPOLL_CTL_DEL, fd, nil); err != nil {
		return fmt.Errorf("link: epoll remove %d: %w", fd, err)
	}
	return nil
}

// Poll calls ready for each member ready now, without waiting, and
// returns how many it reported.
func (s *WaitSet) Poll(ready func(fd int, events uint32)) (int, error) { return s.wait(0, ready) }

// Wait sleeps until a member is ready, timeout passes (negative: no limit)
// or Wake is called, and reports what is ready as Poll does. The set is
// polled before the goroutine parks, so nothing that became ready since
// the last Poll is missed.
func (s *WaitSet) Wait(timeout time.Duration, ready func(fd int, events uint32)) (int, error) {
	if timeout == 0 {
		return s.wait(0, ready)
	}
	var dl time.Time
	if timeout > 0 {
		dl = time.Now().Add(timeout)
	}
	if err := s.f.SetReadDeadline(dl); err != nil {
		return 0, err
	}
	n := 0
	var werr error
	err := s.rc.Read(func(uintptr) bool {
		n, werr = s.wait(0, ready)
		return n > 0 || werr != nil || s.woke
	})
	s.woke = false
	if werr != nil {
		return n, werr
	}
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return n, err
	}
	return n, nil
}

func (s *WaitSet) wait(ms int, ready func(fd int, events uint32)) (int, error) {
	n, err := unix.EpollWait(s.epfd, s.evs, ms)
	if err == unix.EINTR {
		return 0, nil // a signal: the caller looks again
	}
	if err != nil {
		return 0, fmt.Errorf("link: epoll_wait: %w", err)
	}
	k := 0
	for i := range n {
		fd := int(s.evs[i].Fd)
		if fd == s.efd {
			s.takeWake()
			s.woke = true
			continue
		}
		ready(fd, s.evs[i].Events)
		k++
	}
	return k, nil
}

// takeWake empties the eventfd, then lets the next Wake write again: a
// Wake in between finds woken still set and writes nothing, which is
// safe because its caller queued its work before it, and the owner looks
// at its queues after this.
func (s *WaitSet) takeWake() {
	var b [8]byte
	_, _ = unix.Read(s.efd, b[:])
	s.woken.Store(false)
}

var wakeOne = [8]byte{1}

// Wake ends a Wait in progress, or the next one if none is. Wakes that
// come before the owner has taken the last cost no system call.
func (s *WaitSet) Wake() {
	if s.woken.CompareAndSwap(false, true) {
		_, _ = unix.Write(s.efd, wakeOne[:])
	}
}

// Close closes the set (not its members).
func (s *WaitSet) Close() error {
	unix.Close(s.efd)
	return s.f.Close()
}

// rawFD is Poller.PollFD for a file on the netpoller: the descriptor, read
// through rc so the file is not switched to blocking mode (os.File.Fd
// would do that).
func rawFD(rc syscall.RawConn) (int, error) {
	fd := -1
	if err := rc.Control(func(f uintptr) { fd = int(f) }); err != nil {
		return -1, err
	}
	return fd, nil
}

// PollFD implements Poller: with a receive ring the socket is readable
// when the ring holds a frame for user space (packet_poll).
func (r *Raw) PollFD() (int, error) { return rawFD(r.rc) }

// PollError implements Poller: the socket's pending error (the
// interface went away), which a ring does not report by itself.
func (r *Raw) PollError() error { return r.sockErr() }

// PollFD implements Poller.
func (t *TAP) PollFD() (int, error) { return rawFD(t.rc) }

// PollError implements Poller: a TAP whose device is gone polls as an
// error, and its reads fail with EBADFD.
func (t *TAP) PollError() error {
	if t.closed.Load() {
		return closedError(t.name)
	}
	if pollEvents(t.rc)&pollBad != 0 {
		return t.fdErr(unix.EBADFD)
	}
	return nil
}
