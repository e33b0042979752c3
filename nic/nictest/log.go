package nictest

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
)

// TestLog is a logger into t's log at Warn level and above, so a failing
// test shows what the daemon found wrong (a QP's send queue error and its
// reason, a link that failed), and a passing one stays quiet. It writes
// nothing once the test's cleanups have run: a late message is dropped,
// not a panic.
func TestLog(t testing.TB, name string) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(w.end)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn})).With("dev", name)
}

type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool // +checklocks:mu
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Logf("%s", bytes.TrimRight(p, "\n"))
	}
	return len(p), nil
}

func (w *testWriter) end() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}
