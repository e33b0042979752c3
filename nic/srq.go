package nic

import (
	"fmt"
	"sync/atomic"

	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/mem"
)

// An SRQ's doorbell, like a QP's, is a member of one datapath worker's
// wait set, with its link and its QPs' doorbells (worker_wait.go): that
// worker owns the SRQ's wake-ups, and moves what the client posts in the
// ring into the SRQ. The workers of the SRQ's QPs move it too, before
// each request they handle (drainRecv), as they do a QP's own receive
// ring, and take WQEs from the SRQ itself.

// maxSRQPosts bounds the receives one pass moves from an SRQ's ring into
// the SRQ: a client that keeps posting (or ringing) gets its SRQ drained
// a bounded piece per pass, after which the worker's other work runs,
// and the rest in the next pass.
const maxSRQPosts = 64

// srqBell is an SRQ's doorbell in its worker's wait set.
type srqBell struct {
	w    *worker
	bell Doorbell
	post func(max int) (more bool)

	queued atomic.Bool // in w.srqReady: post runs in the worker's next pass
	gone   bool        // DestroySRQ: post never runs again (w's)
}

// CreateSRQ makes a shared receive queue in pd.
func (d *Device) CreateSRQ(pd mem.PD, maxWR, maxSGE uint32, onLimit func()) (*transport.SRQ, error) {
	if maxWR > d.cfg.Limits.MaxQPWR || maxSGE > d.cfg.Limits.MaxSGE {
		return nil, fmt.Errorf("%w: SRQ of %d WRs × %d SGEs (max %d × %d)", transport.ErrInvalid, maxWR, maxSGE,
			d.cfg.Limits.MaxQPWR, d.cfg.Limits.MaxSGE)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	if len(d.srqs) >= d.cfg.Limits.MaxSRQ {
		return nil, fmt.Errorf("%w: %d SRQs", ErrLimit, len(d.srqs))
	}
	if err := d.mem.HoldPD(pd); err != nil {
		return nil, err
	}
	s, err := transport.NewSRQ(d.nextSRQ, pd, maxWR, maxSGE, onLimit)
	if err != nil {
		_ = d.mem.ReleasePD(pd)
		return nil, err
	}
	d.nextSRQ++
	d.srqs[s] = nil
	return s, nil
}

// WatchSRQ makes bell the doorbell of s's ring: the client rings it after
// posting into a ring whose consumer said it was idle. The worker that
// owns s sleeps on it and, when it rings, calls post in its next passes
// until post reports no more: post moves at most max posted receives from
// the ring into s and reports whether the ring may hold more (it stopped
// at max). The workers of s's QPs call post too, before each request
// (drainRecv), so post serialises itself; a QP sees it only if made after
// WatchSRQ. WatchSRQ takes the doorbell over: DestroySRQ closes it, or
// WatchSRQ at once if it fails.
//
// The SRQ's worker is the one its SRQN maps to, as a QP's is by QPN: its
// QPs may be anyone's, so no worker is nearer to it than another, and
// the mapping spreads SRQs over the workers.
func (d *Device) WatchSRQ(s *transport.SRQ, bell Doorbell, post func(max int) (more bool)) error {
	b := &srqBell{w: d.workerFor(s.SRQN()), bell: bell, post: post}
	d.mu.Lock()
	old, ok := d.srqs[s]
	if ok && old == nil {
		d.srqs[s] = b // DestroySRQ drops it from here on
	}
	d.mu.Unlock()
	switch {
	case !ok:
		_ = bell.Close()
		return ErrNoSuchSRQ
	case old != nil:
		_ = bell.Close()
		return fmt.Errorf("%w: SRQ %d has a doorbell", transport.ErrInvalid, s.SRQN())
	}
	var err error
	b.w.run(call{f: func() {
		if !b.gone {
			err = b.w.addSRQBell(b)
		}
	}})
	if err != nil {
		d.mu.Lock()
		if d.srqs[s] == b {
			d.srqs[s] = nil
		}
		d.mu.Unlock()
		b.w.run(call{f: func() { b.w.dropSRQBell(b) }})
		return fmt.Errorf("nic: SRQ doorbell: %w", err)
	}
	return nil
}

// DestroySRQ releases an SRQ (EBUSY while a QP uses it). Once it returns,
// the SRQ's post (WatchSRQ) is not running and never runs again, and its
// doorbell is closed.
func (d *Device) DestroySRQ(s *transport.SRQ) error {
	d.mu.Lock()
	b, ok := d.srqs[s]
	if !ok {
		d.mu.Unlock()
		return ErrNoSuchSRQ
	}
	for _, q := range d.qps {
		if q.tq.SRQ() == s {
			d.mu.Unlock()
			return fmt.Errorf("SRQ %d is used by QP %#x: %w", s.SRQN(), q.QPN(), errBusy)
		}
	}
	delete(d.srqs, s)
	err := d.mem.ReleasePD(s.PD())
	d.mu.Unlock()
	if b != nil {
		// On the worker: a post it is running ends first (and not under
		// d.mu, which the worker's ingress takes).
		b.w.run(call{f: func() { b.w.dropSRQBell(b) }})
	}
	return err
}

// addSRQBell makes b's doorbell a member of the wait set (on the worker).
func (w *worker) addSRQBell(b *srqBell) error {
	fd := b.bell.FD()
	if err := w.ws.Add(fd, false); err != nil {
		return err
	}
	w.srqBells[fd] = b
	return nil
}

// ringSRQ is b's doorbell found ready: its ring is drained in the next
// pass.
func (w *worker) ringSRQ(fd int, b *srqBell) {
	n, closed, err := b.bell.Drain()
	if n > 0 {
		w.queueSRQ(b)
	}
	if closed || err != nil {
		// As for a QP's (ring): the SRQ stays; only its wake-ups stop.
		_ = w.ws.Remove(fd)
		delete(w.srqBells, fd)
	}
}

// queueSRQ has b's ring drained in the worker's next pass (from any
// goroutine; b is this worker's).
func (w *worker) queueSRQ(b *srqBell) {
	if !b.queued.CompareAndSwap(false, true) {
		return
	}
	w.mu.Lock()
	w.srqReady = append(w.srqReady, b)
	w.mu.Unlock()
	w.signal()
}

// postSRQs moves receives from the rings of the SRQs queued for this pass
// into them, at most maxSRQPosts each; an SRQ whose ring may hold more is
// queued again, for the next pass (the client was not asked to ring).
func (w *worker) postSRQs() {
	for _, b := range w.srqRdy {
		b.queued.Store(false) // before post: a ring meanwhile queues it again
		if !b.gone && b.post(maxSRQPosts) {
			w.queueSRQ(b)
		}
	}
	clear(w.srqRdy)
}

// postBefore is drainRecv for a QP of the SRQ, on the QP's worker, before
// a request: the SRQ's post serialises itself with its worker's. What is
// left past maxSRQPosts is its worker's to move.
func (b *srqBell) postBefore() {
	if b.post(maxSRQPosts) {
		b.w.queueSRQ(b)
	}
}

// dropSRQBell stops watching b's doorbell and closes it (on the worker,
// or on the caller once the worker has stopped and closed the set).
func (w *worker) dropSRQBell(b *srqBell) {
	if b.gone {
		return
	}
	b.gone = true
	fd := b.bell.FD()
	if !w.stopped && w.srqBells[fd] == b {
		_ = w.ws.Remove(fd)
		delete(w.srqBells, fd)
	}
	_ = b.bell.Close()
}
