package nic

import (
	"runtime"
	"time"

	"github.com/vrnic/vrnicd/transport/clock"
	"golang.org/x/sys/unix"
)

// A worker sleeps in one place, its link.WaitSet: the link it reads (if
// any) and the doorbells of the QPs and SRQs it owns are members, so a
// frame or a client's doorbell wakes the worker's thread directly (it is
// the one owner of the datapath's wake-ups), and work queued
// from other goroutines (packets for its QPs, posts, notifications) wakes
// it through signal. Busy, it polls the set without waiting once a pass,
// so a busy link never starves a doorbell.

// Doorbell is the daemon's end of a client's doorbell for a QP: the client
// rings it after publishing into a ring whose consumer said it was idle.
// The QP's worker sleeps on FD; when it polls readable the worker calls
// Drain and, if it took a ring, runs both sides of the QP. closed means the
// client's end is gone (it never rings again); the worker then stops
// watching FD. CreateQP takes the doorbell over: the device closes it when
// the QP is destroyed, or at once if CreateQP fails.
type Doorbell interface {
	FD() int
	Drain() (n int, closed bool, err error)
	Close() error
}

// signal wakes the worker if it sleeps, or is about to: idle sets
// sleeping, then looks at the queues again, so a producer that queued
// before that look is seen by it, and one that queued after sees sleeping.
func (w *worker) signal() {
	if w.sleeping.Load() {
		w.ws.Wake()
	}
}

// idle arms the rings the worker polled and sleeps on the wait set until
// a member is ready, work is queued, the next timer is due or the worker
// is stopped (false). Doorbells found ready are rung (ring) before it
// returns. The sleep is a blocking system call of the worker's thread
// (link.WaitSet) that keeps the P: the callers of the calls it ran had
// their turn already (yieldToCallers), and with no P spare anything else
// queued on the P has it first (noSpareP), or they would wait for sysmon.
func (w *worker) idle() bool {
	if w.stopping() {
		return false
	}
	if noSpareP() {
		runtime.Gosched() // what waits for this P runs before the sleep keeps it
	}
	w.sleeping.Store(true)
	if w.queued() || !w.armPolled() {
		w.sleeping.Store(false)
		return true
	}
	timeout, t := w.sleepFor()
	_, err := w.ws.Wait(timeout, w.ring)
	if t != nil {
		t.Stop()
	}
	w.sleeping.Store(false)
	if err != nil {
		w.waitFailed(err)
	}
	return !w.stopping()
}

// sleepFor is how long idle may sleep: until the next timer. With the
// system clock that is the wait's timeout; an injected clock fires the
// timer itself (a signal), so tests that advance it drive the workers.
func (w *worker) sleepFor() (time.Duration, clock.Timer) {
	_, next, ok := w.timers.Peek()
	if !ok {
		return -1, nil
	}
	d := max(next.Sub(w.d.clock.Now()), 0)
	if _, sys := w.d.clock.(clock.System); sys {
		return d, nil
	}
	return -1, w.d.clock.AfterFunc(d, w.signal)
}

func (w *worker) stopping() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// pollBells rings the doorbells that are ready, without waiting.
func (w *worker) pollBells() {
	if len(w.bells) == 0 && len(w.srqBells) == 0 && w.linkFD < 0 {
		return
	}
	if _, err := w.ws.Poll(w.ring); err != nil {
		w.waitFailed(err)
	}
}

// waitFailed: the wait set itself failed, which only a bug or the process
// running out of resources explains. The worker keeps going, polling, at
// the pace of a short sleep.
func (w *worker) waitFailed(err error) {
	w.d.log.Error("datapath worker: wait set failed", "err", err)
	time.Sleep(time.Millisecond)
}

// ring is the wait set's report of a ready member: the link (only a
// failure needs handling; the loop reads it every pass), a QP's doorbell,
// which runs both sides of its QP this pass, or an SRQ's (ringSRQ).
func (w *worker) ring(fd int, events uint32) {
	if fd == w.linkFD {
		if events&(unix.EPOLLERR|unix.EPOLLHUP) != 0 {
			if err := w.rcv.PollError(); err != nil {
				w.linkFailed(err)
			}
		}
		return
	}
	if b := w.srqBells[fd]; b != nil {
		w.ringSRQ(fd, b)
		return
	}
	q := w.bells[fd]
	if q == nil {
		_ = w.ws.Remove(fd) // not ours any more: never reported again
		return
	}
	n, closed, err := q.bell.Drain()
	if n > 0 {
		w.poll(q) // the client found the ring armed: it is not any more
	}
	if closed || err != nil {
		// Level-triggered: a hung-up or failing doorbell would be
		// reported forever. The QP stays; only its wake-ups stop.
		_ = w.ws.Remove(fd)
		delete(w.bells, fd)
	}
	if n > 0 && !q.gone {
		w.touch(q, true, true)
	}
}

// addBell makes q's doorbell a member of the wait set (on the worker).
func (w *worker) addBell(q *QP) error {
	fd := q.bell.FD()
	if err := w.ws.Add(fd, false); err != nil {
		return err
	}
	w.bells[fd] = q
	return nil
}

// dropBell stops watching q's doorbell and closes it (on the worker, or
// on the caller once the worker has stopped and closed the set).
func (w *worker) dropBell(q *QP) {
	if q.bell == nil {
		return
	}
	fd := q.bell.FD()
	if !w.stopped && w.bells[fd] == q {
		_ = w.ws.Remove(fd)
		delete(w.bells, fd)
	}
	_ = q.bell.Close()
	q.bell = nil
}

// closeWaitSet closes the set as the loop ends; doorbells still there are
// closed by their QPs' Destroy and DestroySRQ.
func (w *worker) closeWaitSet() {
	w.stopped = true
	_ = w.ws.Close()
}
