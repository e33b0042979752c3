package cabi

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Debian's rdmacm-utils and perftest's rdma_cm mode, unmodified, on the
// drop-in librdmacm.so.1 (beside the drop-in libibverbs.so.1), both ends on
// vrnicd devices: the addresses are the devices' own (their GIDs), and
// rdma_cm does all the connecting, no TCP.

// deviceAddr is a device's IPv4 address: its IPv4-mapped GID.
func deviceAddr(t *testing.T, tl tool) string {
	t.Helper()
	out, err := tl.run(t, 10*time.Second, "ibv_devinfo", "-v")
	if err != nil {
		t.Fatalf("ibv_devinfo: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`::ffff:([0-9.]+), RoCE v2`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no IPv4 GID:\n%s", out)
	}
	return m[1]
}

var (
	rdmaSrvDone = []string{"rdma_server: start", "rdma_server: end 0"}
	rdmaCliDone = []string{"rdma_client: start", "rdma_client: end 0"}
	// cmatose.c's and udaddy.c's output on success (run_server,
	// run_client, main), as cmd/vrnic-ucmatose and cmd/vrnic-udaddy check
	// theirs.
	ucmatoseServer = []string{"cmatose: starting server", "initiating data transfers", "completing sends",
		"receiving data transfers", "data transfers complete", "cmatose: disconnecting", "disconnected",
		"test complete", "return status 0"}
	ucmatoseClient = []string{"cmatose: starting client", "cmatose: connecting", "receiving data transfers",
		"sending replies", "data transfers complete", "test complete", "return status 0"}
	udaddyServer = []string{"udaddy: starting server", "receiving data transfers", "sending replies",
		"data transfers complete", "test complete", "return status 0"}
	udaddyClient = []string{"udaddy: starting client", "udaddy: connecting", "initiating data transfers",
		"receiving data transfers", "data transfers complete", "test complete", "return status 0"}
)

// checkLines fails unless out holds want's lines in order (others may be
// between them).
func checkLines(t *testing.T, who, out string, want []string) {
	t.Helper()
	i := 0
	for _, l := range strings.Split(out, "\n") {
		if i < len(want) && strings.TrimSpace(l) == want[i] {
			i++
		}
	}
	if i < len(want) {
		t.Fatalf("%s: output lacks %q (in order: %q):\n%s", who, want[i], want, out)
	}
}

// checkRping checks rping -v's output: count lines prefix + "rdma-ping-N: "
// and then, to size-1 bytes in all, the letters 'A'..'z' from the N-th on,
// cycling (rping.c's rping_test_client; the server prints what it got as
// "server ping data: ...").
func checkRping(t *testing.T, who, out, prefix string, count, size int) {
	t.Helper()
	// stdout and stderr share the buffer: rping's block-buffered stdout
	// comes in 4 KiB pieces, and its one stderr line may fall between two.
	out = rpingStderr.ReplaceAllString(out, "")
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			lines = append(lines, l)
		}
	}
	if len(lines) != count {
		t.Fatalf("%s: %d %q lines, want %d:\n%.2000s", who, len(lines), prefix, count, out)
	}
	start := 'A'
	for ping := range count {
		b := []byte(fmt.Sprintf("rdma-ping-%d: ", ping))
		for c := start; len(b) < size-1; {
			b = append(b, byte(c))
			if c++; c > 'z' {
				c = 'A'
			}
		}
		if start++; start > 'z' {
			start = 'A'
		}
		if want := prefix + string(b[:size-1]); lines[ping] != want {
			// What follows the line in the output says who cut it.
			after := out[strings.Index(out, lines[ping])+len(lines[ping]):]
			t.Fatalf("%s: line %d (%d bytes, want %d):\n got %.90q\nwant %.90q\n got ...%q\nwant ...%q\nthen: %.1500q", who, ping, len(lines[ping]), len(want), lines[ping], want, lines[ping][max(0, len(lines[ping])-40):], want[len(want)-40:], after)
		}
	}
}

// rpingStderr is what rping writes to stderr on a clean run (rping.c:
// cma_event_handler's DISCONNECTED, and rping_test_server's wait for the
// next ping ending in state 10, DISCONNECTED, when the client is done).
var rpingStderr = regexp.MustCompile(`(server|client) DISCONNECT EVENT\.\.\.\n|wait for RDMA_READ_ADV state 10\n`)

// rpingBoth checks both rpings' -v output of count pings of size bytes.
func rpingBoth(count, size int) func(t *testing.T, srv, cli string) {
	return func(t *testing.T, srv, cli string) {
		checkRping(t, "rping client", cli, "ping data: ", count, size)
		checkRping(t, "rping server", srv, "server ping data: ", count, size)
	}
}

// linesBoth checks the server's and the client's lines (checkLines).
func linesBoth(srv, cli []string) func(t *testing.T, s, c string) {
	return func(t *testing.T, s, c string) {
		checkLines(t, "server", s, srv)
		checkLines(t, "client", c, cli)
	}
}

// perfCM checks a perftest -R run: both in rdma_cm mode, and the client's
// report (checkPerftest).
func perfCM(prog string, args ...string) func(t *testing.T, srv, cli string) {
	return func(t *testing.T, srv, cli string) {
		for who, out := range map[string]string{"server": srv, "client": cli} {
			if !strings.Contains(out, " rdma_cm QPs\t : ON\n Data ex. method : rdma_cm\n") {
				t.Fatalf("%s: not perftest's rdma_cm mode:\n%s", who, out)
			}
		}
		checkPerftest(t, prog, args, srv, cli)
	}
}

func TestRdmacmPrograms(t *testing.T) {
	needProgram(t, "rping", "rdmacm-utils")
	tl, ds := devices(t, 1500)
	ourRdmacm(t)
	srvAddr := deviceAddr(t, tl[0])
	rping := func(count, size int, flags ...string) ([]string, []string) {
		c, s := strconv.Itoa(count), strconv.Itoa(size)
		return append([]string{"rping", "-s", "-a", srvAddr, "-C", c, "-S", s}, flags...),
			append([]string{"rping", "-c", "-a", srvAddr, "-C", c, "-S", s}, flags...)
	}
	type tc struct {
		name     string
		srv, cli []string
		check    func(t *testing.T, srv, cli string)
	}
	var cases []tc
	for _, r := range []struct {
		count, size int
		validate    bool
	}{{20, 64, true}, {3, 26, false}, {50, 4096, true}, {5, 65535, true}} {
		flags := []string{"-v"}
		if r.validate {
			flags = append(flags, "-V")
		}
		srv, cli := rping(r.count, r.size, flags...)
		cases = append(cases, tc{fmt.Sprintf("rping %d×%d %s", r.count, r.size, strings.Join(flags, "")), srv, cli,
			rpingBoth(r.count, r.size)})
	}
	perf := func(prog string, args ...string) tc {
		return tc{prog + " -R " + strings.Join(args, " "), append([]string{prog, "-R"}, args...),
			append(append([]string{prog, "-R"}, args...), srvAddr), perfCM(prog, args...)}
	}
	cases = append(cases,
		tc{"ucmatose -c 4 -C 20 -S 4096", []string{"ucmatose", "-c", "4", "-C", "20", "-S", "4096"},
			[]string{"ucmatose", "-s", srvAddr, "-c", "4", "-C", "20", "-S", "4096"}, linesBoth(ucmatoseServer, ucmatoseClient)},
		tc{"ucmatose defaults", []string{"ucmatose"}, []string{"ucmatose", "-s", srvAddr}, linesBoth(ucmatoseServer, ucmatoseClient)},
		tc{"udaddy -c 2 -C 10", []string{"udaddy", "-c", "2", "-C", "10"}, []string{"udaddy", "-s", srvAddr, "-c", "2", "-C", "10"},
			linesBoth(udaddyServer, udaddyClient)},
		tc{"udaddy -c 4 -S 1024", []string{"udaddy", "-c", "4", "-C", "5", "-S", "1024"},
			[]string{"udaddy", "-s", srvAddr, "-c", "4", "-C", "5", "-S", "1024"}, linesBoth(udaddyServer, udaddyClient)},
		tc{"rdma_server/client", []string{"rdma_server"}, []string{"rdma_client", "-s", srvAddr}, linesBoth(rdmaSrvDone, rdmaCliDone)},
		perf("ib_send_bw", "-n", "500"),
		perf("ib_write_bw", "-q", "2", "-n", "500"),
		perf("ib_read_bw", "-n", "300"),
		perf("ib_atomic_bw", "-n", "300", "-s", "8"),
		perf("ib_send_lat", "-n", "300", "-s", "2"),
		perf("ib_write_lat", "-n", "300", "-s", "2"),
		perf("ib_read_lat", "-n", "300", "-s", "2"),
	)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A client of several connections that came before the
			// server listened would have some refused and others taken
			// (udaddy -c 4): the client starts once the server listens,
			// and the last case's listener is gone first.
			listeners := func() int { return len(ds[0].CM.Snapshot().Listeners) }
			for end := time.Now().Add(5 * time.Second); listeners() > 0; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(end) {
					t.Fatalf("the last case's listeners are still there: %+v", ds[0].CM.Snapshot().Listeners)
				}
			}
			srvOut, cliOut := runPairReady(t, tl[0], tl[1], 60*time.Second, tc.srv, func(port string) []string {
				return withPort(tc.cli, port)
			}, func() bool { return listeners() > 0 })
			tc.check(t, srvOut, cliOut)
			t.Logf("client:\n%s", lastLines(cliOut, 4))
		})
	}
}

// withPort gives a client its server's port the way each program takes it
// (rping and perftest: -p; the librdmacm examples: -p is the port space,
// their port is fixed, so their servers were not moved either).
func withPort(args []string, port string) []string {
	switch args[0] {
	case "rping", "ib_send_bw", "ib_write_bw", "ib_read_lat", "ib_write_lat", "ib_send_lat", "ib_read_bw", "ib_atomic_bw":
		return append(append([]string{args[0]}, "-p", port), args[1:]...)
	}
	return args
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
