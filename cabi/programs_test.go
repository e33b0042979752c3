package cabi

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/verbsock/server/servertest"
)

// Debian's own RDMA programs, unmodified, each end on its own vrnicd
// device through the drop-in library. The devices are the daemon's
// (servertest: the verbsock server and the device vrnicd runs, joined by
// an in-memory link), so this runs without root; netns_test.go runs a
// subset against vrnicd processes on a real link.

// needProgram skips unless Debian's program is installed.
func needProgram(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not installed: apt-get install %s", name, pkg)
	}
	return p
}

// tool runs one program on a device: our library first, the device's socket
// named in VRNICD_SOCKET.
type tool struct {
	libDir string
	socket string
	ns     string // a network namespace to run in (ip netns exec), "" for here
}

// output collects a program's stdout and stderr; safe to read while the
// program runs.
type output struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

func (tl tool) command(ctx context.Context, argv ...string) (*exec.Cmd, *output) {
	if tl.ns != "" {
		argv = append([]string{"ip", "netns", "exec", tl.ns}, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = loadEnv(tl.libDir, "VRNICD_SOCKET="+tl.socket)
	buf := &output{}
	cmd.Stdout = buf
	cmd.Stderr = buf
	cmd.WaitDelay = time.Second
	return cmd, buf
}

// run runs argv to its end (at most d).
func (tl tool) run(t *testing.T, d time.Duration, argv ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd, buf := tl.command(ctx, argv...)
	err := cmd.Run()
	return buf.String(), err
}

// freePort is a TCP port nobody listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// connectFailed says a client found no server listening yet.
// (rdma_cm clients: REJ reason 8, nobody listens on the service yet; over
// SIDR, udaddy: UNREACHABLE with SIDR status 1; perftest -R says the
// REJECTED event's number, 8.)
var connectFailed = regexp.MustCompile(`(?i)couldn't connect|unable to open file descriptor|connection refused|REJECTED, error:? 8|rejected.*8|UNREACHABLE, error: 1|Unexpected CM event bl blka 8`)

// runPair runs a server (srv on device 0) and a client (cli on device 1,
// given the port) the way users run them: the client starts once the
// server listens, retried while it finds no listener.
func runPair(t *testing.T, s, c tool, d time.Duration, srv []string, cli func(port string) []string) (srvOut, cliOut string) {
	t.Helper()
	return runPairReady(t, s, c, d, srv, cli, nil)
}

// runPairReady is runPair whose client starts once ready (when not nil)
// says the server is listening: a client of several connections that
// comes early may have some refused and others taken, and the server then
// waits for ever for the ones it took.
//
// A perftest -R server is used up by a client that failed after its first
// connection (Debian's perftest 4.5-0.17 connects its test QPs right after
// the handshake on that first one, a REJ 8 when they come before the
// server's second rdma_listen, and its own retry reuses the destroyed
// ids): such a server is started again before the client is.
func runPairReady(t *testing.T, s, c tool, d time.Duration, srv []string, cli func(port string) []string, ready func() bool) (srvOut, cliOut string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var (
		port string
		sbuf *output
		done chan error
		stop context.CancelFunc
	)
	startServer := func() {
		port = freePort(t)
		sctx, scancel := context.WithCancel(ctx)
		sc, buf := s.command(sctx, srvArgs(srv, port)...)
		if err := sc.Start(); err != nil {
			scancel()
			t.Fatal(err)
		}
		ch := make(chan error, 1)
		go func() { ch <- sc.Wait() }()
		sbuf, done, stop = buf, ch, scancel
		for ready != nil && !ready() {
			select {
			case err := <-done:
				t.Fatalf("server exited before it listened: %v\n%s", err, sbuf)
			case <-ctx.Done():
				t.Fatalf("server did not listen in %v:\n%s", d, sbuf)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	startServer()
	defer func() { stop() }()
	var cerr error
	for range 100 {
		cliOut, cerr = c.run(t, d, cli(port)...)
		if cerr == nil || !connectFailed.MatchString(cliOut) {
			break
		}
		if serverUsedUp(srv) {
			t.Logf("client refused; starting its server again:\n%s", lastLines(cliOut, 3))
			stop()
			<-done
			startServer()
			time.Sleep(100 * time.Millisecond) // as a refused client waits below
			continue
		}
		select {
		case err := <-done:
			t.Fatalf("server exited before a client came: %v\n%s", err, sbuf)
		case <-time.After(100 * time.Millisecond):
		}
	}
	var serr error
	select {
	case serr = <-done:
	case <-time.After(d):
		stop()
		serr = <-done
	}
	srvOut = sbuf.String()
	checkSanLogs(t)
	if cerr != nil || serr != nil {
		t.Fatalf("client: %v\n%s\nserver: %v\n%s", cerr, cliOut, serr, srvOut)
	}
	return srvOut, cliOut
}

// serverUsedUp says whether srv is a perftest -R server, which a refused
// client may have left waiting for connections that never come.
func serverUsedUp(srv []string) bool {
	return strings.HasPrefix(filepath.Base(srv[0]), "ib_") && slices.Contains(srv, "-R")
}

// srvArgs gives the server its port (-p in the pingpongs, rping, perftest
// and our tools, which all take options after their operands); the
// librdmacm examples have fixed ports (their -p is a port space), and so
// have their vrnic- counterparts that keep that (vrnic-udaddy's -p too).
func srvArgs(args []string, port string) []string {
	switch filepath.Base(args[0]) {
	case "ucmatose", "udaddy", "rdma_server", "cmtime", "vrnic-udaddy", "vrnic-ucmatose", "vrnic-cmtime":
		return args
	case "fi_pingpong": // -p is its provider; -B its control port
		return append(append([]string(nil), args...), "-B", port)
	}
	return append(append([]string(nil), args...), "-p", port)
}

// devices starts two in-process daemons and returns a tool for each.
func devices(t *testing.T, mtu int) ([2]tool, [2]servertest.Daemon) {
	t.Helper()
	lib := filepath.Dir(ourLib(t))
	ds := servertest.TwoDaemons(t, mtu)
	return [2]tool{{lib, ds[0].Socket, ""}, {lib, ds[1].Socket, ""}}, ds
}

func gidIndex(d servertest.Daemon) string { return fmt.Sprint(d.Host.GIDIndex()) }

// pingpongLines are what rdma-core's pingpong examples print on success.
var (
	ppLocal  = regexp.MustCompile(`local address:\s+LID 0x[0-9a-f]+, QPN (0x[0-9a-f]+), PSN (0x[0-9a-f]+)`)
	ppRemote = regexp.MustCompile(`remote address:\s+LID 0x[0-9a-f]+, QPN (0x[0-9a-f]+), PSN (0x[0-9a-f]+)`)
	ppIters  = regexp.MustCompile(`(\d+) iters in [0-9.]+ seconds`)
)

// checkPingpong checks both sides finished n iterations with each other's
// QPs (the client's local QPN and PSN are the server's remote ones).
func checkPingpong(t *testing.T, srv, cli string, n int) {
	t.Helper()
	for who, out := range map[string]string{"server": srv, "client": cli} {
		m := ppIters.FindStringSubmatch(out)
		if m == nil || m[1] != strconv.Itoa(n) {
			t.Fatalf("%s did not report %d iterations:\n%s", who, n, out)
		}
	}
	sl, sr, cl, cr := ppLocal.FindAllStringSubmatch(srv, -1), ppRemote.FindAllStringSubmatch(srv, -1),
		ppLocal.FindAllStringSubmatch(cli, -1), ppRemote.FindAllStringSubmatch(cli, -1)
	if len(sl) == 0 || len(sl) != len(cr) || len(cl) != len(sr) {
		t.Fatalf("address lines do not pair:\nserver:\n%s\nclient:\n%s", srv, cli)
	}
	for i := range sl {
		if sl[i][1] != cr[i][1] || sl[i][2] != cr[i][2] || cl[i][1] != sr[i][1] || cl[i][2] != sr[i][2] {
			t.Fatalf("QP %d: server %v/%v, client %v/%v", i, sl[i][1:], sr[i][1:], cl[i][1:], cr[i][1:])
		}
	}
}

func TestPingpongPrograms(t *testing.T) {
	needProgram(t, "ibv_rc_pingpong", "ibverbs-utils")
	tl, ds := devices(t, 1500)
	for _, tc := range []struct {
		prog string
		args []string
		n    int
	}{
		{"ibv_rc_pingpong", []string{"-n", "200", "-s", "4096", "-c"}, 200},
		{"ibv_rc_pingpong", []string{"-n", "200", "-s", "10000", "-e", "-c"}, 200},
		{"ibv_rc_pingpong", []string{"-n", "50", "-s", "65536", "-m", "512", "-c"}, 50},
		{"ibv_uc_pingpong", []string{"-n", "200", "-s", "4096", "-c"}, 200},
		{"ibv_uc_pingpong", []string{"-n", "200", "-s", "1000", "-e"}, 200},
		{"ibv_ud_pingpong", []string{"-n", "200", "-s", "1000", "-c"}, 200},
		{"ibv_ud_pingpong", []string{"-n", "200", "-s", "512", "-e"}, 200},
		{"ibv_srq_pingpong", []string{"-n", "200", "-q", "4", "-s", "4096", "-c"}, 200},
		{"ibv_srq_pingpong", []string{"-n", "200", "-q", "8", "-s", "100", "-e"}, 200},
	} {
		t.Run(tc.prog+strings.Join(tc.args, ""), func(t *testing.T) {
			srv := append([]string{tc.prog, "-g", gidIndex(ds[0])}, tc.args...)
			srvOut, cliOut := runPair(t, tl[0], tl[1], 60*time.Second, srv, func(port string) []string {
				return append(append([]string{tc.prog, "-p", port, "-g", gidIndex(ds[1])}, tc.args...), "127.0.0.1")
			})
			checkPingpong(t, srvOut, cliOut, tc.n)
			t.Logf("client:\n%s", cliOut)
		})
	}
}

// perftest's result lines: bandwidth (#bytes #iterations BW peak BW
// average MsgRate) and latency (#bytes #iterations t_min t_max t_typical ...).
var (
	bwLine  = regexp.MustCompile(`(?m)^\s*(\d+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s*$`)
	latLine = regexp.MustCompile(`(?m)^\s*(\d+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)`)
)

// checkPerftest checks the client reported its size, a non-zero figure,
// and that the server did not report a failure.
func checkPerftest(t *testing.T, prog string, args []string, srv, cli string) {
	t.Helper()
	size := "65536"
	for i, a := range args {
		if a == "-s" && i+1 < len(args) {
			size = args[i+1]
		}
	}
	if strings.HasSuffix(prog, "_lat") {
		m := latLine.FindStringSubmatch(cli)
		if m == nil || m[1] != size {
			t.Fatalf("no latency line for %s bytes:\n%s", size, cli)
		}
		if v, _ := strconv.ParseFloat(m[5], 64); v <= 0 {
			t.Fatalf("t_typical %s:\n%s", m[5], cli)
		}
		return
	}
	m := bwLine.FindStringSubmatch(cli)
	if m == nil || m[1] != size {
		t.Fatalf("no bandwidth line for %s bytes:\n%s", size, cli)
	}
	if v, _ := strconv.ParseFloat(m[4], 64); v <= 0 {
		t.Fatalf("BW average %s:\n%s", m[4], cli)
	}
	for _, out := range []string{srv, cli} {
		if strings.Contains(out, "Completion with error") || strings.Contains(out, "Failed") {
			t.Fatalf("an error was reported:\nserver:\n%s\nclient:\n%s", srv, cli)
		}
	}
}

// The perftest programs under the drop-in library, with the options users
// reach for: the default (ibv_wr_*) post API and the old one, events,
// bidirectional, several QPs, sizes up to 8 MiB.
func TestPerftestPrograms(t *testing.T) {
	needProgram(t, "ib_write_bw", "perftest")
	tl, ds := devices(t, 4200)
	for _, tc := range []struct {
		prog string
		args []string
	}{
		{"ib_write_bw", []string{"-s", "65536", "-n", "300"}},
		{"ib_write_bw", []string{"-s", "65536", "-n", "300", "--use_old_post_send"}},
		{"ib_write_bw", []string{"-s", "4096", "-n", "300", "-q", "4", "--report_gbits"}},
		{"ib_write_bw", []string{"-s", "65536", "-n", "200", "-b"}},
		{"ib_write_bw", []string{"-s", "8388608", "-n", "10"}},
		{"ib_read_bw", []string{"-s", "65536", "-n", "300"}},
		{"ib_read_bw", []string{"-s", "65536", "-n", "200", "-e"}},
		{"ib_send_bw", []string{"-s", "64", "-n", "2000"}},
		{"ib_send_bw", []string{"-s", "4096", "-n", "500", "-e"}},
		{"ib_send_bw", []string{"-s", "1024", "-n", "500", "--use_old_post_send", "-q", "2"}},
		{"ib_atomic_bw", []string{"-n", "500"}},
		{"ib_write_lat", []string{"-s", "8", "-n", "500"}},
		{"ib_write_lat", []string{"-s", "8", "-n", "500", "--use_old_post_send"}},
		{"ib_read_lat", []string{"-s", "8", "-n", "300"}},
		{"ib_send_lat", []string{"-s", "8", "-n", "500"}},
		{"ib_send_lat", []string{"-s", "4096", "-n", "200", "-e"}},
		{"ib_atomic_lat", []string{"-n", "300"}},
	} {
		t.Run(tc.prog+strings.Join(tc.args, ""), func(t *testing.T) {
			if tc.prog == "ib_atomic_bw" || tc.prog == "ib_atomic_lat" {
				tc.args = append(tc.args, "-s", "8")
			}
			srv := append([]string{tc.prog, "-x", gidIndex(ds[0])}, tc.args...)
			srvOut, cliOut := runPair(t, tl[0], tl[1], 90*time.Second, srv, func(port string) []string {
				return append(append([]string{tc.prog, "-p", port, "-x", gidIndex(ds[1])}, tc.args...), "127.0.0.1")
			})
			checkPerftest(t, tc.prog, tc.args, srvOut, cliOut)
			if m := bwLine.FindString(cliOut); m != "" {
				t.Logf("%s", m)
			} else {
				t.Logf("%s", latLine.FindString(cliOut))
			}
		})
	}
}
