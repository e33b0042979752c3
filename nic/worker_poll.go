package nic

import (
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// A busy worker polls; an idle one sleeps (NAPI-style). While it runs, the
// send rings of the QPs it polls stay unarmed, so their clients' posts
// ring no doorbell: the worker sees them by their producer index, a load
// from shared memory. It arms a ring (the client's next post rings) only
// before it sleeps, or once the ring has been still for stillPasses
// passes, so that the rings it polls are the ones in use. The link's
// receive ring is polled the same way. Armed doorbells of other QPs are
// polled with one epoll_pwait2 at most every bellInterval while busy.
// After the last pass that moved anything, the worker keeps polling for
// the device's BusyPoll, yielding the CPU between looks, before it arms
// and sleeps: a reply that comes within it costs no wake-up.

// stillPasses is how many passes a polled ring may go without a post
// before the worker arms it and stops polling it.
const stillPasses = 256

// bellInterval bounds how long a busy worker goes without looking at the
// doorbells of the QPs it does not poll.
const bellInterval = 50 * time.Microsecond

// poll polls the QP's send ring while the worker is busy; the client has
// just rung (its doorbell or NotifySend), so the ring is unarmed.
func (w *worker) poll(q *QP) {
	if q.psq == nil || q.polled || q.gone {
		return
	}
	q.polled, q.stillPasses = true, 0
	w.polled = append(w.polled, q)
}

// pollRings runs the send side of each polled QP whose client posted
// since the last look, and arms those that have been still for
// stillPasses passes (keeping any that posted meanwhile).
func (w *worker) pollRings() bool {
	moved := false
	keep := w.polled[:0]
	for _, q := range w.polled {
		switch {
		case q.gone:
			q.polled = false
			continue
		case q.psq.Moved():
			q.stillPasses = 0
			w.touch(q, true, false)
			moved = true
		case q.stillPasses < stillPasses:
			q.stillPasses++
		case q.psq.Arm():
			q.polled = false
			continue
		}
		keep = append(keep, q)
	}
	clear(w.polled[len(keep):])
	w.polled = keep
	return moved
}

// armPolled arms every polled ring before the worker sleeps; false: a
// client posted meanwhile (the worker looks again, the rings stay
// polled).
func (w *worker) armPolled() bool {
	for i, q := range w.polled {
		if q.gone {
			continue
		}
		if !q.psq.Arm() {
			// Rings armed so far are fine either way: a post rings.
			clear(w.polled[:i])
			w.polled = append(w.polled[:0], w.polled[i:]...)
			for _, p := range w.polled {
				p.stillPasses = 0
			}
			return false
		}
		q.polled = false
	}
	clear(w.polled)
	w.polled = w.polled[:0]
	return true
}

// bellsDue reports whether a busy worker should poll its doorbells now.
func (w *worker) bellsDue(now int64) bool {
	if now-w.bellsAt < int64(bellInterval) {
		return false
	}
	w.bellsAt = now
	return true
}

// spin is the busy-poll after a round that found nothing: within the
// device's BusyPoll since the last progress it yields the CPU to whatever
// else is runnable (sched_yield; on a machine with fewer cores than busy
// processes the peer it waits for may need this one), with no P spare
// also its P every goschedInterval (noSpareP), and reports true, the
// worker looking again; past it, false: arm and sleep.
func (w *worker) spin() bool {
	budget := w.d.cfg.BusyPoll
	if budget <= 0 {
		return false
	}
	now := nanotime()
	if w.stillSince == 0 {
		w.stillSince = now
	}
	if now-w.stillSince >= int64(budget) {
		w.stillSince = 0
		return false
	}
	if now-w.schedAt >= int64(goschedInterval) {
		w.schedAt = now // GOMAXPROCS takes the scheduler's lock: not every look
		if noSpareP() {
			runtime.Gosched()
		}
	}
	_, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	return true
}

// nanotime is a monotonic clock reading in nanoseconds, for the worker's
// own pacing (never for the engine's timers, which take the device's
// clock).
func nanotime() int64 { return int64(time.Since(epoch)) }

var epoch = time.Now()

// goschedInterval is how long a busy-polling worker keeps its P from the
// goroutines queued on it when no P is spare (spin).
const goschedInterval = 20 * time.Microsecond

// liveWorkers counts the process's running workers, of every device.
var liveWorkers atomic.Int32

// noSpareP reports whether every P (GOMAXPROCS) may be held by a worker.
// A busy-polling worker keeps its P (sched_yield gives up the core, not
// the P), and so does one asleep in epoll_pwait2 until sysmon takes it
// back, up to 10 ms later; a goroutine the worker readied on its P (a
// link reader it wrote a frame to, an in-process caller) is stolen by a
// spare P at once, but with none it waits for the worker. vrnicd keeps a
// P spare (reservePs); two devices in one process on two cores do not:
// there an 8 B WRITE between them took 330 us, 3.5 ms at p90, until the
// worker let such goroutines run (spin, idle). With a P spare it does
// not: each Gosched wakes an idle thread for nothing.
func noSpareP() bool { return int(liveWorkers.Load()) >= runtime.GOMAXPROCS(0) }
