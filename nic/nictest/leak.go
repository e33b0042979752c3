package nictest

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"
)

// CheckGoroutines fails t if goroutines started during the test outlive
// it (wireguard-go's goroutineLeakCheck): every goroutine must have an
// owner that waits for it. Call it before creating what the test cleans
// up, so that its check runs after every other cleanup; it waits up to 5 s
// for goroutines on their way out.
func CheckGoroutines(t testing.TB) {
	before := goroutines()
	t.Cleanup(func() {
		if t.Failed() {
			return // a failed test may leave what it started
		}
		deadline := time.Now().Add(leakWait)
		for {
			leaked := leakedSince(before)
			if len(leaked) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("%d goroutines outlived the test:\n\n%s", len(leaked), strings.Join(leaked, "\n\n"))
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// leakWait is how long CheckGoroutines waits for goroutines on their way
// out.
var leakWait = 5 * time.Second

// goroutines maps each goroutine's ID to its stack.
func goroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		s := string(g)
		if !strings.HasPrefix(s, "goroutine ") {
			continue
		}
		id, _, _ := strings.Cut(strings.TrimPrefix(s, "goroutine "), " ")
		out[id] = s
	}
	return out
}

// leakedSince lists the stacks of goroutines not in before, but for the
// test framework's and the runtime's own.
func leakedSince(before map[string]string) []string {
	var leaked []string
	for id, s := range goroutines() {
		if _, ok := before[id]; ok || framework(s) {
			continue
		}
		leaked = append(leaked, s)
	}
	return leaked
}

func framework(stack string) bool {
	for _, f := range []string{"testing.(*T).Run", "testing.tRunner", "testing.runTests", "runtime.goexit0",
		"os/signal.signal_recv", "runtime.ensureSigM", "testing.(*M).startAlarm"} {
		if strings.Contains(stack, f) && !strings.Contains(stack, "vrnicd") {
			return true
		}
	}
	return strings.Contains(stack, "[running]") // the goroutine taking the stacks
}
