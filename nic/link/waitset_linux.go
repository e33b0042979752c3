package link

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// WaitSet is one sleep over many descriptors: an epoll instance that a
// datapath worker waits on itself, in a blocking epoll_pwait2 on its own
// thread. A worker puts its link's socket and its QPs' doorbells in one,
// so that a frame or a client's doorbell wakes the worker's thread
// directly: one kernel wake-up per idle-to-busy transition and no Go
// scheduler hand-off. (On the Go netpoller the same wake cost twice the
// round trip here, measured with BenchmarkWaitSetWake's neighbours and a
// socketpair ping-pong: the netpoller's thread wakes, takes a P, readies
// the worker and parks again, and the worker's first system call then
// wakes the runtime's sysmon, which had parked while every P was idle.)
// The thread keeps its P while it sleeps, in the system call state: the
// runtime's sysmon hands the P on if other goroutines queue for it, and
// the daemon runs at least one P more than it has workers.
//
// Members are level-triggered unless added edge-triggered: what a caller
// leaves unread is reported again. Wake is for everyone else: an eventfd
// of the set's own, which no client ever holds.
type WaitSet struct {
	epfd   int
	wakeFD int         // eventfd member: Wake's
	woken  atomic.Bool // a Wake not yet taken by a Wait or Poll
	evs    []unix.EpollEvent
	pwait2 bool // the kernel has epoll_pwait2 (nanosecond timeouts)
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
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("link: eventfd: %w", err)
	}
	s := &WaitSet{epfd: epfd, wakeFD: efd, evs: make([]unix.EpollEvent, maxReady), pwait2: true}
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
func (s *WaitSet) Poll(ready func(fd int, events uint32)) (int, error) {
	return s.wait(0, ready)
}

// Wait sleeps until a member is ready, timeout passes (negative: no limit)
// or Wake is called, and reports what is ready as Poll does. A member
// ready before the call, or a Wake made before it, ends it at once.
func (s *WaitSet) Wait(timeout time.Duration, ready func(fd int, events uint32)) (int, error) {
	if timeout < 0 {
		timeout = -1
	}
	return s.wait(timeout, ready)
}

// wait is one epoll_pwait2 (timeout 0: a poll); Wake's eventfd is taken
// here and not reported.
func (s *WaitSet) wait(timeout time.Duration, ready func(fd int, events uint32)) (int, error) {
	n, err := s.epollWait(timeout)
	if err == unix.EINTR {
		return 0, nil // a signal: the caller looks again
	}
	if err != nil {
		return 0, fmt.Errorf("link: epoll_wait: %w", err)
	}
	reported := 0
	for i := range n {
		fd := int(s.evs[i].Fd)
		if fd == s.wakeFD {
			s.takeWake()
			continue
		}
		ready(fd, s.evs[i].Events)
		reported++
	}
	return reported, nil
}

// epollWait is epoll_pwait2, with a nanosecond timeout, or on kernels
// before 5.11 epoll_wait with the timeout rounded up to a millisecond.
// It is a blocking system call of this thread (see WaitSet).
func (s *WaitSet) epollWait(timeout time.Duration) (int, error) {
	if s.pwait2 {
		var tsp unsafe.Pointer
		var ts unix.Timespec
		if timeout >= 0 {
			ts = unix.NsecToTimespec(int64(timeout))
			tsp = unsafe.Pointer(&ts)
		}
		r, _, e := unix.Syscall6(unix.SYS_EPOLL_PWAIT2, uintptr(s.epfd), uintptr(unsafe.Pointer(&s.evs[0])),
			uintptr(len(s.evs)), uintptr(tsp), 0, 0)
		if e != unix.ENOSYS {
			if e != 0 {
				return 0, e
			}
			return int(r), nil
		}
		s.pwait2 = false
	}
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	return unix.EpollWait(s.epfd, s.evs, ms)
}

// takeWake resets Wake's eventfd once a wait has seen it: the counter
// first, then the flag. A Wake in between finds the flag still set and
// writes nothing, which is right: the waiter is awake and looks at its
// work after this wait. The other order could leave the flag set over an
// empty counter, and every later Wake would write nothing.
func (s *WaitSet) takeWake() {
	var b [8]byte
	_, _ = unix.Read(s.wakeFD, b[:])
	s.woken.Store(false)
}

// Wake ends a Wait in progress, or the next one if none is. Wakes made
// before the sleeper took the first cost one system call between them.
func (s *WaitSet) Wake() {
	if s.woken.Swap(true) {
		return
	}
	one := [8]byte{1}
	_, _ = unix.Write(s.wakeFD, one[:])
}

// Close closes the set (not its members).
func (s *WaitSet) Close() error {
	unix.Close(s.wakeFD)
	return unix.Close(s.epfd)
}
