package tool

import (
	"runtime"
	"syscall"
)

// Spinner paces a tool's busy poll of a CQ or of memory: the first
// YieldAfter empty polls in a row only yield to this process's other
// goroutines; each one after gives the CPU to the kernel's other runnable
// tasks (sched_yield), so that on a machine with fewer cores than busy
// processes the daemons the tool waits for get to run.
type Spinner struct{ empty int }

// YieldAfter is how many empty polls spin in the process first.
const YieldAfter = 16

// Idle is called after an empty poll.
func (s *Spinner) Idle() {
	s.empty++
	if s.empty < YieldAfter {
		runtime.Gosched()
		return
	}
	_, _, _ = syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
}

// Moved is called when a poll found something.
func (s *Spinner) Moved() { s.empty = 0 }
