package main

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/google/gopacket/pcapgo"
)

func pcapFrames(t *testing.T, path string) int {
	t.Helper()
	n, err := countPcap(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return n
}

// countPcap counts the frames of a pcap file.
func countPcap(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		return 0, err
	}
	n := 0
	for {
		if _, _, err := r.ReadPacketData(); err != nil {
			return n, nil
		}
		n++
	}
}

// SIGHUP's pcap handling: a reload keeps writing the same file, a file
// moved away (logrotate) or a new path starts a new one, "" stops.
func TestPcapReopen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cap.pcap")
	frame := make([]byte, 60)
	var p pcapTap
	if err := p.WriteFrame(frame); err != nil {
		t.Fatal(err) // no file: frames are ignored
	}
	if err := p.open(path); err != nil {
		t.Fatal(err)
	}
	p.WriteFrame(frame)
	if switched, err := p.reopen(path); err != nil || switched {
		t.Fatalf("reload with the same file: switched=%v err=%v", switched, err)
	}
	p.WriteFrame(frame)
	p.flush()
	if n := pcapFrames(t, path); n != 2 {
		t.Fatalf("%d frames before rotation, want 2 (a reload must not truncate)", n)
	}

	os.Rename(path, path+".1")
	if switched, err := p.reopen(path); err != nil || !switched {
		t.Fatalf("after rename: switched=%v err=%v", switched, err)
	}
	p.WriteFrame(frame)
	p.flush()
	if n1, n := pcapFrames(t, path+".1"), pcapFrames(t, path); n1 != 2 || n != 1 {
		t.Fatalf("rotated file has %d frames, new %d; want 2 and 1", n1, n)
	}

	other := filepath.Join(dir, "other.pcap")
	if switched, err := p.reopen(other); err != nil || !switched {
		t.Fatalf("new path: switched=%v err=%v", switched, err)
	}
	if switched, err := p.reopen(""); err != nil || !switched {
		t.Fatalf("stop: switched=%v err=%v", switched, err)
	}
	p.WriteFrame(frame)
	if n := pcapFrames(t, other); n != 0 {
		t.Fatalf("%d frames after capture stopped", n)
	}
	if err := p.open(filepath.Join(dir, "no", "such", "dir.pcap")); err == nil {
		t.Fatal("open in a missing directory succeeded")
	}
}

// A symlink planted at the capture path, before the daemon opens it or
// after the capture was moved away and before the SIGHUP reopen, is
// refused (ELOOP): its target keeps contents and mode, and the old capture
// goes on.
func TestPcapSymlinkPlanted(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	intact := func(what string) {
		t.Helper()
		b, err := os.ReadFile(victim)
		fi, _ := os.Stat(victim)
		if err != nil || string(b) != "precious" || fi.Mode().Perm() != 0o644 {
			t.Fatalf("%s: victim %q mode %v (%v)", what, b, fi.Mode(), err)
		}
	}
	path := filepath.Join(dir, "cap.pcap")
	if err := os.Symlink(victim, path); err != nil {
		t.Fatal(err)
	}
	var p pcapTap
	defer p.close()
	if err := p.open(path); !errors.Is(err, syscall.ELOOP) {
		t.Fatalf("symlink at start: %v, want ELOOP", err)
	}
	intact("at start")
	os.Remove(path)

	if err := p.open(path); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("capture mode %v (%v), want 0600: it holds every client's traffic", fi.Mode(), err)
	}
	frame := make([]byte, 60)
	p.WriteFrame(frame)
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, path); err != nil {
		t.Fatal(err)
	}
	if _, err := p.reopen(path); !errors.Is(err, syscall.ELOOP) {
		t.Fatalf("symlink at reopen: %v, want ELOOP", err)
	}
	intact("at reopen")
	p.WriteFrame(frame)
	p.flush()
	if n := pcapFrames(t, path+".1"); n != 2 {
		t.Fatalf("the old capture has %d frames, want 2 (it goes on after a refused reopen)", n)
	}
}
