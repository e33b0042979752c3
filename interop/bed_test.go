package interop_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vrnic/vrnicd/cmd/proctest"
	"github.com/vrnic/vrnicd/interop/rxepeer"
)

// The suite runs vrnicd's real binaries: the daemon in TAP mode on the
// guests' bridge, and its tools (vrnic-pingpong, vrnic-perf, vrnicctl) as
// the kernel tools' counterparts. They are built once per test binary.
type toolSet struct {
	vrnicd, vrnicctl, pingpong, perf, rping  string
	ucmatose, cmtime, rdmaServer, rdmaClient string
	udaddy, mckey                            string
}

var (
	toolsOnce sync.Once
	toolsDir  string
	theTools  toolSet
	toolsErr  error
)

func buildTools(t testing.TB) toolSet {
	t.Helper()
	toolsOnce.Do(func() {
		toolsDir, toolsErr = os.MkdirTemp("", "vrnicd-interop-bin")
		if toolsErr != nil {
			return
		}
		theTools = toolSet{
			vrnicd:   filepath.Join(toolsDir, "vrnicd"),
			vrnicctl: filepath.Join(toolsDir, "vrnicctl"),
			pingpong: filepath.Join(toolsDir, "vrnic-pingpong"),
			perf:     filepath.Join(toolsDir, "vrnic-perf"),
			rping:    filepath.Join(toolsDir, "vrnic-rping"),
			ucmatose: filepath.Join(toolsDir, "vrnic-ucmatose"),
			cmtime:   filepath.Join(toolsDir, "vrnic-cmtime"),
			udaddy:   filepath.Join(toolsDir, "vrnic-udaddy"),
			mckey:    filepath.Join(toolsDir, "vrnic-mckey"),

			rdmaServer: filepath.Join(toolsDir, "vrnic-rdma-server"),
			rdmaClient: filepath.Join(toolsDir, "vrnic-rdma-client"),
		}
		for out, pkg := range map[string]string{theTools.vrnicd: "vrnicd", theTools.vrnicctl: "vrnicctl",
			theTools.pingpong: "vrnic-pingpong", theTools.perf: "vrnic-perf", theTools.rping: "vrnic-rping",
			theTools.ucmatose: "vrnic-ucmatose", theTools.cmtime: "vrnic-cmtime", theTools.rdmaServer: "vrnic-rdma-server",
			theTools.rdmaClient: "vrnic-rdma-client", theTools.udaddy: "vrnic-udaddy", theTools.mckey: "vrnic-mckey"} {
			b, err := exec.Command("go", "build", "-o", out, "github.com/vrnic/vrnicd/cmd/"+pkg).CombinedOutput()
			if err != nil {
				toolsErr = fmt.Errorf("go build cmd/%s: %v\n%s", pkg, err, b)
				return
			}
		}
	})
	if toolsErr != nil {
		t.Fatal(toolsErr)
	}
	return theTools
}

// hostProc is a program running inside a test namespace (ip netns exec,
// which execs it: the PID is the program's). It gets SIGKILL if the test
// binary dies, and is killed by t.Cleanup if still running.
type hostProc struct {
	argv           []string
	cmd            *exec.Cmd
	stdout, stderr *proctest.Lines
	done           chan struct{}
	exit           int
}

func startHost(t testing.TB, n *rxepeer.Netns, argv ...string) *hostProc {
	t.Helper()
	return startHostNice(t, n, 0, argv...)
}

// startTool is startHost for the vrnic tools, at nice 19: they busy-poll
// their CQs as the kernel tools do, and on a host with few cores a
// spinning client must not take the CPU from the guest's QEMU threads
// (whose delays the peer's ACKs would show) or from the daemons.
func startTool(t testing.TB, n *rxepeer.Netns, argv ...string) *hostProc {
	t.Helper()
	return startHostNice(t, n, 19, argv...)
}

func startHostNice(t testing.TB, n *rxepeer.Netns, nice int, argv ...string) *hostProc {
	t.Helper()
	full := append([]string{"netns", "exec", n.Name}, argv...)
	cmd := exec.Command("ip", full...)
	p := &hostProc{argv: argv, cmd: cmd, stdout: proctest.NewLines(), stderr: proctest.NewLines(), done: make(chan struct{})}
	so, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	se, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := proctest.Start(cmd, func() {
		if nice != 0 {
			// Here rather than after Start returns: the PID is not
			// reaped (and reused) before this goroutine's Wait.
			_ = unix.Setpriority(unix.PRIO_PROCESS, cmd.Process.Pid, nice)
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); p.stdout.Consume(so) }()
		go func() { defer wg.Done(); p.stderr.Consume(se) }()
		wg.Wait()
		_ = cmd.Wait()
		p.exit = cmd.ProcessState.ExitCode()
		close(p.done)
	}); err != nil {
		t.Fatalf("starting %s: %v", strings.Join(argv, " "), err)
	}
	t.Cleanup(p.kill)
	return p
}

// kill SIGKILLs the process (by PID: ours) and waits for it.
func (p *hostProc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (p *hostProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for the process to exit; if ctx ends first it is killed and
// err says so.
func (p *hostProc) wait(ctx context.Context) (stdout, stderr string, exit int, err error) {
	select {
	case <-p.done:
	case <-ctx.Done():
		p.kill()
		err = fmt.Errorf("%s: killed: %w", p.argv[0], ctx.Err())
	}
	return p.stdout.String(), p.stderr.String(), p.exit, err
}

// waitListen waits until a socket of the namespace listens on TCP port
// (IPv4 or IPv6), failing at once if p exits first. It reads the
// namespace's /proc/net/tcp{,6} rather than connecting: the tools' servers
// take the first connection as their peer.
func waitListen(ctx context.Context, n *rxepeer.Netns, port int, p *hostProc) error {
	for {
		var ok bool
		if err := n.Do(func() error {
			for _, f := range []string{"/proc/thread-self/net/tcp6", "/proc/thread-self/net/tcp"} {
				b, err := os.ReadFile(f)
				if err != nil {
					return err
				}
				if tcpListening(b, port) {
					ok = true
					return nil
				}
			}
			return nil
		}); err != nil {
			return err
		}
		if ok {
			return nil
		}
		if p != nil && p.exited() {
			return fmt.Errorf("%s exited (status %d) before listening on TCP %d\nstdout:\n%s\nstderr:\n%s",
				p.argv[0], p.exit, port, p.stdout.String(), p.stderr.String())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nothing listens on TCP %d in %s: %w", port, n.Name, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// tcpListening reads /proc/net/tcp format: "sl local_address rem_address
// st ...", local_address "HEXIP:HEXPORT", st 0A for LISTEN.
func tcpListening(table []byte, port int) bool {
	for _, line := range strings.Split(string(table), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != "0A" {
			continue
		}
		_, hp, ok := strings.Cut(f[1], ":")
		if v, err := strconv.ParseUint(hp, 16, 16); ok && err == nil && int(v) == port {
			return true
		}
	}
	return false
}

// daemon is one vrnicd process in TAP mode, its TAP on the namespace's
// bridge.
type daemon struct {
	name    string
	proc    *hostProc
	socket  string
	tap     string
	addr    netip.Addr
	gidIPv4 int // GID index of ::ffff:addr
	gidLL   int // the default GID, fe80::EUI-64 (0)
	ready   map[string]any
	tools   toolSet
}

// startDaemon runs vrnicd --iface tap:TAP --ip cidr --mtu mtu in n, waits
// for its ready line, and bridges its TAP.
func startDaemon(t testing.TB, n *rxepeer.Netns, name, cidr string, mtu int) *daemon {
	t.Helper()
	ts := buildTools(t)
	pfx := netip.MustParsePrefix(cidr)
	d := &daemon{
		name:   name,
		socket: filepath.Join(t.TempDir(), name+".sock"),
		tap:    fmt.Sprintf("vd%d%s", os.Getpid()%100000, name),
		addr:   pfx.Addr(),
		tools:  ts,
	}
	d.proc = startHost(t, n, ts.vrnicd, "--log-format", "json", "--iface", "tap:"+d.tap, "--ip", cidr,
		"--mtu", strconv.Itoa(mtu), "--socket", d.socket, "--name", name)
	line, _, ok := d.proc.stderr.Wait(0, 20*time.Second, func(s string) bool {
		var r map[string]any
		return json.Unmarshal([]byte(s), &r) == nil && r["msg"] == "vrnicd ready"
	})
	if !ok {
		d.proc.kill()
		t.Fatalf("vrnicd %s: no ready line; exit %d; log:\n%s", name, d.proc.exit, d.proc.stderr.String())
	}
	_ = json.Unmarshal([]byte(line), &d.ready)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("vrnicd %s log (tail):\n%s", name, tailLines(d.proc.stderr.String(), 30))
		}
	})
	d.gidIPv4, d.gidLL = -1, -1
	gids, _ := d.ready["gids"].(string)
	for _, e := range strings.Fields(gids) {
		i, g, _ := strings.Cut(e, "=")
		idx, err := strconv.Atoi(i)
		a, err2 := netip.ParseAddr(g)
		if err != nil || err2 != nil {
			continue
		}
		switch {
		case a.Unmap() == d.addr:
			d.gidIPv4 = idx
		case a.IsLinkLocalUnicast() && idx == 0:
			d.gidLL = idx
		}
	}
	if d.gidIPv4 < 0 || d.gidLL != 0 {
		t.Fatalf("vrnicd %s: GID table %q lacks ::ffff:%s or the default GID at 0", name, gids, d.addr)
	}
	if err := n.IP("link", "set", d.tap, "master", n.Bridge); err != nil {
		t.Fatal(err)
	}
	return d
}

// counters reads the device counters with `vrnicctl stat --json`.
func (d *daemon) counters(ctx context.Context) (map[string]uint64, error) {
	out, err := exec.CommandContext(ctx, d.tools.vrnicctl, "stat", "--json", "--socket", d.socket).Output()
	if err != nil {
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			return nil, fmt.Errorf("vrnicctl stat --json (%s): %v: %s", d.name, err, ee.Stderr)
		}
		return nil, fmt.Errorf("vrnicctl stat --json (%s): %v", d.name, err)
	}
	var st struct {
		Device map[string]uint64   `json:"device"`
		QPs    []map[string]uint64 `json:"qps"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("vrnicctl stat --json (%s): %v: %q", d.name, err, out)
	}
	for _, k := range []string{"retransmit_timeouts", "retry_exceeded_err", "local_op_replays"} {
		if _, ok := st.Device[k]; !ok {
			return nil, fmt.Errorf("vrnicctl stat --json (%s): no device counter %q in %s", d.name, k, out)
		}
	}
	return st.Device, nil
}

func tailLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// runQueueWait is the time all of a process's threads have spent runnable
// but waiting for a CPU (field 2 of /proc/PID/task/TID/schedstat, in ns):
// how much the host's CPU contention delayed it. Threads that ended are
// not counted, so compare readings of long-lived processes (QEMU, vrnicd).
func runQueueWait(pid int) time.Duration {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0
	}
	var sum time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) >= 2 {
			if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				sum += time.Duration(v)
			}
		}
	}
	return sum
}
