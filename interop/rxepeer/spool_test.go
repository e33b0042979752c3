package rxepeer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The job spool is tested here without a VM: the guest's own agent scripts
// (interop/vm/guest/vr-agent, vr-listen) run on the host under
// busybox, the guest's shell, against a temporary spool, and the VM methods
// talk to them exactly as they do over 9p.

func findBusybox(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("busybox"); err == nil {
		return p
	}
	m, _ := filepath.Glob(filepath.Join(cacheDir(), "pkg", "busybox-static_*", "bin", "busybox"))
	if len(m) > 0 {
		return m[len(m)-1]
	}
	t.Skip("needs busybox (apt-get install busybox-static, or run interop/vm/build)")
	return ""
}

// fakeVM starts the guest agent on a host spool and returns a VM bound to
// it. alive controls what VM.Alive reports.
func fakeVM(t *testing.T) (*VM, *atomic.Bool) {
	t.Helper()
	bb := findBusybox(t)
	vmDir, err := VMDir()
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	spool := filepath.Join(state, "spool")
	bin := filepath.Join(state, "bin")
	for _, d := range []string{"q", "k", "j"} {
		if err := os.MkdirAll(filepath.Join(spool, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	// PATH holds busybox's applets and the guest helpers only, as in the guest.
	list, err := exec.Command(bb, "--list").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range strings.Fields(string(list)) {
		if err := os.Symlink(bb, filepath.Join(bin, a)); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range []string{"vr-agent", "vr-listen"} {
		b, err := os.ReadFile(filepath.Join(vmDir, "guest", g))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bin, g), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(state, "bell.in"), 0o600); err != nil {
		t.Fatal(err)
	}

	agent := exec.Command(bb, "sh", filepath.Join(bin, "vr-agent"))
	agent.Env = []string{"PATH=" + bin, "VR_SPOOL=" + spool, "HOME=" + state}
	agent.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The agent's group, then every job's group it started (jobs run in
		// sessions of their own): all processes this test started, by PID.
		_ = syscall.Kill(-agent.Process.Pid, syscall.SIGKILL)
		_ = agent.Wait()
		pids, _ := filepath.Glob(filepath.Join(spool, "j", "*", "pid"))
		for _, f := range pids {
			if b, err := os.ReadFile(f); err == nil {
				if pg, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pg > 1 {
					_ = syscall.Kill(-pg, syscall.SIGKILL)
				}
			}
		}
	})

	var alive atomic.Bool
	alive.Store(true)
	vm := &VM{Name: "unit", State: state, spool: spool, isAlive: alive.Load}
	if vm.bell, err = os.OpenFile(filepath.Join(state, "bell.in"), os.O_RDWR|syscall.O_NONBLOCK, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.bell.Close() })
	return vm, &alive
}

func TestSpoolExec(t *testing.T) {
	vm, _ := fakeVM(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	out, errOut, code, err := vm.Exec(ctx, "echo out; echo err >&2; exit 3")
	if err != nil || out != "out\n" || errOut != "err\n" || code != 3 {
		t.Errorf("Exec = %q, %q, %d, %v; want \"out\\n\", \"err\\n\", 3, nil", out, errOut, code, err)
	}

	// Large output comes back intact (it is a file, not a pipe).
	out, _, code, err = vm.Exec(ctx, "i=0; while [ $i -lt 20000 ]; do echo line-$i; i=$((i+1)); done")
	if err != nil || code != 0 {
		t.Fatalf("Exec: %d, %v", code, err)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 20000 || lines[0] != "line-0" || lines[19999] != "line-19999" {
		t.Errorf("got %d lines (%q ... %q), want line-0 ... line-19999", len(lines), lines[0], lines[len(lines)-1])
	}

	// Files of finished jobs are removed.
	left, _ := filepath.Glob(filepath.Join(vm.spool, "j", "*"))
	if len(left) != 0 {
		t.Errorf("job directories left behind: %v", left)
	}
}

func TestSpoolConcurrentJobs(t *testing.T) {
	vm, _ := fakeVM(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	flag := filepath.Join(vm.State, "flag")
	// a can only finish if b runs while a is running.
	a := vm.StartTimeout(fmt.Sprintf("i=0; while [ ! -e %s ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; test -e %s && echo seen", flag, flag), 20*time.Second)
	b := vm.Start("touch " + flag)
	if _, _, code, err := b.Wait(ctx); err != nil || code != 0 {
		t.Fatalf("b: %d, %v", code, err)
	}
	out, _, code, err := a.Wait(ctx)
	if err != nil || code != 0 || out != "seen\n" {
		t.Fatalf("a = %q, %d, %v; want it to see b's file", out, code, err)
	}
	// Wait again: the same result.
	out2, _, code2, err2 := a.Wait(ctx)
	if out2 != out || code2 != code || err2 != err {
		t.Errorf("second Wait = %q, %d, %v", out2, code2, err2)
	}
}

func TestSpoolKill(t *testing.T) {
	vm, _ := fakeVM(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	j := vm.StartTimeout("echo started; sleep 60 & sleep 60", time.Minute)
	// The job's output can show before its runner has written the pid
	// file (a loaded machine): wait for both.
	for i := 0; ; i++ {
		o, _ := j.Output()
		if _, err := os.Stat(filepath.Join(j.dir, "pid")); err == nil && o == "started\n" {
			break
		}
		if i == 200 {
			t.Fatal("job did not start in 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	pg := readPid(t, filepath.Join(j.dir, "pid"))
	j.Kill()
	out, _, code, err := j.Wait(ctx)
	if err != nil || code != 128+int(syscall.SIGKILL) || out != "started\n" {
		t.Errorf("killed job = %q, %d, %v; want \"started\\n\", 137, nil", out, code, err)
	}
	// The whole process group is gone, the background sleep too.
	waitGroupGone(t, pg)
}

func TestSpoolGuestTimeout(t *testing.T) {
	vm, _ := fakeVM(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	j := vm.StartTimeout("echo before; sleep 60; echo after", time.Second)
	out, _, _, err := j.Wait(ctx)
	if !errors.Is(err, ErrTimedOut) || out != "before\n" {
		t.Errorf("Wait = %q, %v; want \"before\\n\", ErrTimedOut", out, err)
	}
}

func TestSpoolContextEnds(t *testing.T) {
	vm, _ := fakeVM(t)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	j := vm.Start("sleep 60")
	_, _, _, err := j.Wait(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v; want context.DeadlineExceeded", err)
	}
	// Exec derives the guest-side limit from the context: the same job via
	// Exec is killed by the guest too, if the host were to go away.
	if b, err := os.ReadFile(filepath.Join(vm.spool, "j", j.ID, "timeout")); err == nil {
		t.Errorf("job files kept after a killed job was collected: timeout=%s", b)
	}
}

func TestSpoolVMGone(t *testing.T) {
	vm, alive := fakeVM(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	j := vm.Start("sleep 60")
	time.AfterFunc(300*time.Millisecond, func() { alive.Store(false) })
	if _, _, _, err := j.Wait(ctx); !errors.Is(err, ErrVMGone) {
		t.Errorf("Wait = %v; want ErrVMGone", err)
	}
	if _, _, _, err := vm.Exec(ctx, "true"); !errors.Is(err, ErrVMGone) {
		t.Errorf("Exec on a dead VM = %v; want ErrVMGone", err)
	}
}

func TestSpoolWaitListen(t *testing.T) {
	vm, _ := fakeVM(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// vr-listen reads /proc/net/tcp*: here that is the host's (this
	// process's) namespace, so a listener of ours counts.
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := vm.WaitListen(ctx, port); err != nil {
		t.Errorf("WaitListen(%d) with a listener: %v", port, err)
	}
	l.Close()

	// A server that dies before it listens is reported at once, with its
	// output, not after the timeout.
	srv := vm.Start("echo cannot bind >&2; exit 5")
	start := time.Now()
	err = srv.WaitListen(ctx, port)
	if err == nil || !strings.Contains(err.Error(), "status 5") || !strings.Contains(err.Error(), "cannot bind") {
		t.Errorf("WaitListen on a dead server = %v; want its status 5 and stderr", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("dead server noticed after %v", d)
	}

	short, cancel2 := context.WithTimeout(ctx, 2*time.Second)
	defer cancel2()
	if err := vm.WaitListen(short, port); err == nil {
		t.Errorf("WaitListen(%d) with no listener succeeded", port)
	}
}

func readPid(t *testing.T, f string) int {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	pg, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pg <= 1 {
		t.Fatalf("pid file %s: %q", f, b)
	}
	return pg
}

func waitGroupGone(t *testing.T, pg int) {
	t.Helper()
	for i := 0; i < 100; i++ {
		if err := syscall.Kill(-pg, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("process group %d still exists 5 s after the kill", pg)
}
