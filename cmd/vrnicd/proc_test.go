package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/cmd/proctest"
	"github.com/vrnic/vrnicd/nic/link/linktest"
)

// The tests below run the real binaries, built once per test run.
var (
	binOnce              sync.Once
	binDir               string
	binErr               error
	vrnicdBin, vrnicctlB string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binaries builds vrnicd and vrnicctl (with -race when the tests run with
// it, so the daemon's own races fail the tests too).
func binaries(t testing.TB) (vrnicd, vrnicctl string) {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "vrnicd-test-bin")
		if binErr != nil {
			return
		}
		// nobody must be able to run it for the privilege test.
		os.Chmod(binDir, 0o755)
		vrnicdBin = filepath.Join(binDir, "vrnicd")
		vrnicctlB = filepath.Join(binDir, "vrnicctl")
		for _, b := range []struct{ out, pkg string }{{vrnicdBin, "."}, {vrnicctlB, "../vrnicctl"}} {
			args := []string{"build", "-o", b.out}
			if raceEnabled {
				args = append(args, "-race")
			}
			out, err := exec.Command("go", append(args, b.pkg)...).CombinedOutput()
			if err != nil {
				binErr = fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
				return
			}
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return vrnicdBin, vrnicctlB
}

// logBuffer collects a daemon's stderr and lets tests wait for records.
type logBuffer struct{ *proctest.Lines }

// record is one JSON log record.
type record map[string]any

// waitRecord waits for a JSON record with msg at or after line from and
// returns it with the index after it.
func (l *logBuffer) waitRecord(t testing.TB, from int, msg string, d time.Duration) (record, int) {
	t.Helper()
	var r record
	_, next, ok := l.Wait(from, d, func(line string) bool {
		r = nil
		return json.Unmarshal([]byte(line), &r) == nil && r["msg"] == msg
	})
	if !ok {
		t.Fatalf("no %q log record within %v; log:\n%s", msg, d, l.String())
	}
	return r, next
}

// daemonProc is one vrnicd process inside a namespace.
type daemonProc struct {
	t      testing.TB
	cmd    *exec.Cmd
	log    logBuffer
	socket string
	ready  record
	done   chan struct{}
	err    error // Wait's
}

// startDaemon runs vrnicd inside ns (nil: here) with JSON logs and waits
// for its ready line. The process is killed at test end if still running.
func startDaemon(t testing.TB, ns *linktest.NS, env []string, args ...string) *daemonProc {
	t.Helper()
	return startWrapped(t, ns, nil, env, args...)
}

// startWrapped is startDaemon with a command (e.g. setpriv ...) run between
// the namespace and vrnicd.
func startWrapped(t testing.TB, ns *linktest.NS, wrap, env []string, args ...string) *daemonProc {
	t.Helper()
	p := spawn(t, ns, wrap, env, args...)
	p.ready, _ = p.log.waitRecord(t, 0, "vrnicd ready", 15*time.Second)
	return p
}

func spawn(t testing.TB, ns *linktest.NS, wrap, env []string, args ...string) *daemonProc {
	t.Helper()
	bin, _ := binaries(t)
	argv := append(append(wrap[:len(wrap):len(wrap)], bin, "--log-format", "json"), args...)
	if ns != nil {
		argv = append([]string{"ip", "netns", "exec", ns.Name}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	// The race runtime sleeps 1 s at exit by default; that is not the
	// daemon's time.
	cmd.Env = append(append(os.Environ(), "GORACE=atexit_sleep_ms=0"), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &daemonProc{t: t, cmd: cmd, log: logBuffer{proctest.NewLines()}, done: make(chan struct{})}
	for i, a := range args {
		if a == "--socket" && i+1 < len(args) {
			p.socket = args[i+1]
		}
	}
	if err := proctest.Start(cmd, func() {
		p.log.Consume(stderr)
		p.err = cmd.Wait()
		close(p.done)
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill() // by PID: ours
			<-p.done
		}
		if t.Failed() {
			t.Logf("vrnicd %s log:\n%s", strings.Join(args, " "), p.log.String())
		}
	})
	return p
}

func (p *daemonProc) signal(s syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(s); err != nil {
		p.t.Fatalf("signal %v: %v", s, err)
	}
}

// wait waits up to d for the process to exit and returns its exit status.
func (p *daemonProc) wait(d time.Duration) (int, bool) {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), true
	case <-time.After(d):
		return -1, false
	}
}

// counters asks for the counters (SIGUSR1) and returns the netstack and
// device groups of the next counters record.
func (p *daemonProc) counters() (netstack, device map[string]float64) {
	p.t.Helper()
	from := p.log.Len()
	p.signal(syscall.SIGUSR1)
	r, _ := p.log.waitRecord(p.t, from, "counters", 5*time.Second)
	return group(r, "netstack"), group(r, "device")
}

func group(r record, name string) map[string]float64 {
	out := map[string]float64{}
	if g, ok := r[name].(map[string]any); ok {
		for k, v := range g {
			if f, ok := v.(float64); ok {
				out[k] = f
			}
		}
	}
	return out
}

// runFail runs vrnicd to completion (it must fail) and returns its exit
// status and stderr.
func runFail(t testing.TB, prefix []string, args ...string) (int, string) {
	t.Helper()
	bin, _ := binaries(t)
	argv := append(append(prefix[:len(prefix):len(prefix)], bin), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	var stderr, stdout bytes.Buffer
	cmd.Stderr, cmd.Stdout = &stderr, &stdout
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("vrnicd %v did not exit; stderr:\n%s", args, stderr.String())
	}
	if stdout.Len() > 0 {
		t.Errorf("vrnicd %v wrote to stdout: %q", args, stdout.String())
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// oneLine checks that out is exactly one "vrnicd: ..." line containing
// every want, and no stack trace.
func oneLine(t testing.TB, out string, want ...string) {
	t.Helper()
	if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") || !strings.HasPrefix(out, "vrnicd: ") {
		t.Fatalf("want one 'vrnicd: ...' line on stderr, got:\n%s", out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("error line %q lacks %q", strings.TrimSpace(out), w)
		}
	}
}
