package nic

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// eventBell is a Doorbell on an eventfd: a ring adds one.
type eventBell struct {
	fd     int
	closed atomic.Bool
}

func newEventBell(t *testing.T) *eventBell {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	return &eventBell{fd: fd}
}

func (b *eventBell) FD() int { return b.fd }

func (b *eventBell) Drain() (int, bool, error) {
	var v [8]byte
	if _, err := unix.Read(b.fd, v[:]); err == unix.EAGAIN {
		return 0, false, nil
	} else if err != nil {
		return 0, false, err
	}
	return 1, false, nil
}

func (b *eventBell) Close() error {
	b.closed.Store(true)
	return unix.Close(b.fd)
}

func (b *eventBell) ring(t *testing.T) {
	t.Helper()
	if _, err := unix.Write(b.fd, []byte{1, 0, 0, 0, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
}

func newTestDevice(t *testing.T, workers int) *Device {
	t.Helper()
	d, err := NewDevice(Config{MAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, Workers: workers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// An SRQ's doorbell wakes the worker that owns it, which moves the ring's
// posts into the SRQ at most maxSRQPosts per pass, until the ring says no
// more, with the rest of its work running between the pieces (a client
// that posts without end does not hold the worker); after DestroySRQ the
// ring is never drained again and the doorbell is closed.
func TestSRQDoorbellOnWorker(t *testing.T) {
	d := newTestDevice(t, 2)
	pd, err := d.Mem().AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.CreateSRQ(pd, 16, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	bell := newEventBell(t)
	const endless = 1000 // a post that says more this often: "for ever"
	var (
		calls, badMax, callAt atomic.Int32
		stop, destroyed       atomic.Bool
		called                = make(chan struct{}, 1)
		w                     = d.workerFor(s.SRQN())
	)
	post := func(max int) bool {
		if destroyed.Load() {
			t.Error("post ran after DestroySRQ returned")
		}
		if max != maxSRQPosts {
			badMax.Add(1)
		}
		n := calls.Add(1)
		if n == 1 {
			// Work queued for the worker now runs before the ring's next
			// piece, not after all of them.
			w.mu.Lock()
			w.calls = append(w.calls, call{f: func() { callAt.Store(calls.Load()) }, done: make(chan struct{})})
			w.mu.Unlock()
		}
		select {
		case called <- struct{}{}:
		default:
		}
		return !stop.Load() && n < endless
	}
	if err := d.WatchSRQ(s, bell, post); err != nil {
		t.Fatal(err)
	}
	wait := func() {
		t.Helper()
		select {
		case <-called:
		case <-time.After(10 * time.Second):
			t.Fatal("the SRQ's doorbell rang and its ring was not drained")
		}
	}
	bell.ring(t)
	wait()
	d.Sync()
	if n := callAt.Load(); n != 1 {
		t.Fatalf("a call queued during the first piece of an SRQ's ring ran after piece %d", n)
	}
	stop.Store(true)
	d.Sync()
	d.Sync() // a pass whose post said no more has ended: the SRQ is not pending
	select {
	case <-called:
	default:
	}
	n0 := calls.Load()
	d.Sync()
	if n := calls.Load(); n != n0 {
		t.Errorf("post ran %d more times with no doorbell", n-n0)
	}
	bell.ring(t)
	wait()
	if n := badMax.Load(); n > 0 {
		t.Errorf("%d posts were given another bound than maxSRQPosts", n)
	}

	if err := d.WatchSRQ(s, newEventBell(t), post); err == nil {
		t.Error("a second doorbell for one SRQ was taken")
	}
	if err := d.DestroySRQ(s); err != nil {
		t.Fatal(err)
	}
	destroyed.Store(true)
	if !bell.closed.Load() {
		t.Error("DestroySRQ left the doorbell open")
	}
	d.Sync()
	other := newEventBell(t)
	if err := d.WatchSRQ(s, other, post); !errors.Is(err, ErrNoSuchSRQ) {
		t.Errorf("WatchSRQ of a destroyed SRQ: %v, want ErrNoSuchSRQ", err)
	}
	if !other.closed.Load() {
		t.Error("a refused doorbell was left open")
	}
}
