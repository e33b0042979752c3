package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link/linktest"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// capturePipe is `vrnicctl capture -w - ARGS | tshark -r - -Y infiniband`
// printing each frame's BTH opcode and destination QP.
type capturePipe struct {
	ctl, ts              *exec.Cmd
	ctlErr, tsOut, tsErr bytes.Buffer
}

// startCapture starts the pipe on daemon A and waits until the daemon
// streams.
func startCapture(t *testing.T, n *e2eNet, tshark string, args ...string) *capturePipe {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	p := &capturePipe{}
	p.ctl = exec.CommandContext(ctx, n.vrnicctl, append([]string{"--socket", n.sockA, "capture", "-w", "-"}, args...)...)
	p.ts = exec.CommandContext(ctx, tshark, "-r", "-", "-Y", "infiniband", "-T", "fields",
		"-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp")
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p.ctl.Stdout, p.ctl.Stderr = pw, &p.ctlErr
	p.ts.Stdin, p.ts.Stdout, p.ts.Stderr = pr, &p.tsOut, &p.tsErr
	from := n.a.log.Len()
	if err := p.ts.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.ctl.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	pr.Close()
	n.a.log.waitRecord(t, from, "live capture started", 10*time.Second)
	return p
}

// frames waits for both ends and returns tshark's lines as (opcode, QPN).
func (p *capturePipe) frames(t *testing.T, want int) [][2]uint64 {
	t.Helper()
	if err := p.ctl.Wait(); err != nil {
		t.Fatalf("vrnicctl capture: %v; stderr %q", err, p.ctlErr.String())
	}
	if err := p.ts.Wait(); err != nil {
		t.Fatalf("tshark: %v; stderr %q", err, p.tsErr.String())
	}
	if got := strings.TrimSpace(p.ctlErr.String()); got != strconv.Itoa(want)+" frames captured" {
		t.Errorf("vrnicctl stderr %q", got)
	}
	lines := strings.Split(strings.TrimSpace(p.tsOut.String()), "\n")
	if len(lines) != want {
		t.Fatalf("tshark decoded %d InfiniBand frames, want %d:\n%s\nstderr %s", len(lines), want, p.tsOut.String(), p.tsErr.String())
	}
	var out [][2]uint64
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 2 {
			t.Fatalf("tshark line %q", l)
		}
		op, err1 := strconv.ParseUint(f[0], 0, 8)
		qp, err2 := strconv.ParseUint(f[1], 0, 24)
		if err1 != nil || err2 != nil {
			t.Fatalf("tshark line %q", l)
		}
		out = append(out, [2]uint64{op, qp})
	}
	return out
}

// send5000 SENDs 5000 bytes from a to b (five packets at MTU 1024).
func send5000(t *testing.T, a, b *e2eEnd) {
	t.Helper()
	if err := b.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{b.mr.SGE(0, 8192)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 5000)}}); err != nil {
		t.Fatal(err)
	}
	ok(t, b.rcq, 1, verbs.WCRecv)
	ok(t, a.scq, 2, verbs.WCSend)
}

// TestLiveCapture: `vrnicctl capture -w - --count N | tshark -r -` on a
// running daemon decodes the RC SEND it carries, frame by frame as the
// stream comes, with no restart and no --pcap; with --qp, only that QP's
// traffic comes.
func TestLiveCapture(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed (apt-get install tshark)")
	}
	n := newE2ENet(t)
	ca, cb := e2eOpen(t, n.sockA, e2eA4, e2eA6), e2eOpen(t, n.sockB, e2eB4, e2eB6)
	a, b := ca.end(verbs.QPTypeRC, nil, 1<<16), cb.end(verbs.QPTypeRC, nil, 1<<16)
	e2eConnect(t, a, b, e2eLink{})

	const frames = 5 // the five packets of a 5000-byte SEND at MTU 1024, or their ACKs
	p := startCapture(t, n, tshark, "--count", strconv.Itoa(frames))
	send5000(t, a, b)
	// RC opcodes (IBA 9.2, Table 38): SEND First 0, Middle 1, Last 2
	// (Only, 4, is not for 5000 bytes), ACKNOWLEDGE 17.
	seen := map[uint64]bool{}
	for _, f := range p.frames(t, frames) {
		op, qp := f[0], f[1]
		seen[op] = true
		switch op {
		case 0, 1, 2:
			if uint32(qp) != b.qp.QPN() {
				t.Errorf("SEND packet to QP %#x, want B's %#x", qp, b.qp.QPN())
			}
		case 17:
			if uint32(qp) != a.qp.QPN() {
				t.Errorf("ACK to QP %#x, want A's %#x", qp, a.qp.QPN())
			}
		default:
			t.Errorf("opcode %d to QP %#x", op, qp)
		}
	}
	if !seen[0] {
		t.Error("no SEND First")
	}
	n.a.log.waitRecord(t, 0, "live capture ended", 5*time.Second)

	// --qp: a second pair's traffic only, though the first pair's came first.
	a2, b2 := ca.end(verbs.QPTypeRC, nil, 1<<16), cb.end(verbs.QPTypeRC, nil, 1<<16)
	e2eConnect(t, a2, b2, e2eLink{})
	if a2.qp.QPN() == a.qp.QPN() || a2.qp.QPN() == b.qp.QPN() || b2.qp.QPN() == a.qp.QPN() || b2.qp.QPN() == b.qp.QPN() {
		t.Fatalf("QPNs %#x %#x %#x %#x: the pairs cannot be told apart", a.qp.QPN(), b.qp.QPN(), a2.qp.QPN(), b2.qp.QPN())
	}
	p = startCapture(t, n, tshark, "--qp", strconv.FormatUint(uint64(a2.qp.QPN()), 10), "--count", strconv.Itoa(frames))
	send5000(t, a, b)
	send5000(t, a2, b2)
	for _, f := range p.frames(t, frames) {
		if q := uint32(f[1]); q != a2.qp.QPN() && q != b2.qp.QPN() {
			t.Errorf("--qp %#x captured opcode %d to QP %#x", a2.qp.QPN(), f[0], q)
		}
	}
}

// Live capture shows every client's traffic: root, the daemon's user and
// the socket's group may start one, another user who can reach the socket
// may not (while the admin reads stay open to every client).
func TestLiveCapturePermission(t *testing.T) {
	linktest.RequireRoot(t)
	_, ctl := binaries(t)
	ns := linktest.NewNS(t, "vcp")
	dir := mkWorldDir(t)
	nobody := []string{"setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", ctl}
	run := func(args ...string) (int, string) {
		cmd := exec.Command(args[0], args[1:]...)
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}

	// No socket group: the daemon's (root's) group; the socket opened to all.
	sock := filepath.Join(dir, "a.sock")
	startDaemon(t, ns, nil, "--iface", "tap:"+linktest.UniqueName("vt"), "--ip", "192.0.2.10/24", "--socket", sock)
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	if code, out := run(append(nobody, "--socket", sock, "capture", "-w", "/dev/null", "--count", "1")...); code != exitFail ||
		!strings.Contains(out, "neither root nor in group 0") {
		t.Errorf("capture as nobody: exit %d, %q", code, out)
	}
	if code, out := run(append(nobody, "--socket", sock, "stat")...); code != 0 {
		t.Errorf("stat as nobody: exit %d, %q", code, out)
	}

	// Socket group 65534: its members may capture.
	sock2 := filepath.Join(dir, "b.sock")
	d := startDaemon(t, ns, nil, "--iface", "tap:"+linktest.UniqueName("vt"), "--ip", "192.0.2.11/24", "--socket", sock2,
		"--socket-group", "65534")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, nobody[0], append(nobody[1:], "--socket", sock2, "capture", "-w", "/dev/null")...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.log.waitRecord(t, 0, "live capture started", 10*time.Second)
	cmd.Process.Signal(syscall.SIGINT) // by PID: ours
	if err := cmd.Wait(); err != nil || !strings.Contains(out.String(), "0 frames captured") {
		t.Errorf("capture as a member of the socket's group, stopped by SIGINT: %v, %q", err, out.String())
	}
	d.log.waitRecord(t, 0, "live capture ended", 5*time.Second)

	// A reload that gives the socket a group lets that group capture.
	sock3 := filepath.Join(dir, "c.sock")
	conf := filepath.Join(dir, "c.toml")
	if err := os.WriteFile(conf, []byte("log_level = \"info\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d3 := startDaemon(t, ns, nil, "--config", conf, "--iface", "tap:"+linktest.UniqueName("vt"), "--ip", "192.0.2.12/24", "--socket", sock3)
	if err := os.Chmod(sock3, 0o666); err != nil {
		t.Fatal(err)
	}
	if code, out := run(append(nobody, "--socket", sock3, "capture", "-w", "/dev/null", "--count", "1")...); code != exitFail {
		t.Errorf("capture as nobody before the reload: exit %d, %q", code, out)
	}
	if err := os.WriteFile(conf, []byte("socket_group = \"65534\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d3.signal(syscall.SIGHUP)
	d3.log.waitRecord(t, 0, "reloaded", 5*time.Second)
	cmd = exec.CommandContext(ctx, nobody[0], append(nobody[1:], "--socket", sock3, "capture", "-w", "/dev/null")...)
	out.Reset()
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d3.log.waitRecord(t, 0, "live capture started", 10*time.Second)
	cmd.Process.Signal(syscall.SIGINT) // by PID: ours
	if err := cmd.Wait(); err != nil {
		t.Errorf("capture by the socket's group after the reload: %v, %q", err, out.String())
	}
}
