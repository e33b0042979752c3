package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestCPUProfile: the stop function leaves a complete profile (pprof's
// gzip-compressed protobuf), and an unwritable path is an error.
func TestCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	stop, err := startCPUProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		t.Fatalf("profile does not start with gzip's magic: % x", b[:min(len(b), 8)])
	}
	if _, err := startCPUProfile(filepath.Join(t.TempDir(), "no", "such", "dir")); err == nil {
		t.Fatal("no error for a path in a missing directory")
	}
}
