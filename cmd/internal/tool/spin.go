package tool

import (
	"syscall"
)

// Spinner paces a tool's busy poll of a CQ or of memory: the first
// YieldAfter empty polls in a row spin in place; each one after gives the
// CPU to the kernel's other runnable tasks (sched_yield), so that on a
// machine with fewer cores than busy processes the daemons the tool waits
// for get to run. Not runtime.Gosched: with an idle P it wakes another
// thread of the runtime to look for work (wakep), which finds none and
// sleeps again, a futile thread wake-up per poll that cost the daemons on
// the same cores more than the poll itself.
type Spinner struct{ empty int }

// YieldAfter is how many empty polls spin in place first.
const YieldAfter = 16

// Idle is called after an empty poll.
func (s *Spinner) Idle() {
	s.empty++
	if s.empty < YieldAfter {
		return
	}
	_, _, _ = syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
}

// Moved is called when a poll found something.
func (s *Spinner) Moved() { s.empty = 0 }
