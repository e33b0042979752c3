package interop_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/interop/rxepeer"
)

// The drop-in libibverbs (cabi/, `make cabi`) against the kernel: Debian's
// own, unmodified ibv_*_pingpong and perftest programs on the host, loading
// lib/vrnicd/libibverbs.so.1 through LD_LIBRARY_PATH and reaching daemon A
// through VRNICD_SOCKET, and the same programs in the guest on kernel rxe.
// Each case runs each way (the guest's program the server, then the
// client), first on a clean link, where the suite's checks apply (both
// exit 0 and report the whole run, the QPs each side prints are the ones
// the other connected to, no local operation replay, every retransmit
// timeout of the daemon justified by the captures: timerVerdict), then
// with 1 % of the RoCEv2 frames lost each way (ib_write_bw and
// ibv_rc_pingpong). One guest, behind the impairment link from the start
// (cleared for the clean round), so both rounds share one boot.

// dropinCase is one program and the options both sides take.
type dropinCase struct {
	prog  string   // the program, on both sides
	args  []string // its options on both sides (not the GID index, not the server's address)
	iters int      // the iteration count both must report
}

func (c dropinCase) perf() bool { return strings.HasPrefix(c.prog, "ib_") }

func (c dropinCase) name() string { return c.prog + " " + strings.Join(c.args, " ") }

// Clean round: the options users reach for, as cabi/programs_test.go runs
// them between two vrnicd devices. -F: perftest's CPU frequency check
// warns and nothing more (as in the suite). Counts are kept small for the
// guest under TCG (pingpong ~2 ms an iteration, perftest 6-17 MB/s).
func dropinCases() []dropinCase {
	pp := func(prog string, args ...string) dropinCase {
		return dropinCase{prog: prog, args: append([]string{"-n", "200"}, args...), iters: 200}
	}
	pf := func(prog string, n int, args ...string) dropinCase {
		return dropinCase{prog: prog, args: append(append([]string{}, args...), "-n", strconv.Itoa(n), "-F"), iters: n}
	}
	return []dropinCase{
		pp("ibv_rc_pingpong", "-s", "4096", "-c"),
		pp("ibv_rc_pingpong", "-s", "4096", "-c", "-e"),
		pp("ibv_ud_pingpong", "-s", "1024", "-c"), // at most the path MTU
		pp("ibv_srq_pingpong", "-s", "4096", "-c"),
		pf("ib_write_bw", 1000, "-s", "65536"),
		pf("ib_write_bw", 1000, "-s", "65536", "--use_old_post_send"),
		pf("ib_read_bw", 200, "-s", "65536"),
		pf("ib_send_bw", 1000, "-s", "64"),
		pf("ib_write_lat", 500, "-s", "8"),
		pf("ib_send_lat", 500, "-s", "8"),
	}
}

// Lossy round: 1 % of the RoCEv2 frames lost each way.
func dropinLossyCases() []dropinCase {
	return []dropinCase{
		{prog: "ib_write_bw", args: []string{"-s", "65536", "-n", "200", "-F"}, iters: 200},
		{prog: "ibv_rc_pingpong", args: []string{"-n", "200", "-s", "4096", "-c"}, iters: 200},
	}
}

const dropinLoss = 0.01

// dropinLib is the built drop-in library's directory, or skips.
func dropinLib(t *testing.T) string {
	t.Helper()
	lib, err := filepath.Abs(filepath.Join("..", "lib", "vrnicd", "libibverbs.so.1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(lib); err != nil {
		t.Skipf("the drop-in libibverbs is not built (run `make cabi`): %v", err)
	}
	return filepath.Dir(lib)
}

// dropinPrograms finds Debian's programs on the host, or skips.
func dropinPrograms(t *testing.T) map[string]string {
	t.Helper()
	paths := map[string]string{}
	for _, c := range append(dropinCases(), dropinLossyCases()...) {
		if paths[c.prog] != "" {
			continue
		}
		p, err := exec.LookPath(c.prog)
		if err != nil {
			pkg := "ibverbs-utils"
			if c.perf() {
				pkg = "perftest"
			}
			t.Skipf("Debian's %s is not installed on the host (apt-get install ibverbs-utils perftest: %s): %v", c.prog, pkg, err)
		}
		paths[c.prog] = p
	}
	return paths
}

func TestInteropDropin(t *testing.T) {
	libDir := dropinLib(t)
	progs := dropinPrograms(t)
	start := time.Now()
	b := newBed(t, bedConfig{name: "dropin", linkMTU: 1500, pathMTU: 1024, gids: []gidKind{gidIPv4}, impaired: true})
	d := &dropin{bed: b, libDir: libDir, progs: progs}
	// Clean first: the impairment link forwards everything, and the timer
	// check is the clean beds'.
	b.vm.Impair.Clear()
	b.cfg.impaired = false
	t.Logf("bed up in %.1fs (guest under %s); host programs on %s through %s", time.Since(start).Seconds(), b.vm.Accel, b.a.socket, libDir)
	t.Run("clean", func(t *testing.T) {
		for _, c := range dropinCases() {
			t.Run(c.name(), func(t *testing.T) {
				for _, ks := range []bool{true, false} {
					t.Run(direction(ks), func(t *testing.T) { d.run(t, "dropin", c, ks) })
				}
			})
		}
	})
	t.Logf("clean round done at %.1fs", time.Since(start).Seconds())
	b.cfg.impaired = true
	b.vm.Impair.Set(rxepeer.FromGuest, rxepeer.Impairment{Match: rxepeer.IsRoCEv2, Loss: dropinLoss, Seed: 23})
	b.vm.Impair.Set(rxepeer.ToGuest, rxepeer.Impairment{Match: rxepeer.IsRoCEv2, Loss: dropinLoss, Seed: 29})
	t.Run("lossy", func(t *testing.T) {
		for _, c := range dropinLossyCases() {
			t.Run(c.name(), func(t *testing.T) {
				for _, ks := range []bool{true, false} {
					t.Run(direction(ks), func(t *testing.T) { d.run(t, "dropin-lossy", c, ks) })
				}
			})
		}
	})
	t.Logf("%.1fs in all", time.Since(start).Seconds())
}

// dropin is the bed and where the host's programs and library are.
type dropin struct {
	*bed
	libDir string
	progs  map[string]string
}

// run runs c once each way as runCase does: again once if a lossy
// ping-pong lost its last ACK after the guest's program had exited (see
// lostLastAck; vrnicd's lingering QPs cover the other way round).
func (d *dropin) run(t *testing.T, bedName string, c dropinCase, kernelServer bool) {
	r := &row{bed: bedName, name: c.name(), dir: direction(kernelServer), mtu: d.cfg.pathMTU, gid: gidIPv4.String()}
	defer r.record(t)
	fresh := *r
	lost := d.once(t, r, c, kernelServer)
	if lost == "" {
		return
	}
	t.Logf("run 1 lost its final ACK after the guest's program had exited, running the case again:\n%s", lost)
	*r = fresh
	if again := d.once(t, r, c, kernelServer); again != "" {
		r.fail(t, "runs 1 and 2 both lost their final ACK after the guest's program had exited:\n%s\n%s", lost, again)
		return
	}
	r.note += "; run 2 (run 1: the guest's last ACK lost after its program exited)"
}

func (d *dropin) once(t *testing.T, r *row, c dropinCase, kernelServer bool) (lostAck string) {
	timeout := d.caseTimeout()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	gflag := "-g"
	if c.perf() {
		gflag = "-x"
	}
	kcmd := fmt.Sprintf("%s -d rxe0 %s %d %s", c.prog, gflag, d.vm.GIDIndex(), strings.Join(c.args, " "))
	// Our program: the library's directory first, the daemon's socket;
	// no -d: the first device, the only one the socket offers.
	hargv := append([]string{"env", "LD_LIBRARY_PATH=" + d.libDir, "VRNICD_SOCKET=" + d.a.socket, "LC_ALL=C",
		d.progs[c.prog], gflag, strconv.Itoa(d.a.gidIPv4)}, c.args...)

	before, err := d.a.counters(ctx)
	if err != nil {
		r.fail(t, "%v", err)
		return
	}
	impBefore := [2]rxepeer.ImpairStats{d.vm.Impair.Stats(rxepeer.FromGuest), d.vm.Impair.Stats(rxepeer.ToGuest)}
	mark, markV := d.capA.mark(), d.capV.mark()
	drops := d.capA.dropped() + d.capV.dropped()
	qemuWait, daemonWait := runQueueWait(d.vm.PID), runQueueWait(d.a.proc.cmd.Process.Pid)
	started := time.Now()
	kern, ours, err := d.runSides(ctx, t, kcmd, hargv, kernelServer, nil)
	if err != nil {
		r.fail(t, "%v", err)
		return
	}
	kern.who, ours.who = "guest (kernel rxe) "+kcmd, "host (drop-in on vrnicd) "+strings.Join(hargv[4:], " ")
	r.secs = time.Since(started).Seconds()

	after, err := d.a.counters(context.Background())
	if err != nil {
		r.fail(t, "%v", err)
		return
	}
	rto := after["retransmit_timeouts"] - before["retransmit_timeouts"]
	exceeded := after["retry_exceeded_err"] - before["retry_exceeded_err"]
	goBacks := after["completer_retry_err"] - before["completer_retry_err"]
	replays := after["local_op_replays"] - before["local_op_replays"]
	time.Sleep(50 * time.Millisecond) // the captures' last frames
	ev := d.evidence(t, mark, markV, drops)
	ev.wall = time.Since(started)
	ev.qemuWait, ev.daemonWait = runQueueWait(d.vm.PID)-qemuWait, runQueueWait(d.a.proc.cmd.Process.Pid)-daemonWait
	r.note = fmt.Sprintf("rto %d", rto)
	if d.cfg.impaired {
		from, to := d.vm.Impair.Stats(rxepeer.FromGuest), d.vm.Impair.Stats(rxepeer.ToGuest)
		r.note += fmt.Sprintf(", lost %d from the guest and %d to it", from.Dropped-impBefore[0].Dropped, to.Dropped-impBefore[1].Dropped)
	}

	if !kern.ok() || !ours.ok() {
		if why, ok := d.lostAfterExit(c, kern, ours, ev); ok {
			return why + "\n" + kern.String() + "\n" + ours.String() + "\n" + ev.String(t)
		}
		r.fail(t, "case failed\n%s\n%s\n%s", kern, ours, ev.String(t))
		return
	}
	if len(ev.frames) == 0 {
		r.fail(t, "no RoCEv2 frame on vrnicd's TAP: the host program did not run on vrnicd\n%s\n%s", kern, ours)
		return
	}
	figs, err := checkDropin(c, kern, ours, kernelServer)
	r.figure = figs
	if err != nil {
		r.fail(t, "%v\n%s\n%s", err, kern, ours)
		return
	}
	if replays != 0 {
		r.fail(t, "local_op_replays went up by %d (must stay 0)", replays)
		return
	}
	if msg := d.timerVerdict(rto, exceeded, goBacks, ev); msg != "" {
		r.fail(t, "%s\n%s\n%s\n%s", msg, ev.String(t), kern, ours)
		return
	}
	if rto > 0 {
		t.Logf("%d retransmit timeouts (impaired %v):\n%s", rto, d.cfg.impaired, ev.String(t))
	}
	r.result = "PASS"
	t.Logf("%s: %s (%s) in %.1fs", r.dir, r.figure, r.note, r.secs)
	return ""
}

// lostAfterExit is the suite's lostAfterExit for the drop-in programs: a
// lossy ping-pong whose guest program did every iteration and whose host
// program failed waiting for the ACK of its last request, which the
// captures show lost after the guest's QP had gone.
func (d *dropin) lostAfterExit(c dropinCase, kern, ours outcome, ev caseEvidence) (string, bool) {
	if !d.cfg.impaired || c.perf() || ev.drops > 0 || !kern.ok() || ours.ok() {
		return "", false
	}
	if f, ok := parsePingpong(kern.stdout); !ok || f.iters != c.iters {
		return "", false
	}
	if !strings.Contains(ours.stdout+ours.stderr, "transport retry counter exceeded") {
		return "", false
	}
	return lostLastAck(ev.frames, ev.guest, true)
}

// checkDropin checks both programs reported the whole run with a figure
// above zero (pingpong: both; perftest: the client, and the server when
// it prints a report), and that each side's QPs are the ones the other
// printed as its remote. It returns the figures for the table.
func checkDropin(c dropinCase, kern, ours outcome, kernelServer bool) (string, error) {
	side := map[bool]string{true: "guest", false: "host"}
	var figs []string
	if !c.perf() {
		for _, o := range []outcome{kern, ours} {
			f, ok := parsePingpong(o.stdout)
			if !ok || f.iters != c.iters || !(f.a > 0) || !(f.b > 0) {
				return "", fmt.Errorf("%s: no summary of %d iterations with figures above 0 (%+v)", o.who, c.iters, f)
			}
			figs = append(figs, side[o.who == kern.who]+" "+f.String())
		}
	} else {
		cli, srv := kern, ours
		if kernelServer {
			cli, srv = ours, kern
		}
		f, ok := parsePerftest(cli.stdout)
		if !ok || f.iters != c.iters || !(f.a > 0) {
			return "", fmt.Errorf("%s (client): no report of %d iterations with a figure above 0 (%+v)", cli.who, c.iters, f)
		}
		figs = append(figs, side[cli.who == kern.who]+" "+f.String())
		if fs, ok := parsePerftest(srv.stdout); ok {
			if fs.iters != c.iters || !(fs.a > 0) {
				return "", fmt.Errorf("%s (server): a report of %d iterations, figure %v (want %d, above 0)", srv.who, fs.iters, fs.a, c.iters)
			}
			figs = append(figs, side[srv.who == kern.who]+" "+fs.String())
		}
		for _, o := range []outcome{kern, ours} {
			if strings.Contains(o.stdout+o.stderr, "Completion with error") {
				return "", fmt.Errorf("%s reported a completion with error", o.who)
			}
		}
	}
	kl, kr := qpAddrs(kern.stdout)
	hl, hr := qpAddrs(ours.stdout)
	if len(kl) == 0 || !slices.Equal(kl, hr) || !slices.Equal(hl, kr) {
		return "", fmt.Errorf("the QPs do not pair: guest local %x remote %x, host local %x remote %x", kl, kr, hl, hr)
	}
	return strings.Join(figs, "; "), nil
}

// qpAddr matches the address lines of rdma-core's pingpong examples
// ("  local address:  LID 0x0000, QPN 0x000011, PSN 0x2316f4, GID ...")
// and perftest's (" local address: LID 0000 QPN 0x0011 PSN 0x6a1c4f ...").
var qpAddr = regexp.MustCompile(`(?m)^\s*(local|remote) address:\s+LID \S+?,? QPN 0x([0-9a-f]+),? PSN 0x([0-9a-f]+)`)

// qpAddrs gives the QPN<<24|PSN of each local and remote address line,
// each list sorted.
func qpAddrs(out string) (local, remote []uint64) {
	for _, m := range qpAddr.FindAllStringSubmatch(out, -1) {
		q, _ := strconv.ParseUint(m[2], 16, 32)
		p, _ := strconv.ParseUint(m[3], 16, 32)
		if m[1] == "local" {
			local = append(local, q<<24|p)
		} else {
			remote = append(remote, q<<24|p)
		}
	}
	slices.Sort(local)
	slices.Sort(remote)
	return local, remote
}

func TestQPAddrs(t *testing.T) {
	pp := "  local address:  LID 0x0000, QPN 0x000011, PSN 0x2316f4, GID ::ffff:192.0.2.2\n" +
		"  remote address: LID 0x0000, QPN 0x000012, PSN 0xd39e52, GID ::ffff:192.0.2.10\n"
	if l, r := qpAddrs(pp); !slices.Equal(l, []uint64{0x11<<24 | 0x2316f4}) || !slices.Equal(r, []uint64{0x12<<24 | 0xd39e52}) {
		t.Errorf("pingpong: %x %x", l, r)
	}
	pf := " local address: LID 0000 QPN 0x0011 PSN 0x6a1c4f RKey 0x000104 VAddr 0x007f1c2e3f0000\n" +
		" GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:00:02:02\n" +
		" remote address: LID 0000 QPN 0x0040 PSN 0x1b2c3d RKey 0x000204 VAddr 0x007f0000000000\n"
	if l, r := qpAddrs(pf); !slices.Equal(l, []uint64{0x11<<24 | 0x6a1c4f}) || !slices.Equal(r, []uint64{0x40<<24 | 0x1b2c3d}) {
		t.Errorf("perftest: %x %x", l, r)
	}
}
