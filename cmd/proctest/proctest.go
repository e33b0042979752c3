// Package proctest helps tests that run programs as child processes:
// Lines collects a process's output so a test can wait for a line, and
// Start ties the child's life to the test binary's.
//
// cmd/vrnicd's tests and the interop suite both use it; the suite lives
// outside cmd/, which is why this package is not under cmd/internal.
package proctest

import (
	"bufio"
	"bytes"
	"io"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Lines collects text line by line, so tests can wait for a line and
// still read the whole text. Make it with NewLines.
type Lines struct {
	mu    sync.Mutex
	cond  *sync.Cond
	buf   bytes.Buffer
	lines []string
	eof   bool
}

func NewLines() *Lines {
	l := &Lines{}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// Consume reads r to its end (a pipe: until the writer closes it).
func (l *Lines) Consume(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l.mu.Lock()
		l.lines = append(l.lines, sc.Text())
		l.buf.WriteString(sc.Text() + "\n")
		l.cond.Broadcast()
		l.mu.Unlock()
	}
	l.mu.Lock()
	l.eof = true
	l.cond.Broadcast()
	l.mu.Unlock()
}

// String is the text so far.
func (l *Lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Len is how many lines have come so far: a from for Wait that skips them.
func (l *Lines) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

// Wait waits up to d for a line, at index from or later, for which match
// is true, and returns it and the index after it. ok is false when the
// text ended or d passed first.
func (l *Lines) Wait(from int, d time.Duration, match func(string) bool) (line string, next int, ok bool) {
	deadline := time.Now().Add(d)
	// Wake the wait below at the deadline even if no line comes.
	timer := time.AfterFunc(d, func() { l.mu.Lock(); l.cond.Broadcast(); l.mu.Unlock() })
	defer timer.Stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := from; ; {
		for ; i < len(l.lines); i++ {
			if match(l.lines[i]) {
				return l.lines[i], i + 1, true
			}
		}
		if l.eof || !time.Now().Before(deadline) {
			return "", i, false
		}
		l.cond.Wait()
	}
}

// Start starts cmd so that it gets SIGKILL if the test binary dies, then
// runs life (reading the child's output, waiting for it) in the
// background. Pdeathsig fires when the thread that forked exits, and Go
// ends threads (those of a namespace's Do, for one), so the fork happens
// on a locked thread that life keeps until it returns.
func Start(cmd *exec.Cmd, life func()) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		life()
	}()
	return <-started
}
