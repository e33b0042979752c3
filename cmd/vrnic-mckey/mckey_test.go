package main

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/cmd/internal/cmtool"
	"github.com/vrnic/vrnicd/cmd/internal/tooltest"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/verbsock/server/servertest"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// The tests shorten mckey's 3 s pause: a receiver is started first and a
// sender only once the receiver waits for its messages.
func TestMain(m *testing.M) {
	joinPause = 100 * time.Millisecond
	os.Exit(m.Run())
}

const group = "239.1.2.3"

// joined is join_handler's line for group: its MGID ::ffff:G, no LID and
// SL 0 over RoCEv2.
const joined = "mckey: joined dgid: ::ffff:" + group + " mlid 0x0 sl 0"

// mckey's output on success (mckey.c run and main).
var (
	receiverLines = []string{"mckey: starting server", "mckey: joining", joined, "receiving data transfers",
		"data transfers complete", "test complete", "return status 0"}
	senderLines = []string{"mckey: starting client", "mckey: joining", joined, "initiating data transfers",
		"data transfers complete", "test complete", "return status 0"}
)

// syncBuffer is a bytes.Buffer the test reads while the tool writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// mckey runs vrnic-mckey on d's socket with args.
func mckey(ctx context.Context, d servertest.Daemon, args ...string) tooltest.Result {
	var o, e syncBuffer
	err := run(ctx, append([]string{"--socket", d.Socket}, args...), &o, &e)
	return tooltest.Result{Stdout: o.String(), Stderr: e.String(), Err: err}
}

// pair runs a receiver on rx with rxArgs and, once it waits for its
// messages, a sender on tx with txArgs, both of group from their daemon's
// address; it returns both runs.
func pair(t *testing.T, rx, tx servertest.Daemon, rxArgs, txArgs []string) (recv, send tooltest.Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The sender leaves once the receiver has its messages: its own
	// QP's copies have come by then.
	transferred := make(chan struct{})
	beforeLeave = func(sender bool) {
		if !sender {
			close(transferred)
			return
		}
		select {
		case <-transferred:
		case <-time.After(5 * time.Second):
		}
	}
	defer func() { beforeLeave = nil }()
	var o, e syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"--socket", rx.Socket, "-m", group, "-b", rx.Host.Addr.String()}, rxArgs...), &o, &e)
	}()
	for !strings.Contains(o.String(), "receiving data transfers") {
		select {
		case err := <-done:
			t.Fatalf("the receiver ended: %v\n%s%s", err, o.String(), e.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	send = mckey(ctx, tx, append([]string{"-m", group, "-b", tx.Host.Addr.String(), "-s"}, txArgs...)...)
	err := <-done
	return tooltest.Result{Stdout: o.String(), Stderr: e.String(), Err: err}, send
}

// dropped is the device's rcvd_dropped: among others, the multicast
// messages a QP of the group had no receive for (the sender's own,
// looped back to it).
func dropped(d servertest.Daemon) uint64 {
	d.Host.Dev.Sync()
	return d.Host.Dev.Counters().Get(transport.RcvdDropped)
}

// TestMckeyGroup: a receiver and a sender, across two daemons and on one
// (the sender's messages loop back to the receiver's QP), -c members on
// each side; a send-only sender (-o) and a sender joined without loopback
// (-l), whose own QP does not get its messages while the full member's
// does (it has no receives for them: rcvd_dropped).
func TestMckeyGroup(t *testing.T) {
	twoMembers := func(lines []string) []string {
		var out []string
		for _, l := range lines {
			if out = append(out, l); l == joined {
				out = append(out, joined)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name           string
		oneDevice      bool
		rxArgs, txArgs []string
		rxWant, txWant []string
		txDrops        uint64 // the sender's device's rcvd_dropped
	}{
		{"two daemons", false, nil, nil, receiverLines, senderLines, 10},
		{"one daemon", true, nil, nil, receiverLines, senderLines, 10},
		{"two members each, 1024 bytes", false, []string{"-c", "2", "-S", "1024", "-C", "20"}, []string{"-c", "2", "-S", "1024", "-C", "10"},
			twoMembers(receiverLines), twoMembers(senderLines), 2 * 2 * 10},
		{"send-only", false, nil, []string{"-o"}, receiverLines, senderLines, 0},
		{"no loopback", true, nil, []string{"-l"}, receiverLines, senderLines, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := servertest.TwoDaemons(t, 1500)
			rx, tx := ds[1], ds[0]
			if tc.oneDevice {
				rx = tx
			}
			before := dropped(tx)
			recv, send := pair(t, rx, tx, tc.rxArgs, tc.txArgs)
			tooltest.CheckLines(t, "receiver", recv, tc.rxWant)
			tooltest.CheckLines(t, "sender", send, tc.txWant)
			if d := dropped(tx) - before; d != tc.txDrops {
				t.Errorf("the sender's device dropped %d messages, want %d (its own QP's)", d, tc.txDrops)
			}
		})
	}
}

// TestMckeyMessages: what a sender sends, as a receiver of the SDK sees
// it: -C messages of -S bytes (with the 40-byte GRH), each a SEND with
// immediate data, the sending QP's number; and a receiver that gets fewer
// than -C does not finish.
func TestMckeyMessages(t *testing.T) {
	ds := servertest.TwoDaemons(t, 1500)
	d, err := verbs.Open(ds[1].Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	g, err := d.JoinMulticast(netip.MustParseAddr(group), verbs.JoinOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Leave()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(32, false)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateCMQP(verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.AttachMcast(g.MGID); err != nil {
		t.Fatal(err)
	}
	mr, err := cmtool.Reg(pd, 16*1064, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 16 {
		if err := qp.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{mr.SGE(uint64(i*1064), 1064)}}); err != nil {
			t.Fatal(err)
		}
	}
	send := mckey(context.Background(), ds[0], "-m", group, "-s", "-C", "12", "-S", "1000")
	tooltest.CheckLines(t, "sender", send, senderLines)
	var wc [16]verbs.WC
	n := 0
	for deadline := time.Now().Add(5 * time.Second); n < 12 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		n += cq.Poll(wc[n:])
	}
	if n != 12 {
		t.Fatalf("%d messages, want 12", n)
	}
	for _, w := range wc[:n] {
		if w.Status != verbs.WCSuccess || w.Opcode != verbs.WCRecv || w.ByteLen != 40+1000 || w.Flags&verbs.WCWithImm == 0 || w.ImmData != w.SrcQP {
			t.Errorf("message %+v: want a SEND with immediate of 1000 bytes, its sender's QPN", w)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var o, e syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"--socket", ds[1].Socket, "-m", group, "-C", "10"}, &o, &e) }()
	for !strings.Contains(o.String(), "receiving data transfers") && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	send = mckey(ctx, ds[0], "-m", group, "-s", "-C", "9")
	tooltest.CheckLines(t, "sender of 9", send, senderLines)
	if <-done; strings.Contains(o.String(), "data transfers complete") {
		t.Errorf("a receiver of 10 messages finished with 9 sent:\n%s", o.String())
	}
}

// TestMckeyFailures: mckey's output, return status and exit status where
// it fails: a message larger than the active MTU (verify_test_params;
// the nodes then leave a group they never joined, whose EADDRNOTAVAIL is
// the status), an IPv6 group and an unmapped GID (-M), which RoCEv2's
// rdma_cm does not join (the kernel's ENOTSUPP, errno 524), a -b that is
// not the device's, a group nobody answers for, a name that does not
// resolve.
func TestMckeyFailures(t *testing.T) {
	ds := servertest.TwoDaemons(t, 1500)
	a := ds[0].Host.Addr.String()
	start := []string{"mckey: starting server", "mckey: joining"}
	end := func(status string) []string { return []string{"test complete", "return status " + status} }
	lines := func(groups ...[]string) string {
		var l []string
		for _, g := range groups {
			l = append(l, g...)
		}
		return strings.Join(l, "\n") + "\n"
	}
	for _, tc := range []struct {
		args           []string
		stdout, stderr string
		exit           int
	}{
		{[]string{"-m", group, "-b", a, "-S", "2000"}, lines(start, []string{"mckey: message_size 2000 is larger than active mtu 1024"}, end("-1")),
			"mckey: failure leaving: Cannot assign requested address\n", 255},
		{[]string{"-m", "ff0e::1"}, lines(start, end("-1")),
			"mckey: failure joining: Unknown error 524\nmckey: failure leaving: Cannot assign requested address\n", 255},
		{[]string{"-M", "ff0e::1", "-b", a}, lines(start, end("-1")),
			"mckey: failure joining: Unknown error 524\nmckey: resolve addr failure: Unknown error 524\n", 255},
		{[]string{"-M", "::ffff:239.1.1.1", "-b", a}, lines(start, end("-1")),
			"mckey: failure joining: Unknown error 524\nmckey: resolve addr failure: Unknown error 524\n", 255},
		{[]string{"-m", "ff0e::1", "-b", a}, lines(start, end("-1")), "mckey: resolve addr failure: Invalid argument\n", 255},
		{[]string{"-m", group, "-b", "198.51.100.9"}, lines(start, end("-1")), "mckey: addr bind failure: Cannot assign requested address\n", 255},
		{[]string{"-m", "192.0.2.77", "-b", a}, lines(start, []string{"mckey: event: RDMA_CM_EVENT_ADDR_ERROR, error: -110"}, end("-1")),
			"mckey: failure leaving: Cannot assign requested address\n", 255},
		{[]string{"-b", a}, lines(start[:1], []string{"getaddrinfo failed (Name or service not known) - invalid hostname or IP address"}, end("-2")), "", 254},
	} {
		r := mckey(context.Background(), ds[0], tc.args...)
		if r.Stdout != tc.stdout || r.Stderr != tc.stderr || exitCode(r.Err) != tc.exit {
			t.Errorf("%q: exit %d, stdout:\n%sstderr:\n%swant exit %d, stdout:\n%sstderr:\n%s", tc.args, exitCode(r.Err), r.Stdout, r.Stderr,
				tc.exit, tc.stdout, tc.stderr)
		}
	}
}

// TestMckeyNoMessages: -C 0, or -S 0 (create_message), joins and leaves
// without the data transfer lines.
func TestMckeyNoMessages(t *testing.T) {
	ds := servertest.TwoDaemons(t, 1500)
	noData := []string{"initiating data transfers", "receiving data transfers", "data transfers complete"}
	for _, args := range [][]string{{"-C", "0"}, {"-S", "0"}, {"-s", "-S", "0"}} {
		want := receiverLines
		if args[0] == "-s" {
			want = senderLines
		}
		r := mckey(context.Background(), ds[0], append([]string{"-m", group}, args...)...)
		tooltest.CheckLines(t, strings.Join(args, " "), r, tooltest.Without(want, noData...))
	}
}

func TestMckeyUsage(t *testing.T) {
	tooltest.CheckUsage(t, run, "usage: vrnic-mckey", []tooltest.UsageCase{
		{Args: []string{"-c", "0"}, Msg: "-c: \"0\" is not a number from 1"},
		{Args: []string{"-S", "x"}, Msg: "-S:"},
		{Args: []string{"-p", "2"}, Msg: "vrnicd (RoCEv2 only) does not have"},
		{Args: []string{"-p", "0x106"}, Msg: "only the UDP port space"},
		{Args: []string{"-x"}, Msg: "invalid option -- 'x'"},
	})
	if cfg, err := parseArgs([]string{"-p", "0x111", "-m", group, "-b", "192.0.2.1", "-s", "-o", "-l"}); err != nil ||
		cfg.group != group || !cfg.sender || !cfg.sendOnly || cfg.loopback || cfg.unmapped {
		t.Fatalf("%+v %v", cfg, err)
	}
	// -M needs -b: mckey says so on stdout and exits 1.
	var o, e bytes.Buffer
	if err := run(context.Background(), []string{"-M", "ff0e::1"}, &o, &e); exitCode(err) != 1 ||
		o.String() != "unmapped multicast address requires binding to source address\n" {
		t.Fatalf("-M without -b: %v %q %q", err, o.String(), e.String())
	}
}

// TestMckeyInterrupted: a receiver whose messages do not come, stopped
// (SIGINT), leaves the group and fails: return status -1.
func TestMckeyInterrupted(t *testing.T) {
	ds := servertest.TwoDaemons(t, 1500)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	r := mckey(ctx, ds[0], "-m", group)
	want := tooltest.Without(receiverLines, "data transfers complete", "return status 0")
	if got := strings.Join(strings.Split(strings.TrimSuffix(r.Stdout, "\n"), "\n"), "\n"); got != strings.Join(append(want, "return status -1"), "\n") ||
		exitCode(r.Err) != 255 || r.Stderr != "" {
		t.Fatalf("exit %d, stdout:\n%sstderr:\n%s", exitCode(r.Err), r.Stdout, r.Stderr)
	}
}
