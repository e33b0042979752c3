package rxepeer

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Options describe one guest. The zero value boots 192.0.2.2/24 on the
// bridge of a fresh namespace with 192.0.2.1/24 on the bridge.
type Options struct {
	// Netns holds the guest's TAP; nil: Boot makes NewBridgeNetns(t,
	// "192.0.2.1/24"), reachable afterwards as VM.Netns.
	Netns *Netns
	// Bridge to enslave the TAP to; "" means Netns.Bridge (none if that is
	// empty too: then the TAP is the guest's only link).
	Bridge string
	// IP is eth0's address, A.B.C.D/N (default 192.0.2.2/24).
	IP string
	// MAC of eth0 (default derived from the VM name by start).
	MAC net.HardwareAddr
	// MTU of eth0 and the TAP (default 1500: rxe active MTU 1024).
	MTU int
	// MemMB is the guest memory (default 384).
	MemMB int
	// NoIPv6 turns IPv6 off on eth0 (GID index 0 stays: rxe's default GID).
	NoIPv6 bool
	// NoRxe boots without creating rxe0.
	NoRxe bool
	// BootTimeout bounds the boot (default 120 s, TCG).
	BootTimeout time.Duration
	// Impaired puts an Impair between the guest's TAP and the bridge (over
	// a veth pair whose other end is the bridge port): VM.Impair then
	// drops, reorders or delays the guest's frames (FromGuest, ToGuest).
	// Needs a bridge.
	Impaired bool
}

// Directions of VM.Impair.
const (
	FromGuest = AtoB // frames the guest sends
	ToGuest   = BtoA // frames towards the guest
)

// VM is one running guest. Its methods are safe for concurrent use.
type VM struct {
	Name  string // VM name (start --name)
	State string // runtime directory: serial.log, spool/, facts
	TAP   string // host TAP of eth0
	Netns *Netns // the namespace holding the TAP

	PID         int              // QEMU's PID
	Accel       string           // "tcg" or "kvm"
	IP          netip.Prefix     // eth0's address
	MAC         net.HardwareAddr // eth0's MAC
	GID         netip.Addr       // ::ffff:IP, the RoCE v2 GID (invalid with NoRxe)
	Impair      *Impair          // with Options.Impaired, else nil
	ActiveMTU   int              // rxe0 port active_mtu in bytes
	BootSeconds float64          // start to "ready", as start measured it
	Kernel      string           // guest kernel release
	Facts       map[string]string

	gidIndex int
	spool    string
	bell     *os.File
	vmDir    string

	mu      sync.Mutex
	stopped bool
	alive   atomic.Int64 // unix nanos of the last positive liveness check
	isAlive func() bool  // replaces the /proc check in tests
}

// Errors of Exec and Job.Wait.
var (
	// ErrVMGone: QEMU exited (or was stopped) before the job finished.
	ErrVMGone = errors.New("rxepeer: the VM is gone")
	// ErrTimedOut: the guest killed the job's process group when its
	// timeout ran out.
	ErrTimedOut = errors.New("rxepeer: job killed by its guest-side timeout")
)

// DefaultJobTimeout limits jobs from Start, and Exec calls whose context has
// no deadline.
const DefaultJobTimeout = 5 * time.Minute

var seq atomic.Uint32

// Boot starts a guest for the test and stops it in t.Cleanup. It skips the
// test if the host cannot run guests (see the package comment) and fails it
// if the image build or the boot fails.
func Boot(t testing.TB, o Options) *VM {
	t.Helper()
	env := requireVM(t)
	if o.Netns == nil {
		o.Netns = NewBridgeNetns(t, "192.0.2.1/24")
	}
	// Our namespaces only: if the test binary dies, the VM's watchdog
	// deletes the namespace along with the VM.
	ownNetns := strings.HasPrefix(o.Netns.Name, fmt.Sprintf("vrn%d-", os.Getpid()))
	if o.Bridge == "" {
		o.Bridge = o.Netns.Bridge
	}
	if o.IP == "" {
		o.IP = "192.0.2.2/24"
	}
	pfx, err := netip.ParsePrefix(o.IP)
	if err != nil || !pfx.Addr().Is4() {
		t.Fatalf("rxepeer.Boot: IP %q: want A.B.C.D/N", o.IP)
	}
	if o.BootTimeout <= 0 {
		o.BootTimeout = 120 * time.Second
	}
	pid := os.Getpid()
	n := seq.Add(1)
	vm := &VM{
		Name:  fmt.Sprintf("t%d-%d", pid, n),
		TAP:   fmt.Sprintf("vr%dt%d", pid%10000000, n%1000),
		Netns: o.Netns,
		IP:    pfx,
		vmDir: env.vmDir,
	}

	args := []string{"--name", vm.Name, "--tap", vm.TAP, "--ip", o.IP, "--netns", o.Netns.Name,
		"--owner-pid", strconv.Itoa(pid), "--lifetime", strconv.Itoa(lifetime(t)),
		"--boot-timeout", strconv.Itoa(int(o.BootTimeout.Seconds()))}
	if o.Impaired {
		if o.Bridge == "" {
			t.Fatal("rxepeer.Boot: Impaired needs a bridge")
		}
		// guest TAP =Impair= veth "...i" -- veth "...b" (bridge port)
		vi, vb := vm.TAP+"i", vm.TAP+"b"
		mtu := max(o.MTU, 1500)
		for _, c := range [][]string{
			{"link", "add", vi, "type", "veth", "peer", "name", vb},
			{"link", "set", vi, "mtu", strconv.Itoa(mtu)}, {"link", "set", vb, "mtu", strconv.Itoa(mtu)},
			{"link", "set", vb, "master", o.Bridge},
		} {
			if err := o.Netns.IP(c...); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { _ = o.Netns.IP("link", "del", vi) })
		for _, d := range []string{vi, vb} {
			if err := o.Netns.Sysctl("net/ipv6/conf/"+d+"/disable_ipv6", "1"); err != nil {
				t.Fatal(err)
			}
			if err := o.Netns.IP("link", "set", d, "up"); err != nil {
				t.Fatal(err)
			}
		}
	} else if o.Bridge != "" {
		args = append(args, "--bridge", o.Bridge)
	}
	if ownNetns {
		args = append(args, "--owner-netns")
	}
	if o.MAC != nil {
		args = append(args, "--mac", o.MAC.String())
	}
	if o.MTU > 0 {
		args = append(args, "--mtu", strconv.Itoa(o.MTU))
	}
	if o.MemMB > 0 {
		args = append(args, "--mem", strconv.Itoa(o.MemMB))
	}
	if o.NoIPv6 {
		args = append(args, "--no-ipv6")
	}
	if o.NoRxe {
		args = append(args, "--no-rxe")
	}

	// Registered before the boot: start may leave a QEMU behind when it is
	// killed half-way; stop is a no-op for a VM that never started.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("rxepeer: %s serial console (tail):\n%s", vm.Name, tail(vm.SerialLog(), 40))
		}
		if err := vm.stop(!t.Failed()); err != nil {
			t.Errorf("rxepeer: stopping %s: %v", vm.Name, err)
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), o.BootTimeout+60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(env.vmDir, "start"), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// If the test binary dies mid-boot, start dies too and releases the VM's
	// lock at once, so the watchdog's stop need not wait for the boot.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		t.Fatalf("rxepeer: booting %s: %v\n%s", vm.Name, err, stderr.String())
	}
	if err := vm.load(stdout.String(), o.NoRxe); err != nil {
		t.Fatalf("rxepeer: %s: %v\nstart said:\n%s%s", vm.Name, err, stdout.String(), stderr.String())
	}
	if o.Impaired {
		// The guest's TAP carries no address of its own: no host stack noise.
		if err := o.Netns.Sysctl("net/ipv6/conf/"+vm.TAP+"/disable_ipv6", "1"); err != nil {
			t.Fatal(err)
		}
		im, err := o.Netns.NewImpair(vm.TAP, vm.TAP+"i")
		if err != nil {
			t.Fatalf("rxepeer: %s: impairment link: %v", vm.Name, err)
		}
		vm.Impair = im
		t.Cleanup(func() { im.Close() })
	}
	t.Logf("rxepeer: %s up in %.2fs (%s, pid %d): %s mac %s gid[%d] %s active_mtu %d",
		vm.Name, vm.BootSeconds, vm.Accel, vm.PID, vm.IP, vm.MAC, vm.gidIndex, vm.GID, vm.ActiveMTU)
	return vm
}

// lifetime: the watchdog's hard limit in seconds, a little past the test
// binary's deadline when there is one.
func lifetime(t testing.TB) int {
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := d.Deadline(); ok {
			return int(time.Until(dl).Seconds()) + 60
		}
	}
	return 1800
}

// parseFacts reads key=value lines (later keys win).
func parseFacts(s string) map[string]string {
	m := make(map[string]string)
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && k != "" && !strings.ContainsAny(k, " \t") {
			m[k] = v
		}
	}
	return m
}

// load fills vm from start's facts and opens the spool.
func (vm *VM) load(facts string, noRxe bool) error {
	f := parseFacts(facts)
	vm.Facts = f
	var err error
	if vm.PID, err = strconv.Atoi(f["pid"]); err != nil || vm.PID <= 0 {
		return fmt.Errorf("no QEMU pid in the facts")
	}
	if vm.State = f["state"]; vm.State == "" {
		return fmt.Errorf("no state directory in the facts")
	}
	vm.spool = filepath.Join(vm.State, "spool")
	vm.Accel, vm.Kernel = f["accel"], f["kernel"]
	vm.BootSeconds, _ = strconv.ParseFloat(f["boot_seconds"], 64)
	if vm.MAC, err = net.ParseMAC(f["mac"]); err != nil {
		return fmt.Errorf("mac %q: %v", f["mac"], err)
	}
	vm.ActiveMTU, _ = strconv.Atoi(f["active_mtu"])
	vm.gidIndex = -1
	if !noRxe {
		if vm.gidIndex, err = strconv.Atoi(f["gid_index"]); err != nil {
			return fmt.Errorf("gid_index %q: %v", f["gid_index"], err)
		}
		if vm.GID, err = parseSysfsGID(f["gid"]); err != nil {
			return err
		}
		if want := netip.AddrFrom16(vm.IP.Addr().As16()); vm.GID != want {
			return fmt.Errorf("gid %s is not the IPv4-mapped %s", vm.GID, want)
		}
	}
	// O_RDWR: opening a FIFO never blocks then; O_NONBLOCK: a full FIFO (a
	// stuck guest) makes the doorbell a no-op instead of a hang.
	if vm.bell, err = os.OpenFile(filepath.Join(vm.State, "bell.in"), os.O_RDWR|syscall.O_NONBLOCK, 0); err != nil {
		return fmt.Errorf("doorbell: %v", err)
	}
	return nil
}

// parseSysfsGID parses sysfs's "0000:0000:0000:0000:0000:ffff:c000:0202".
func parseSysfsGID(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is6() {
		return netip.Addr{}, fmt.Errorf("gid %q: not a GID", s)
	}
	return a, nil
}

// GIDIndex is the GID table index of the RoCE v2 GID ::ffff:IP: the value
// for ibv_*_pingpong -g and perftest -x (-1 with NoRxe).
func (vm *VM) GIDIndex() int { return vm.gidIndex }

// SerialLog returns the guest's serial console so far.
func (vm *VM) SerialLog() string {
	if vm.State == "" {
		b, _ := os.ReadFile(filepath.Join(runDir(), "vm", vm.Name, "serial.log"))
		return string(b)
	}
	b, _ := os.ReadFile(filepath.Join(vm.State, "serial.log"))
	return string(b)
}

// Alive reports whether the VM's QEMU is still running.
func (vm *VM) Alive() bool {
	vm.mu.Lock()
	stopped := vm.stopped
	vm.mu.Unlock()
	if stopped {
		return false
	}
	if vm.isAlive != nil {
		return vm.isAlive()
	}
	if vm.PID <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", vm.PID))
	if err != nil || !bytes.Contains(b, []byte(vm.State+"/")) {
		return false
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", vm.PID))
	if err != nil {
		return false
	}
	if i := bytes.LastIndexByte(st, ')'); i < 0 || i+2 >= len(st) || st[i+2] == 'Z' {
		return false
	}
	return true
}

// aliveCached is Alive at most every 200 ms, for poll loops.
func (vm *VM) aliveCached() bool {
	now := time.Now().UnixNano()
	if now-vm.alive.Load() < int64(200*time.Millisecond) {
		return true
	}
	if !vm.Alive() {
		return false
	}
	vm.alive.Store(now)
	return true
}

// Stop stops the VM now (t.Cleanup does it anyway). Its logs stay until the
// test ends.
func (vm *VM) Stop() error { return vm.stop(false) }

func (vm *VM) stop(purge bool) error {
	vm.mu.Lock()
	already := vm.stopped
	vm.stopped = true
	if vm.bell != nil {
		vm.bell.Close()
		vm.bell = nil
	}
	vm.mu.Unlock()
	if already && !purge {
		return nil
	}
	args := []string{vm.Name}
	if purge {
		args = []string{"--purge", vm.Name}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(vm.vmDir, "stop"), args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

// ring wakes the guest's agent (it also rescans every second by itself).
func (vm *VM) ring() {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.bell != nil {
		_, _ = vm.bell.Write([]byte{'\n'})
	}
}

// Exec runs cmd with the guest's sh and waits for it. exit is its exit
// status; err is set only if no status was obtained: ctx ended (the job is
// then killed), the guest-side timeout fired (ErrTimedOut; ctx's deadline,
// or DefaultJobTimeout, plus 2 s), or the VM is gone (ErrVMGone). stdout and
// stderr hold whatever the job wrote, also on error.
func (vm *VM) Exec(ctx context.Context, cmd string) (stdout, stderr string, exit int, err error) {
	limit := DefaultJobTimeout
	if dl, ok := ctx.Deadline(); ok {
		limit = time.Until(dl) + 2*time.Second
	}
	return vm.StartTimeout(cmd, limit).Wait(ctx)
}

// Job is a command running in the guest.
type Job struct {
	vm  *VM
	ID  string
	Cmd string
	dir string
	err error // submission error, reported by Wait

	mu     sync.Mutex
	done   bool
	stdout string
	stderr string
	exit   int
	werr   error
}

// Start runs cmd in the background, limited to DefaultJobTimeout.
func (vm *VM) Start(cmd string) *Job { return vm.StartTimeout(cmd, DefaultJobTimeout) }

// StartTimeout runs cmd in the background; the guest kills its process
// group once limit (rounded up to whole seconds, at least 1 s) has passed,
// up to 2 s late: the agent checks once a second.
func (vm *VM) StartTimeout(cmd string, limit time.Duration) *Job {
	id := fmt.Sprintf("g%d-%d", os.Getpid(), seq.Add(1))
	j := &Job{vm: vm, ID: id, Cmd: cmd, dir: filepath.Join(vm.spool, "j", id)}
	if !vm.Alive() {
		j.err = ErrVMGone
		return j
	}
	secs := int((limit + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	j.err = func() error {
		if err := os.Mkdir(j.dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(j.dir, "cmd"), []byte(cmd+"\n"), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(j.dir, "timeout"), []byte(strconv.Itoa(secs)+"\n"), 0o644); err != nil {
			return err
		}
		// q/ID last: the agent only looks at complete jobs.
		return os.WriteFile(filepath.Join(vm.spool, "q", id), nil, 0o644)
	}()
	if j.err == nil {
		vm.ring()
	}
	return j
}

// Done reports whether the job has ended (without consuming its result).
func (j *Job) Done() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.done || j.err != nil {
		return true
	}
	_, ok := j.readRC()
	return ok
}

// readRC reads the job's exit status; ok once the agent has written it
// (the status and a newline, in one write).
func (j *Job) readRC() (int, bool) {
	b, err := os.ReadFile(filepath.Join(j.dir, "rc"))
	if err != nil || len(b) < 2 || b[len(b)-1] != '\n' {
		return 0, false
	}
	n, err := strconv.Atoi(string(b[:len(b)-1]))
	return n, err == nil
}

// Output returns what the job has written so far.
func (j *Job) Output() (stdout, stderr string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.done {
		return j.stdout, j.stderr
	}
	o, _ := os.ReadFile(filepath.Join(j.dir, "out"))
	e, _ := os.ReadFile(filepath.Join(j.dir, "err"))
	return string(o), string(e)
}

// Kill asks the guest to SIGKILL the job's process group.
func (j *Job) Kill() {
	if j.err != nil || j.Done() {
		return
	}
	_ = os.WriteFile(filepath.Join(j.vm.spool, "k", j.ID), nil, 0o644)
	j.vm.ring()
}

// Wait waits for the job to end; see Exec for the results. If ctx ends
// first the job is killed (Wait then still collects it for up to 5 s). Wait
// may be called again: it returns the same result.
func (j *Job) Wait(ctx context.Context) (stdout, stderr string, exit int, err error) {
	if j.err != nil {
		return "", "", -1, fmt.Errorf("job %s: %w", j.ID, j.err)
	}
	j.mu.Lock()
	if j.done {
		defer j.mu.Unlock()
		return j.stdout, j.stderr, j.exit, j.werr
	}
	j.mu.Unlock()

	var cause error
	killed := time.Time{}
	step := time.Millisecond
	for {
		if _, ok := j.readRC(); ok {
			break
		}
		if !j.vm.aliveCached() {
			cause = ErrVMGone
			break
		}
		if killed.IsZero() {
			select {
			case <-ctx.Done():
				cause = ctx.Err()
				killed = time.Now()
				j.Kill()
			default:
			}
		} else if time.Since(killed) > 5*time.Second {
			break // the kill did not get through either
		}
		time.Sleep(step)
		if step < 20*time.Millisecond {
			step += step / 2
		}
	}
	return j.collect(cause)
}

// collect reads the job's result and removes its files.
func (j *Job) collect(cause error) (string, string, int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	o, _ := os.ReadFile(filepath.Join(j.dir, "out"))
	e, _ := os.ReadFile(filepath.Join(j.dir, "err"))
	j.stdout, j.stderr, j.exit = string(o), string(e), -1
	rc, haveRC := j.readRC()
	if haveRC {
		j.exit = rc
	}
	_, toErr := os.Stat(filepath.Join(j.dir, "timedout"))
	switch {
	case cause != nil:
		j.werr = fmt.Errorf("job %s (%s): %w", j.ID, short(j.Cmd), cause)
	case toErr == nil:
		j.werr = fmt.Errorf("job %s (%s): %w", j.ID, short(j.Cmd), ErrTimedOut)
	case !haveRC:
		j.werr = fmt.Errorf("job %s (%s): no exit status", j.ID, short(j.Cmd))
	}
	j.done = true
	if haveRC || cause == ErrVMGone {
		_ = os.RemoveAll(j.dir)
	}
	return j.stdout, j.stderr, j.exit, j.werr
}

func short(s string) string {
	if len(s) > 60 {
		return s[:57] + "..."
	}
	return s
}

// WaitListen waits until something in the guest listens on TCP port (IPv4
// or IPv6), e.g. 18515 of ibv_*_pingpong and perftest servers. Bounded by
// ctx (or 30 s without a deadline).
func (vm *VM) WaitListen(ctx context.Context, port int) error {
	return vm.waitListen(ctx, port, nil)
}

// WaitListen is VM.WaitListen that fails at once if the job ends first (a
// server that crashed), with its exit status and output.
func (j *Job) WaitListen(ctx context.Context, port int) error {
	if j.err != nil {
		return fmt.Errorf("job %s: %w", j.ID, j.err)
	}
	return j.vm.waitListen(ctx, port, j)
}

func (vm *VM) waitListen(ctx context.Context, port int, j *Job) error {
	if port <= 0 || port > 65535 {
		return fmt.Errorf("rxepeer: WaitListen: bad port %d", port)
	}
	secs := 30
	if dl, ok := ctx.Deadline(); ok {
		secs = max(int(time.Until(dl).Seconds()), 1)
	}
	id := ""
	if j != nil {
		id = j.ID
	}
	out, errOut, code, err := vm.Exec(ctx, fmt.Sprintf("vr-listen %d %d %s", port, secs, id))
	if err != nil {
		return fmt.Errorf("rxepeer: waiting for TCP port %d in %s: %w", port, vm.Name, err)
	}
	switch code {
	case 0:
		return nil
	case 3:
		so, se := j.Output()
		return fmt.Errorf("rxepeer: %s: %s: %s\njob stdout:\n%s\njob stderr:\n%s",
			vm.Name, short(j.Cmd), strings.TrimSpace(errOut+out), so, se)
	default:
		return fmt.Errorf("rxepeer: %s: %s", vm.Name, strings.TrimSpace(errOut+out))
	}
}

// SetNeighbour pins ip → mac in the guest's neighbour table (nud permanent),
// for a host-side stack that does not answer ARP.
func (vm *VM) SetNeighbour(ip netip.Addr, mac net.HardwareAddr) error {
	if !ip.IsValid() || len(mac) != 6 {
		return fmt.Errorf("rxepeer: SetNeighbour(%v, %v): need an IP and a 6-byte MAC", ip, mac)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, errOut, code, err := vm.Exec(ctx, fmt.Sprintf("ip neigh replace %s lladdr %s dev eth0 nud permanent", ip, mac))
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("rxepeer: ip neigh replace in %s: exit %d: %s", vm.Name, code, strings.TrimSpace(errOut))
	}
	return nil
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}
