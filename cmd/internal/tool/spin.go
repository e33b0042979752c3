package tool

import (
	"syscall"
	"time"
)

// Spinner paces a tool's busy poll of a CQ or of memory: the first
// YieldAfter empty polls in a row spin in place; each one after gives the
// CPU to the kernel's other runnable tasks (sched_yield), so that on a
// machine with fewer cores than busy processes the daemons the tool waits
// for get to run. Not runtime.Gosched: with an idle P it wakes another
// thread of the runtime to look for work (wakep), which finds none and
// sleeps again, a futile thread wake-up per poll that cost the daemons on
// the same cores more than the poll itself.
//
// With Backoff set, for a bandwidth loop whose queues hold far more work
// than a short sleep lets drain (perftest's tx_depth 128 WRs are 6 ms of
// 64 KiB WRITEs at 10 Gb/s), a streak of empty polls longer than
// BackoffAfter sleeps instead, napMin at first and twice as long each time
// up to napMax: yielding between polls still took half a core from the
// two daemons sharing this machine's two cores (docs/performance.md).
type Spinner struct {
	Backoff bool

	empty int
	since time.Time     // the first yield of this empty streak
	nap   time.Duration // the next sleep (Backoff)
}

// YieldAfter is how many empty polls spin in place first.
const YieldAfter = 16

// Backoff's pacing: after BackoffAfter of empty polls, sleeps from napMin
// doubling to napMax.
const (
	BackoffAfter = 20 * time.Microsecond
	napMin       = 10 * time.Microsecond
	napMax       = 50 * time.Microsecond
)

// Idle is called after an empty poll.
func (s *Spinner) Idle() {
	s.empty++
	if s.empty < YieldAfter {
		return
	}
	if s.Backoff {
		now := time.Now()
		if s.empty == YieldAfter {
			s.since = now
		} else if now.Sub(s.since) >= BackoffAfter {
			s.nap = min(max(s.nap, napMin), napMax)
			nap(s.nap)
			s.nap *= 2
			return
		}
	}
	_, _, _ = syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
}

// Moved is called when a poll found something.
func (s *Spinner) Moved() { s.empty, s.nap = 0, 0 }

// nap sleeps d on this thread (nanosleep): time.Sleep rounds a sleep under
// a millisecond up to one when the runtime waits for it in its netpoller
// (710 us for a 10 us time.Sleep, measured here).
func nap(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil)
}
