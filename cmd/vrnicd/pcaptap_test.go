package main

import (
	"os"
	"path/filepath"
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
