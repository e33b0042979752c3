package interop_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/interop/rxepeer"
	"github.com/vrnic/vrnicd/nic/link/linktest"
	"github.com/vrnic/vrnicd/transport/wire"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/rocetest"
)

// UD multicast against kernel rxe (issue #29): rdma-core's mckey, Debian's
// unmodified program, in the guest on rxe0 and on the host under vrnicd's
// drop-in librdmacm (daemon A, TAP mode), one the receiver and the other
// the sender (-s), each way: 10 messages of 100 bytes (mckey's defaults)
// to an IPv4 group, both exit 0 with mckey's lines. Both sides bind (-b)
// their own address: mckey resolves the group itself (rdma_resolve_addr to
// the group), the guest's init adds no route but its subnet's, and with a
// source address the kernel routes a multicast destination out of that
// address's interface. A capture of daemon A's TAP compares the kernel's
// multicast frames with vrnicd's field by field, and the captures of both
// TAPs show each receiver's IGMP membership report for the group (the
// guest's kernel's from cma_igmp_send, vrnicd's own netstack's in TAP
// mode), compared too. Then vrnicd in raw mode as the receiver, in a
// namespace of its own: its host's kernel reports the join (and lists it
// in /proc/net/igmp until mckey leaves). Then a send-only sender (-o) each
// way, which sends without a report, and an IPv6 group, which both refuse
// alike. Last, messages with another Q_Key than the receiver QP's, built
// here (mckey cannot make such a receiver), which neither receiver takes.

// mckeyGroups: one per case, so a case's frames and reports are its own.
const (
	mckeyGroupToKernel   = "239.7.7.1" // vrnicd sends, the kernel receives
	mckeyGroupFromKernel = "239.7.7.2"
	mckeyGroupSendOnlyTo = "239.7.7.3"
	mckeyGroupSendOnlyFr = "239.7.7.4"
	mckeyGroupRaw        = "239.7.7.5"
	mckeyGroupQKey       = "239.7.7.6"
	mckeyGroupQKey2      = "239.7.7.7"
	// vrnic-mckey (the Go clone) each way.
	mckeyGroupGoToKernel   = "239.7.7.8"
	mckeyGroupGoFromKernel = "239.7.7.9"
	// mckeyGroup6: an IPv6 group (AF_IB by -M; mckey -M needs -b).
	mckeyGroup6 = "ff0e::db8:7"
	// mckeyGroup6LL: a link-local scope IPv6 group, which the kernel routes
	// out of the bound address's interface (ff00::/8 is in every IPv6
	// interface's table).
	mckeyGroup6LL = "ff02::db8:7"
	// mckeyQKey is what the rdma_cm's join gives UDP port space members
	// (RDMA_UDP_QKEY) and mckey sends with.
	mckeyQKey = 0x01234567
)

var (
	mckeyReceiverLines = []string{"mckey: starting server", "mckey: joining", "receiving data transfers",
		"data transfers complete", "test complete", "return status 0"}
	mckeySenderLines = []string{"mckey: starting client", "mckey: joining", "initiating data transfers",
		"data transfers complete", "test complete", "return status 0"}
)

func TestInteropMckey(t *testing.T) {
	libDir := dropinLib(t)
	if _, err := os.Stat(filepath.Join(libDir, "librdmacm.so.1")); err != nil {
		t.Skipf("the drop-in librdmacm is not built (run `make cabi`; it needs librdmacm-dev): %v", err)
	}
	progs := map[string]string{}
	for _, p := range []string{"mckey", "stdbuf"} {
		path, err := exec.LookPath(p)
		if err != nil {
			t.Skipf("%s is not installed on the host (apt-get install rdmacm-utils coreutils): %v", p, err)
		}
		progs[p] = path
	}
	start := time.Now()
	n, vm, d := cmBed(t)
	h := &dropinCM{n: n, vm: vm, d: d, libDir: libDir, progs: progs}
	epoch := time.Now()
	a := &vrnSide{name: "daemon A (TAP mode)", n: n, d: d, cap: startFrameLog(t, n, d.tap, epoch)}
	m := &mckeyBed{h: h, a: a, capV: startFrameLog(t, n, vm.TAP, epoch), guest: vm.IP.Addr()}
	t.Logf("bed up in %.1fs (guest under %s, kernel %s); host mckey on %s through %s", time.Since(start).Seconds(),
		vm.Accel, vm.Kernel, d.socket, libDir)

	var toKernel, fromKernel []byte // a multicast RoCE frame of each sender
	reports := map[string]*igmpReport{}
	t.Run("kernel-receiver", func(t *testing.T) {
		toKernel, reports["kernel"] = m.run(t, a, mckeyGroupToKernel, true, nil)
	})
	t.Run("vrnicd-receiver", func(t *testing.T) {
		fromKernel, reports["vrnicd (TAP mode)"] = m.run(t, a, mckeyGroupFromKernel, false, nil)
	})
	t.Run("frames", func(t *testing.T) {
		if toKernel == nil || fromKernel == nil {
			t.Skip("a direction failed: no frames to compare")
		}
		compareMcastFrames(t, fromKernel, toKernel)
	})
	t.Run("raw-mode-receiver", func(t *testing.T) {
		// vrnicd in raw mode, where the host's kernel owns the interface
		// and sends the IGMP report for vrnicd's join (nic/netstack
		// membership_linux.go): its own namespace, a veth to the bridge.
		raw := m.rawSide(t, epoch)
		_, reports["vrnicd (raw mode: its host's kernel)"] = m.run(t, raw, mckeyGroupRaw, false, nil)
	})
	t.Run("igmp", func(t *testing.T) { compareIGMP(t, reports) })
	t.Run("send-only", func(t *testing.T) {
		t.Run("kernel-receiver", func(t *testing.T) { m.run(t, a, mckeyGroupSendOnlyTo, true, []string{"-o"}) })
		t.Run("vrnicd-receiver", func(t *testing.T) { m.run(t, a, mckeyGroupSendOnlyFr, false, []string{"-o"}) })
	})
	t.Run("vrnic-mckey", func(t *testing.T) {
		// The Go clone in place of the host's mckey, against the kernel's.
		g := *m
		g.goTool = d.tools.mckey
		t.Run("kernel-receiver", func(t *testing.T) { g.run(t, a, mckeyGroupGoToKernel, true, nil) })
		t.Run("vrnicd-receiver", func(t *testing.T) { g.run(t, a, mckeyGroupGoFromKernel, false, nil) })
	})
	t.Run("verbs-kernel", h.mcastVerbs)
	t.Run("qkey-mismatch", m.qkey)
	t.Run("ipv6-group", m.ipv6)
	t.Logf("%.1fs in all", time.Since(start).Seconds())
}

// mckeyBed is the guest, daemon A, the host's programs and the capture of
// the guest's TAP.
type mckeyBed struct {
	h     *dropinCM
	a     *vrnSide
	capV  *frameLog
	guest netip.Addr
	// goTool: the host side runs vrnic-mckey (this path) on the Go SDK
	// instead of rdma-core's mckey on the drop-in librdmacm.
	goTool string
}

// vrnSide is a vrnicd the host's mckey runs on: its namespace, daemon and
// the capture of its link.
type vrnSide struct {
	name string
	n    *rxepeer.Netns
	d    *daemon
	cap  *frameLog
}

// hostArgv is the host's mckey under the drop-in on side v, line-buffered
// (stdbuf) so that its progress can be read while it runs.
func (m *mckeyBed) hostArgv(v *vrnSide, args ...string) []string {
	if m.goTool != "" {
		return append([]string{m.goTool, "--socket", v.d.socket}, args...)
	}
	h := m.h
	return append([]string{"env", "LD_LIBRARY_PATH=" + h.libDir, "VRNICD_SOCKET=" + v.d.socket, "LC_ALL=C",
		h.progs["stdbuf"], "-oL", h.progs["mckey"]}, args...)
}

// rawSide starts a raw-mode vrnicd (192.0.2.20) in a namespace of its own,
// on a veth whose peer is on the guest's bridge.
func (m *mckeyBed) rawSide(t *testing.T, epoch time.Time) *vrnSide {
	t.Helper()
	rn := rxepeer.NewNetns(t)
	linktest.VethPair(t, m.h.n.NS, "vmcb", rn.NS, "vmcr")
	if err := m.h.n.IP("link", "set", "vmcb", "master", m.h.n.Bridge); err != nil {
		t.Fatal(err)
	}
	if err := rn.IP("addr", "add", "192.0.2.20/24", "dev", "vmcr"); err != nil {
		t.Fatal(err)
	}
	ts := buildTools(t)
	d := &daemon{name: "vrr", socket: filepath.Join(t.TempDir(), "vrr.sock"), tap: "vmcr",
		addr: netip.MustParseAddr("192.0.2.20"), tools: ts}
	d.proc = startHost(t, rn, ts.vrnicd, "--log-format", "json", "--iface", "vmcr", "--socket", d.socket, "--name", d.name)
	line, _, ok := d.proc.stderr.Wait(0, 20*time.Second, func(s string) bool { return strings.Contains(s, `"msg":"vrnicd ready"`) })
	if !ok {
		d.proc.kill()
		t.Fatalf("raw-mode vrnicd: no ready line; exit %d; log:\n%s", d.proc.exit, d.proc.stderr.String())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("raw-mode vrnicd log (tail):\n%s", tailLines(d.proc.stderr.String(), 30))
		}
	})
	t.Logf("raw-mode vrnicd: %s", line)
	return &vrnSide{name: "vrnicd in raw mode", n: rn, d: d, cap: startFrameLog(t, rn, "vmcr", epoch)}
}

// procIGMP says whether /proc/net/igmp of v's namespace lists group g on
// its link: the kernel's own record of the membership.
func (v *vrnSide) procIGMP(t *testing.T, g netip.Addr) (bool, string) {
	t.Helper()
	var b []byte
	if err := v.n.Do(func() (err error) {
		b, err = os.ReadFile("/proc/thread-self/net/igmp")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	a := g.As4()
	hex := fmt.Sprintf("%08X", binary.LittleEndian.Uint32(a[:])) // the __be32 as the kernel prints it
	dev := ""
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && !strings.HasPrefix(l, "\t") && f[0] != "Idx" {
			dev = f[1]
		} else if len(f) >= 1 && f[0] == hex && dev == v.d.tap {
			return true, string(b)
		}
	}
	return false, string(b)
}

// run is one direction between the guest and vrnicd side v: the
// receiver joins group (the kernel's in the guest when kernelRx, else the
// host's on v), its IGMP report is on its link, then the other side sends
// 10 messages with senderArgs; both must exit 0 with mckey's lines. It
// returns the first multicast RoCE frame of the sender's as v's link saw
// it, and the receiver's first IGMP report.
func (m *mckeyBed) run(t *testing.T, v *vrnSide, group string, kernelRx bool, senderArgs []string) ([]byte, *igmpReport) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	g := netip.MustParseAddr(group)
	ours := v.d.addr
	markO, markV := v.cap.mark(), m.capV.mark()
	rxAddr, txAddr, rxCap, txCap, rxMark, txMark := ours, m.guest, v.cap, m.capV, markO, markV
	if kernelRx {
		rxAddr, txAddr, rxCap, txCap, rxMark, txMark = m.guest, ours, m.capV, v.cap, markV, markO
	}
	kargs := func(extra ...string) string {
		return strings.Join(append([]string{"mckey", "-m", group, "-b", m.guest.String()}, extra...), " ")
	}
	start := time.Now()
	var rxOut, rxErr, txOut, txErr string
	var rxExit, txExit int
	var rxE, txE error
	var rxWho, txWho string
	var rxRep *igmpReport
	if kernelRx {
		rxWho = "kernel " + kargs()
		job := m.h.vm.StartTimeout(kargs(), 90*time.Second)
		defer job.Kill()
		// The guest's mckey writes to a file (full buffering): its join
		// shows as the kernel's IGMP report on the guest's TAP.
		rep, err := rxCap.waitIGMP(ctx, rxMark, rxAddr, g, job.Done)
		if err != nil {
			so, se := job.Output()
			t.Fatalf("%s: %v\n%s%s", rxWho, err, so, se)
		}
		rxRep = rep
		t.Logf("the guest's IGMP report for %s %.1fs after mckey started: %s", group, time.Since(start).Seconds(), rep)
		argv := m.hostArgv(v, append([]string{"-m", group, "-b", ours.String(), "-s"}, senderArgs...)...)
		txWho = "drop-in " + strings.Join(argv[6:], " ") + " on " + v.name
		txOut, txErr, txExit, txE = startTool(t, v.n, argv...).wait(ctx)
		rxOut, rxErr, rxExit, rxE = job.Wait(ctx)
	} else {
		argv := m.hostArgv(v, "-m", group, "-b", ours.String())
		rxWho = "drop-in " + strings.Join(argv[6:], " ") + " on " + v.name
		p := startTool(t, v.n, argv...)
		defer p.kill()
		if _, _, ok := p.stdout.Wait(0, 60*time.Second, func(s string) bool { return s == "receiving data transfers" }); !ok {
			so, se, x, err := p.wait(ctx)
			t.Fatalf("%s: not receiving in 60 s (exit %d %v)\n%s%s", rxWho, x, err, so, se)
		}
		rep, err := rxCap.waitIGMP(ctx, rxMark, rxAddr, g, p.exited)
		if err != nil {
			t.Fatalf("%s: %v", rxWho, err)
		}
		rxRep = rep
		t.Logf("the IGMP report for %s from %s %.1fs after mckey started: %s", group, v.name, time.Since(start).Seconds(), rep)
		if v.d.tap == "vmcr" { // raw mode: the kernel holds the membership
			if ok, table := v.procIGMP(t, g); !ok {
				t.Errorf("/proc/net/igmp of the raw-mode host lacks %s on %s while mckey receives:\n%s", group, v.d.tap, table)
			} else {
				t.Logf("/proc/net/igmp of the raw-mode host:\n%s", table)
			}
		}
		kcmd := kargs(append([]string{"-s"}, senderArgs...)...)
		txWho = "kernel " + kcmd
		txOut, txErr, txExit, txE = m.h.vm.Exec(ctx, kcmd)
		rxOut, rxErr, rxExit, rxE = p.wait(ctx)
	}
	t.Logf("%.1fs\nreceiver %s:\n%s%s\nsender %s:\n%s%s", time.Since(start).Seconds(), rxWho, rxOut, rxErr, txWho, txOut, txErr)
	if rxE != nil || rxExit != 0 || txE != nil || txExit != 0 {
		t.Fatalf("receiver %s: exit %d %v\nsender %s: exit %d %v", rxWho, rxExit, rxE, txWho, txExit, txE)
	}
	checkSequence(t, "receiver "+rxWho, rxOut, mckeyReceiverLines)
	checkSequence(t, "sender "+txWho, txOut, mckeySenderLines)
	// Both joins came back with the same path: the MGID ::ffff:G, no LID,
	// SL 0 (the kernel's cma_iboe_join_multicast); a send-only sender's too.
	want := fmt.Sprintf("mckey: joined dgid: ::ffff:%s mlid 0x0 sl 0", group)
	for who, out := range map[string]string{rxWho: rxOut, txWho: txOut} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("%s: no line %q", who, want)
		}
	}

	time.Sleep(100 * time.Millisecond) // the captures' last frames
	// The sender's messages on the vrnicd side's link: 10 of them, each
	// to the group from the sender's address.
	var sent [][]byte
	for _, f := range v.cap.since(markO) {
		if mf, ok := parseMcastRoCE(f.b); ok && mf.dst == g && mf.src == txAddr {
			sent = append(sent, f.b)
		}
	}
	if len(sent) != 10 {
		t.Errorf("%d multicast RoCE frames from %s to %s on %s, want 10", len(sent), txAddr, group, v.cap.dev)
	}
	// Reports: the receiver's join (seen before the sender started);
	// the sender's only unless it is send-only.
	txReps := txCap.igmpFrom(txMark, txAddr, g)
	if sendOnly := len(senderArgs) > 0 && senderArgs[0] == "-o"; sendOnly {
		if len(txReps) > 0 {
			t.Errorf("the send-only sender %s reported membership of %s: %v", txAddr, group, txReps)
		}
	} else if len(txReps) == 0 {
		t.Errorf("no IGMP report for %s from the sender %s (a full member)", group, txAddr)
	}
	t.Logf("IGMP joining %s, receiver %s: %v; sender %s: %v", group, rxAddr, rxCap.igmpFrom(rxMark, rxAddr, g), txAddr, txReps)
	if v.d.tap == "vmcr" && !kernelRx {
		// The receiver left: the kernel dropped the membership with it.
		deadline := time.Now().Add(10 * time.Second)
		for ok, table := v.procIGMP(t, g); ok; ok, table = v.procIGMP(t, g) {
			if time.Now().After(deadline) {
				t.Errorf("/proc/net/igmp of the raw-mode host still has %s 10 s after mckey left:\n%s", group, table)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if len(sent) == 0 {
		return nil, rxRep
	}
	return sent[0], rxRep
}

// compareIGMP: the receivers' membership reports, the kernel's (the
// guest's cma_igmp_send) and vrnicd's, field by field: the same IGMP
// version and message, to 224.0.0.22 (IGMPv3) with TTL 1 and the Router
// Alert option, one record joining the group (CHANGE_TO_EXCLUDE_MODE).
func compareIGMP(t *testing.T, reps map[string]*igmpReport) {
	k := reps["kernel"]
	if k == nil || len(reps) < 2 {
		t.Skip("a receiver failed: no reports to compare")
	}
	var b strings.Builder
	for who, r := range reps {
		fmt.Fprintf(&b, "%-40s %s\n", who, r)
		if r == nil {
			continue
		}
		if r.typ != k.typ || r.dst != k.dst || r.ttl != k.ttl || r.ra != k.ra {
			t.Errorf("%s: %s; the kernel's: %s", who, r, k)
		}
		if r.joinRecord() != k.joinRecord() {
			t.Errorf("%s: joins with record type %d; the kernel's with %d", who, r.joinRecord(), k.joinRecord())
		}
	}
	if k.typ != 0x22 || k.dst != netip.MustParseAddr("224.0.0.22") || k.ttl != 1 || !k.ra || k.joinRecord() != 4 {
		t.Errorf("the kernel's report: %s (want IGMPv3 to 224.0.0.22, TTL 1, Router Alert, CHANGE_TO_EXCLUDE)", k)
	}
	t.Logf("each receiver's first report for its group:\n%s", b.String())
}

// qkey: a receiver whose QP's Q_Key differs from the message's gets
// nothing. mckey cannot make such a receiver: its QP takes the rdma_cm
// id's Q_Key (rdma_create_qp on a UDP port space id: RDMA_UDP_QKEY, what
// the join returns and mckey's sender sends with), it has no option for
// another, and the other port space cannot stand in (the guest's kernel
// refuses to bind an IPoIB port space id, -p 0x2, on rxe: "mckey: addr
// bind failure: Invalid argument", logged each run). So the sender's Q_Key
// differs instead, which the receiver checks the same way (rxe's
// check_keys: the DETH's Q_Key against the QP's): a UD SEND to the group
// built here (transport/wire, ICRC and all) and sent from the bridge, with
// Q_Key 0x01234568, to a receiver of one message (mckey -C 1), the
// kernel's and vrnicd's. It must not complete it within 3 s (mckey would
// count any completion and exit); the same message with the join's Q_Key
// then completes it.
func (m *mckeyBed) qkey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kcmd := fmt.Sprintf("mckey -p 0x2 -m %s -b %s -C 1", mckeyGroupQKey, m.guest)
	ko, ke, kx, kerr := m.h.vm.Exec(ctx, kcmd)
	t.Logf("kernel %s (the IPoIB port space): exit %d %v\n%s%s", kcmd, kx, kerr, ko, ke)

	pc, err := m.h.n.PacketSocket(m.h.n.Bridge)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	send := func(t *testing.T, group netip.Addr, qkey uint32, psn uint32) {
		t.Helper()
		b := group.As4()
		dst := net.HardwareAddr{0x01, 0x00, 0x5e, b[1] & 0x7f, b[2], b[3]}
		f := rocetest.BuildFrame(&rocetest.FrameSpec{DstMAC: [6]byte(dst), SrcMAC: [6]byte(pc.MAC), Src: m.h.n.HostAddr.Addr(), Dst: group,
			IPID: 0x2a2a, SrcPort: 0xc0de, Packet: wire.PacketFields{
				BTH:     wire.BTHFields{Opcode: wire.UDSendOnlyWithImmediate, PKey: wire.DefaultPKey, DestQP: 0xffffff, PSN: psn},
				DETH:    wire.DETHFields{QKey: qkey, SrcQP: 0x77},
				Imm:     0x77,
				Payload: make([]byte, 100),
			}})
		if err := pc.Send(f); err != nil {
			t.Fatal(err)
		}
	}
	// check sends three messages with the wrong Q_Key, sees the receiver
	// still waiting 3 s later (done), then one with the right Q_Key.
	check := func(t *testing.T, g netip.Addr, done func() bool) {
		for i := uint32(0); i < 3; i++ {
			send(t, g, mckeyQKey+1, i)
		}
		time.Sleep(3 * time.Second)
		if done() {
			t.Errorf("the receiver ended after messages with Q_Key %#x (its QP's: %#x)", mckeyQKey+1, mckeyQKey)
		}
		send(t, g, mckeyQKey, 3)
	}
	t.Run("kernel-receiver", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		g := netip.MustParseAddr(mckeyGroupQKey)
		mark := m.capV.mark()
		kcmd := fmt.Sprintf("mckey -m %s -b %s -C 1", g, m.guest)
		job := m.h.vm.StartTimeout(kcmd, 45*time.Second)
		defer job.Kill()
		if _, err := m.capV.waitIGMP(ctx, mark, m.guest, g, job.Done); err != nil {
			so, se := job.Output()
			t.Fatalf("kernel %s: %v\n%s%s", kcmd, err, so, se)
		}
		// Its QP is attached once librdmacm has read the join's event,
		// right after the report; mckey then sleeps 3 s before polling.
		time.Sleep(2 * time.Second)
		check(t, g, job.Done)
		ko, ke, kx, kerr := job.Wait(ctx)
		t.Logf("kernel %s: exit %d %v\n%s%s", kcmd, kx, kerr, ko, ke)
		if kerr != nil || kx != 0 {
			t.Fatalf("kernel %s: exit %d %v", kcmd, kx, kerr)
		}
		checkSequence(t, "kernel "+kcmd, ko, mckeyReceiverLines)
	})
	t.Run("vrnicd-receiver", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		g := netip.MustParseAddr(mckeyGroupQKey2)
		argv := m.hostArgv(m.a, "-m", g.String(), "-b", m.a.d.addr.String(), "-C", "1")
		p := startTool(t, m.a.n, argv...)
		defer p.kill()
		if _, _, ok := p.stdout.Wait(0, 30*time.Second, func(s string) bool { return s == "receiving data transfers" }); !ok {
			so, se, x, err := p.wait(ctx)
			t.Fatalf("drop-in mckey: not receiving in 30 s (exit %d %v)\n%s%s", x, err, so, se)
		}
		check(t, g, p.exited)
		so, se, x, err := p.wait(ctx)
		t.Logf("drop-in %s: exit %d %v\n%s%s", strings.Join(argv[6:], " "), x, err, so, se)
		if err != nil || x != 0 {
			t.Fatalf("drop-in mckey: exit %d %v", x, err)
		}
		checkSequence(t, "drop-in mckey", so, mckeyReceiverLines)
	})
}

// ipv6: an IPv6 group, which rdma_cm on RoCEv2 refuses: the kernel's
// cma_iboe_join_multicast joins AF_INET groups only and answers ENOTSUPP
// (524) to any other. Two ways to ask: -M, which joins the group as an
// AF_IB address (sib_addr the IPv6 address) without resolving it (it needs
// -b; here each side's IPv4 address), and -m with an IPv6 group, resolved
// from each side's link-local address (GID 0). The drop-in must refuse
// both as the kernel does: the same exit status and the same lines.
func (m *mckeyBed) ipv6(t *testing.T) {
	t.Run("AF_IB -M", func(t *testing.T) {
		m.bothRefuse(t, []string{"-M", mckeyGroup6, "-b", m.guest.String()}, []string{"-M", mckeyGroup6, "-b", m.a.d.addr.String()})
	})
	t.Run("AF_INET6 -m", func(t *testing.T) {
		guest, ours := linkLocal(t, m.h.vm, m.h.d)
		m.bothRefuse(t, []string{"-m", mckeyGroup6LL, "-b", guest}, []string{"-m", mckeyGroup6LL, "-b", ours})
	})
}

// bothRefuse runs the guest's mckey with kargs and the host's with hargs,
// receivers both: the kernel's must fail, and the drop-in's the same way.
func (m *mckeyBed) bothRefuse(t *testing.T, kargs, hargs []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kcmd := "mckey " + strings.Join(kargs, " ")
	ko, ke, kx, kerr := m.h.vm.Exec(ctx, kcmd)
	argv := m.hostArgv(m.a, hargs...)
	so, se, sx, serr := startTool(t, m.a.n, argv...).wait(ctx)
	t.Logf("kernel %s: exit %d\n%s%s\ndrop-in %s: exit %d\n%s%s", kcmd, kx, ko, ke, strings.Join(argv[6:], " "), sx, so, se)
	if kerr != nil || serr != nil {
		t.Fatalf("kernel: %v; drop-in: %v", kerr, serr)
	}
	if kx == 0 {
		t.Errorf("the kernel's mckey joined the IPv6 group")
	}
	if sx != kx {
		t.Errorf("exit status: drop-in %d, kernel %d", sx, kx)
	}
	if so != ko {
		t.Errorf("stdout differs:\ndrop-in:\n%s\nkernel:\n%s", so, ko)
	}
	if se != ke {
		t.Errorf("stderr differs:\ndrop-in:\n%s\nkernel:\n%s", se, ke)
	}
}

// mcastVerbs builds cabi/testprog/mcast.c here, puts it in the guest's
// spool and runs it on rxe0 against the guest's libibverbs: ib_core's and
// rxe's rules for attach and detach (EINVAL for a unicast GID, a non-UD QP
// and a detach of what is not attached; attaching twice is no error), the
// device's limits, and creation flags the device lacks are what the
// drop-in answers. The delivery cases need a second device or multicast
// loopback on one, which the guest's single rxe0 does not give to raw
// verbs (measured: nothing arrives, with or without an IP-level join),
// so they run here only on vrnicd (cabi/mcast_test.go); the kernel's
// delivery is proven with mckey above. BLOCK_SELF_MCAST_LB is refused by
// rxe: that case skips there.
func (h *dropinCM) mcastVerbs(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	bin := filepath.Join(h.vm.State, "spool", "mcast")
	if b, err := exec.Command(cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-o", bin,
		filepath.Join("..", "cabi", "testprog", "mcast.c"), "-libverbs").CombinedOutput(); err != nil {
		t.Skipf("building mcast (apt-get install libibverbs-dev): %v\n%s", err, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const oneDevice = "needs two devices or raw-verbs multicast loopback, which one rxe device lacks"
	out, errOut, exit, err := h.vm.Exec(ctx, fmt.Sprintf("MCAST_SKIP='fanout=%[1]s;loopback=%[1]s;detach=%[1]s;unsignaled=%[1]s' /spool/mcast", oneDevice))
	ok, failed, skipped := 0, []string{}, []string{}
	for _, m := range cmeventsLine.FindAllStringSubmatch(out, -1) {
		switch m[1] {
		case "ok":
			ok++
		case "FAIL":
			failed = append(failed, m[2]+m[3])
		case "SKIP":
			skipped = append(skipped, m[2])
		}
	}
	if err != nil || exit != 0 || len(failed) > 0 || ok == 0 || !slices.Equal(skipped, []string{"fanout", "loopback", "detach", "block_self", "unsignaled"}) {
		t.Fatalf("mcast on kernel rxe: exit %d %v; failed %q, skipped %q\n%s%s", exit, err, failed, skipped, out, errOut)
	}
	t.Logf("%d cases ok on kernel rxe, skipped %q:\n%s", ok, skipped, out)
}
