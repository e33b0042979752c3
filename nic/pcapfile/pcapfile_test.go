package pcapfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// goldenFrames returns the frames of a kernel rxe capture.
func goldenFrames(t *testing.T) [][]byte {
	f, err := os.Open("../../testdata/roce/rc_send_only.pcap")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for {
		d, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
}

func TestRoundTripConcurrent(t *testing.T) {
	frames := goldenFrames(t)
	path := filepath.Join(t.TempDir(), "x.pcap")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Unix(1700000000, 123456789)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, f := range frames {
				if err := w.WriteFrameAt(base.Add(time.Duration(g*1000+i)), f); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteFrame(frames[0]); !errors.Is(err, ErrClosed) {
		t.Fatalf("write after Close: %v", err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if r.LinkType() != layers.LinkTypeEthernet {
		t.Fatalf("link type %v", r.LinkType())
	}
	// gopacket v1.1.19's Reader.Resolution is inverted; check the magic.
	hdr, _ := os.ReadFile(path)
	if len(hdr) < 4 || binary.LittleEndian.Uint32(hdr) != 0xa1b23c4d {
		t.Fatalf("not a nanosecond pcap: magic % x", hdr[:4])
	}
	counts := map[string]int{}
	n := 0
	for {
		d, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ci.Timestamp.Before(base) || ci.Timestamp.Sub(base) > 4000 {
			t.Errorf("timestamp %v lost nanoseconds", ci.Timestamp)
		}
		counts[string(d)]++
		n++
	}
	if n != 4*len(frames) {
		t.Fatalf("read %d frames, want %d", n, 4*len(frames))
	}
	for i, fr := range frames {
		if counts[string(fr)] < 4 {
			t.Fatalf("frame %d recorded %d times", i, counts[string(fr)])
		}
	}
}

func TestSnapLenAndStream(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, DefaultSnapLen+100)
	if err := w.WriteFrame(big); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := pcapgo.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	d, ci, err := r.ReadPacketData()
	if err != nil {
		t.Fatal(err)
	}
	if len(d) != DefaultSnapLen || ci.Length != len(big) {
		t.Fatalf("captured %d of %d", len(d), ci.Length)
	}
}

// TestTsharkDecodesRoCE checks that Wireshark's dissector reads our file as
// RoCEv2 (skipped where tshark is not installed).
func TestTsharkDecodesRoCE(t *testing.T) {
	ts, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("skipped: tshark not installed")
	}
	path := filepath.Join(t.TempDir(), "x.pcap")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range goldenFrames(t) {
		if err := w.WriteFrame(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(ts, "-r", path, "-Y", "infiniband", "-T", "fields", "-e", "infiniband.bth.opcode").CombinedOutput()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	var ops []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.Contains(l, "Running as user") {
			ops = append(ops, l)
		}
	}
	// rc_send_only.pcap: SEND_ONLY (4) and ACKNOWLEDGE (17) packets.
	if len(ops) == 0 || !strings.Contains(strings.Join(ops, ","), "4") || !strings.Contains(strings.Join(ops, ","), "17") {
		t.Fatalf("tshark decoded opcodes %q", ops)
	}
}

// Links planted at the capture path are never followed: a symlink fails
// with ELOOP, a hard link or a FIFO or another user's file is refused, and
// the file each points to keeps its contents and mode. The capture itself
// is created (and an old one of the daemon's reset to) mode 0600.
func TestCreateRefusesPlantedLinks(t *testing.T) {
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
			t.Fatalf("%s: victim now %q mode %v (%v)", what, b, fi.Mode(), err)
		}
	}
	sym := filepath.Join(dir, "sym.pcap")
	if err := os.Symlink(victim, sym); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(sym); !errors.Is(err, syscall.ELOOP) {
		t.Fatalf("symlink: %v, want ELOOP", err)
	}
	intact("symlink")
	hard := filepath.Join(dir, "hard.pcap")
	if err := os.Link(victim, hard); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(hard); !errors.Is(err, ErrNotOwnFile) {
		t.Fatalf("hard link: %v, want ErrNotOwnFile", err)
	}
	intact("hard link")
	fifo := filepath.Join(dir, "fifo.pcap")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// O_WRONLY|O_NONBLOCK on a FIFO without a reader is ENXIO: no block.
	if _, err := Create(fifo); err == nil {
		t.Fatal("a FIFO was accepted")
	}
	if os.Geteuid() == 0 {
		theirs := filepath.Join(dir, "theirs.pcap")
		if err := os.WriteFile(theirs, []byte("theirs"), 0o666); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(theirs, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := Create(theirs); !errors.Is(err, ErrNotOwnFile) {
			t.Fatalf("another user's file: %v, want ErrNotOwnFile", err)
		}
	}
	own := filepath.Join(dir, "own.pcap")
	if err := os.WriteFile(own, []byte("old capture"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := Create(own)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(own)
	if err != nil || fi.Mode().Perm() != Mode || fi.Size() != 24 {
		t.Fatalf("own capture: mode %v size %d (%v), want %#o and a 24-byte header", fi.Mode(), fi.Size(), err, Mode)
	}
	fresh := filepath.Join(dir, "fresh.pcap")
	old := syscall.Umask(0)
	w, err = Create(fresh)
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if fi, err := os.Stat(fresh); err != nil || fi.Mode().Perm() != Mode {
		t.Fatalf("new capture mode %v (%v), want %#o even under umask 0", fi.Mode(), err, Mode)
	}
}
