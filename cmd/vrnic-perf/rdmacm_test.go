package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// cmPort is the rdma_cm port of the tests' servers (each test has its
// own daemons, so no other listener can hold it).
const cmPort = 18515

// runPairCM runs "vrnic-perf TEST args" as the server on daemon 0 and,
// once it listens, as the client on daemon 1 pointed at daemon 0's
// address: with -R or -z they meet over rdma_cm, no TCP at all. A failing
// side ends the other's run.
func runPairCM(t *testing.T, ds [2]daemon, test string, args ...string) (srv, cli result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	listening := make(chan struct{}, 1)
	onListen = func(net.Addr) { listening <- struct{}{} }
	defer func() { onListen = nil }()
	port := fmt.Sprint(cmPort)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var o, e bytes.Buffer
		err := run(ctx, append([]string{test, "--socket", ds[0].Socket, "-p", port}, args...), &o, &e)
		srv = result{Stdout: o.String(), Stderr: e.String(), Err: err}
		if err != nil {
			cancel()
		}
	}()
	select {
	case <-listening:
		var o, e bytes.Buffer
		err := run(ctx, append(append([]string{test, "--socket", ds[1].Socket, "-p", port}, args...), ds[0].Host.Addr.String()), &o, &e)
		cli = result{Stdout: o.String(), Stderr: e.String(), Err: err}
		if err != nil {
			cancel()
		}
	case <-ctx.Done():
	}
	wg.Wait()
	return srv, cli
}

func TestRdmaCM(t *testing.T) {
	ds := twoDaemons(t)
	for _, tc := range []struct{ test, args string }{
		{"write_bw", "-R -s 4096 -n 200"},
		{"send_bw", "-R -s 1024 -n 200"},
		{"read_bw", "-R -s 4096 -n 100"},
		{"atomic_bw", "-R -n 100"},
		{"write_bw", "-R -q 3 -s 2048 -n 100"},
		{"send_bw", "-R -e -s 512 -n 100"},
		{"write_lat", "-R -s 8 -n 50"},
		{"send_lat", "-R -s 64 -n 50"},
		{"read_lat", "-R -n 50"},
		{"atomic_lat", "-R -n 50"},
		{"write_bw", "-z -s 4096 -n 200"},
		{"send_lat", "-z -n 50"},
	} {
		t.Run(tc.test+" "+tc.args, func(t *testing.T) {
			srv, cli := runPairCM(t, ds, tc.test, append([]string{"--quiet"}, strings.Fields(tc.args)...)...)
			for who, r := range map[string]result{"server": srv, "client": cli} {
				if r.Err != nil {
					t.Fatalf("%s: %v\n%s%s", who, r.Err, r.Stdout, r.Stderr)
				}
			}
			cmQPs := strings.Contains(tc.args, "-R")
			for who, r := range map[string]result{"server": srv, "client": cli} {
				out := r.Stdout
				if want := " rdma_cm QPs\t : " + onOff(cmQPs) + "\n Data ex. method : rdma_cm\n"; !strings.Contains(out, want) {
					t.Errorf("%s: no %q:\n%s", who, want, out)
				}
				waiting := strings.Contains(out, " Waiting for client rdma_cm QP to connect\n")
				if waiting != (cmQPs && who == "server") {
					t.Errorf("%s: the rdma_cm server's waiting lines %v:\n%s", who, waiting, out)
				}
				// The one-sided latency servers print no result row (perftest's neither).
				oneSidedLat := (tc.test == "read_lat" || tc.test == "atomic_lat") && who == "server"
				if reportRow(out) == oneSidedLat {
					t.Errorf("%s: result row %v:\n%s", who, !oneSidedLat, out)
				}
				// Every QP's address, printed as the rdma_cm channel's
				// parameters have it (a SEND's: no rkey).
				if n := strings.Count(out, " remote address: LID 0000 QPN "); n != qps(tc.args) || strings.Contains(out, "RKey") {
					t.Errorf("%s: %d remote addresses, want %d, and no RKey:\n%s", who, n, qps(tc.args), out)
				}
			}
		})
	}
}

// reportRow says whether out has a bandwidth or latency result row.
func reportRow(out string) bool {
	for _, l := range strings.Split(out, "\n") {
		if bwRE.MatchString(l) || latRE.MatchString(l) {
			return true
		}
	}
	return false
}

// qps is the -q of args, 1 without it.
func qps(args string) int {
	f := strings.Fields(args)
	for i, a := range f {
		if a == "-q" && i+1 < len(f) {
			var n int
			fmt.Sscan(f[i+1], &n)
			return n
		}
	}
	return 1
}

// perftest's server listens for the test's QPs only after the barrier, so
// the client's first REQ may be rejected (REJ 8): dialQP tries again,
// with the QP back in INIT, until the listener is there.
func TestDialQPRetries(t *testing.T) {
	ds := twoDaemons(t)
	open := func(d daemon) (*session, *verbs.QP) {
		p, err := parseArgs([]string{"write_bw", "-R", "--socket", d.Socket, "x"})
		if err != nil {
			t.Fatal(err)
		}
		dev, err := verbs.Open(d.Socket)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		pd, err := dev.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		cq, err := dev.CreateCQ(4, false)
		if err != nil {
			t.Fatal(err)
		}
		qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		s := &session{p: p, dev: dev}
		if err := s.qpInit(qp); err != nil {
			t.Fatal(err)
		}
		return s, qp
	}
	srv, sqp := open(ds[0])
	cli, cqp := open(ds[1])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const late = 350 * time.Millisecond
	accepted := make(chan error, 1)
	go func() {
		time.Sleep(late)
		l, err := srv.dev.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), cmPort))
		if err == nil {
			srv.listener = l
			var c *verbs.Conn
			if c, err = srv.acceptQP(ctx, sqp, srv.testConnParams()); err == nil {
				defer c.Close()
			}
		}
		accepted <- err
	}()
	start := time.Now()
	c, err := cli.dialQP(ctx, netip.AddrPortFrom(ds[0].Host.Addr, cmPort), cqp, cli.testConnParams())
	if err != nil {
		t.Fatalf("dialQP: %v (after %v)", err, time.Since(start))
	}
	defer c.Close()
	if took := time.Since(start); took < late {
		t.Fatalf("connected after %v, before the server listened (%v)", took, late)
	}
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	if cqp.State() != verbs.QPStateRTS {
		t.Fatalf("client QP in %v", cqp.State())
	}
}

// iterRE is skeleton's iteration count of a result row.
var iterRE = regexp.MustCompile(`, \d+ iterations>$`)

// The kernel's outputs of rdma_cm runs (testdata/README.md): vrnic-perf's
// read the same, line for line, but for what differs from run to run and
// the iteration count (these runs are shorter where that changes nothing
// printed: perftest caps the queue depths at the iterations).
func TestOutputMatchesPerftestRdmaCM(t *testing.T) {
	ds := twoDaemons(t)
	for _, tc := range []struct{ ref, test, args string }{
		{"send_bw_R", "send_bw", "-R -s 4096 -n 1000"},
		{"write_bw_R", "write_bw", "-R -s 4096 -n 1000"},
		{"read_bw_R", "read_bw", "-R -s 4096 -n 1000"},
		{"write_lat_R", "write_lat", "-R -s 64 -n 20"},
		{"write_bw_R_q2", "write_bw", "-R -q 2 -s 4096 -n 1000"},
		{"write_bw_z", "write_bw", "-z -s 4096 -n 1000"},
	} {
		t.Run(tc.ref, func(t *testing.T) {
			srv, cli := runPairCM(t, ds, tc.test, append([]string{"--quiet", "-x", fmt.Sprint(ds[0].Host.GIDIndex())}, strings.Fields(tc.args)...)...)
			checkGolden(t, tc.ref, tc.test, srv, cli, func(out string) []string {
				l := skeleton(out, true)
				for i := range l {
					l[i] = iterRE.ReplaceAllString(l[i], ", # iterations>")
				}
				return l
			})
		})
	}
}
