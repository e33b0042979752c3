package main

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

func TestGateHandler(t *testing.T) {
	var buf bytes.Buffer
	g := newGate(slog.NewTextHandler(&buf, nil))
	log := slog.New(g)
	log.Info("one")
	log.With("k", "v").Warn("two")
	if buf.Len() != 0 {
		t.Fatalf("written before release: %q", buf.String())
	}
	g.release(true)
	log.Info("three")
	if out := buf.String(); strings.Count(out, "\n") != 3 || !strings.Contains(out, "msg=two k=v") ||
		strings.Index(out, "one") > strings.Index(out, "two") || strings.Index(out, "two") > strings.Index(out, "three") {
		t.Fatalf("after release: %q", out)
	}

	// A failed start drops what was held; concurrent writers keep order
	// with the release.
	buf.Reset()
	g = newGate(slog.NewTextHandler(&buf, nil))
	log = slog.New(g)
	log.Warn("teardown noise")
	g.release(false)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); log.Info("after") }()
	}
	wg.Wait()
	if out := buf.String(); strings.Contains(out, "noise") || strings.Count(out, "after") != 4 {
		t.Fatalf("after a dropping release: %q", out)
	}
}
