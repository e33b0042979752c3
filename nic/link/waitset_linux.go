package link

import (
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
// is reported again. Wake is for everyone else.
type WaitSet struct {
	f    *os.File // epfd on the Go netpoller
	rc   syscall.RawConn
	epfd int
	wake atomic.Bool // set by Wake before it moves the deadline
	evs  []unix.EpollEvent
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
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("link: epoll set non-blocking: %w", err)
	}
	f := os.NewFile(uintptr(epfd), "vrnic-waitset")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("link: epoll on the netpoller: %w", err)
	}
	return &WaitSet{f: f, rc: rc, epfd: epfd, evs: make([]unix.EpollEvent, maxReady)}, nil
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
	n := 0
	var perr error
	_, err := waitReadable(s.f, s.rc, &s.wake, timeout, func() bool {
		n, perr = s.Poll(ready)
		return n > 0 || perr != nil
	})
	if perr != nil {
		return n, perr
	}
	if err != nil {
		return n, fmt.Errorf("link: waiting on the epoll set: %w", err)
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
	for i := range n {
		ready(int(s.evs[i].Fd), s.evs[i].Events)
	}
	return n, nil
}

// Wake ends a Wait in progress, or the next one if none is: it moves the
// set's read deadline to the past, which readies the waiting goroutine in
// the runtime itself, with no system call (an eventfd member would cost
// one here and a netpoller pass there).
func (s *WaitSet) Wake() { wakeFile(s.f, &s.wake) }

// Close closes the set (not its members).
func (s *WaitSet) Close() error { return s.f.Close() }

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
