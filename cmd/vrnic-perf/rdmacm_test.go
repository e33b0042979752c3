package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
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
