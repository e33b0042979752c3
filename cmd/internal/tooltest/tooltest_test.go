package tooltest

import (
	"context"
	"errors"
	"io"
	"testing"
)

// TestStart: a server that listens runs until stopped, its hook unset
// after; one that fails first is reported as not listening, and its
// failure ends the context clients would run with.
func TestStart(t *testing.T) {
	var hook func()
	serve := func(ctx context.Context) Result {
		hook()
		<-ctx.Done()
		return Result{Stdout: "served"}
	}
	s, _, ok := start(context.Background(), funcHook(&hook), serve)
	if !ok || hook == nil {
		t.Fatalf("ok %v, hook set %v", ok, hook != nil)
	}
	select {
	case <-s.Done():
		t.Fatal("ended before Stop")
	default:
	}
	if r := s.Stop(); r.Stdout != "served" || r.Err != nil || hook != nil {
		t.Errorf("stopped: %+v, hook still set %v", r, hook != nil)
	}

	boom := errors.New("boom")
	s, _, ok = start(context.Background(), funcHook(&hook), func(context.Context) Result { return Result{Err: boom} })
	if ok {
		t.Fatal("a server that never listened: ok")
	}
	<-s.ctx.Done() // its failure ends the clients' context
	if r := s.Wait(); r.Err != boom || hook != nil {
		t.Errorf("failed: %+v, hook still set %v", r, hook != nil)
	}
}

// TestCapture: combined puts stderr with stdout.
func TestCapture(t *testing.T) {
	run := func(_ context.Context, args []string, o, e io.Writer) error {
		io.WriteString(o, "out ")
		io.WriteString(e, "err")
		return nil
	}
	if r := capture(context.Background(), run, nil, false); r.Stdout != "out " || r.Stderr != "err" {
		t.Errorf("apart: %+v", r)
	}
	if r := capture(context.Background(), run, nil, true); r.Stdout != "out err" || r.Stderr != "" {
		t.Errorf("combined: %+v", r)
	}
}
