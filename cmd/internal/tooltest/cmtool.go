package tooltest

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/cmd/internal/cmtool"
	"github.com/vrnic/vrnicd/verbsock/server/servertest"
)

// CMTool is an rdma_cm tool of cmd/ (vrnic-rping, vrnic-ucmatose, ...) run
// as a server on daemon 1 of a servertest pair and as a client on daemon 0.
type CMTool struct {
	Run RunFunc
	// OnListen is the tool's hook that is told its server listens.
	OnListen *func()
	// Combined: the tool's stderr goes to Result.Stdout too, as
	// ucmatose's and udaddy's printf does; rping's stays apart.
	Combined bool
	// ServerFlags make the tool a server (rping's "-s").
	ServerFlags []string
	// ClientFlags make it a client; the server's address follows them
	// (rping's "-c", "-a"; ucmatose's "-s").
	ClientFlags []string
}

// RunPair runs the server with srvArgs and, once it listens, the client
// with cliArgs, within 60 seconds. A failing server ends the client's run
// too.
func (tl CMTool) RunPair(t testing.TB, ds [2]servertest.Daemon, srvArgs, cliArgs []string) (srv, cli Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, _, ok := start(ctx, funcHook(tl.OnListen), tl.serve(ds, srvArgs))
	if ok {
		cli = tl.RunClient(s.ctx, ds, cliArgs...)
	}
	return s.Wait(), cli
}

// Start runs the server with args in the background and returns once it
// listens; a server that ends before fails the test.
func (tl CMTool) Start(t testing.TB, ctx context.Context, ds [2]servertest.Daemon, args ...string) *Server {
	t.Helper()
	s, _, ok := start(ctx, funcHook(tl.OnListen), tl.serve(ds, args))
	return s.started(t, ok)
}

// serve is the server's run on daemon 1 with args, for start.
func (tl CMTool) serve(ds [2]servertest.Daemon, args []string) func(context.Context) Result {
	args = append(append([]string{"--socket", ds[1].Socket}, tl.ServerFlags...), args...)
	return func(ctx context.Context) Result { return capture(ctx, tl.Run, args, tl.Combined) }
}

// RunClient runs the client on daemon 0 with args, pointed at daemon 1.
func (tl CMTool) RunClient(ctx context.Context, ds [2]servertest.Daemon, args ...string) Result {
	a := append(append([]string{"--socket", ds[0].Socket}, tl.ClientFlags...), ds[1].Host.Addr.String())
	return capture(ctx, tl.Run, append(a, args...), tl.Combined)
}

// StartExampleServer starts cmtool.ExampleServer (rdma_server) on addr
// behind socket, as Start does; its run's Err is its nonzero status.
func StartExampleServer(t testing.TB, ctx context.Context, addr netip.AddrPort, socket string) *Server {
	t.Helper()
	return Start(t, ctx, func(ctx context.Context, listening func()) Result {
		var o bytes.Buffer
		var err error
		if s := cmtool.ExampleServer(ctx, addr, socket, &o, listening); s != 0 {
			err = fmt.Errorf("status %d", s)
		}
		return Result{Stdout: o.String(), Err: err}
	})
}

// Exchange is a case of ucmatose's and udaddy's tests: -c Conns, -C
// Count and -S Size on both sides, and the lines each side prints.
type Exchange struct {
	Name               string
	Conns, Count, Size int
	SrvWant, CliWant   []string
}

// CheckExchanges runs each case as a subtest, a server and a client
// between two new daemons.
func (tl CMTool) CheckExchanges(t *testing.T, cases []Exchange) {
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			ds := servertest.TwoDaemons(t, 1500)
			args := []string{"-c", fmt.Sprint(tc.Conns), "-C", fmt.Sprint(tc.Count), "-S", fmt.Sprint(tc.Size)}
			srv, cli := tl.RunPair(t, ds, args, args)
			CheckLines(t, "server", srv, tc.SrvWant)
			CheckLines(t, "client", cli, tc.CliWant)
		})
	}
}

// UsageCase is a command line a tool refuses, and what it says on stderr.
type UsageCase struct {
	Args []string
	Msg  string
}

// CheckUsage checks that run fails on each case's Args with Msg on stderr
// and usage on stdout ("": stdout is not looked at).
func CheckUsage(t *testing.T, run RunFunc, usage string, cases []UsageCase) {
	t.Helper()
	for _, tc := range cases {
		r := capture(context.Background(), run, tc.Args, false)
		if r.Err == nil || !strings.Contains(r.Stderr, tc.Msg) || !strings.Contains(r.Stdout, usage) {
			t.Errorf("%v: err %v, stderr %q, want %q", tc.Args, r.Err, r.Stderr, tc.Msg)
		}
	}
}

// Without is lines less every line of drop.
func Without(lines []string, drop ...string) []string {
	var out []string
	for _, l := range lines {
		keep := true
		for _, d := range drop {
			keep = keep && l != d
		}
		if keep {
			out = append(out, l)
		}
	}
	return out
}

// CheckLines checks that r succeeded with the output lines want; who
// names the run.
func CheckLines(t testing.TB, who string, r Result, want []string) {
	t.Helper()
	got := strings.Split(strings.TrimSuffix(r.Stdout, "\n"), "\n")
	if r.Err != nil || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s: err %v, output:\n%s\nwant:\n%s", who, r.Err, r.Stdout, strings.Join(want, "\n"))
	}
}
