package nictest

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB whose cleanups and errors the test runs and reads.
type recorder struct {
	testing.TB
	cleanups []func()
	errs     []string
}

func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Failed() bool { return len(r.errs) > 0 }
func (r *recorder) Helper()      {}

func (r *recorder) finish() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

func leakedWorker(stop chan struct{}) { <-stop }

// A goroutine the test started and nobody waits for is reported, with its
// stack; one that ends in time is not.
func TestCheckGoroutines(t *testing.T) {
	defer func(w time.Duration) { leakWait = w }(leakWait)
	leakWait = 200 * time.Millisecond

	r := &recorder{TB: t}
	CheckGoroutines(r)
	stop := make(chan struct{})
	go leakedWorker(stop)
	r.finish()
	close(stop)
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "leakedWorker") {
		t.Fatalf("a leaked goroutine: errors %q, want one naming leakedWorker", r.errs)
	}

	r = &recorder{TB: t}
	CheckGoroutines(r)
	done := make(chan struct{})
	go func() { time.Sleep(50 * time.Millisecond); close(done) }()
	r.finish()
	<-done
	if len(r.errs) != 0 {
		t.Fatalf("a goroutine that ended in time was reported: %q", r.errs)
	}
}
