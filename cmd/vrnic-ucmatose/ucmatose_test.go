package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/verbsock/server/servertest"
)

type result struct {
	out string
	err error
}

// runPair runs a server on daemon 1 and, once it listens, a client on
// daemon 0 pointed at it.
func runPair(t *testing.T, ds [2]servertest.Daemon, srvArgs, cliArgs []string) (srv, cli result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	listening := make(chan struct{}, 1)
	onListen = func() { listening <- struct{}{} }
	defer func() { onListen = nil }()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var o bytes.Buffer
		err := run(ctx, append([]string{"--socket", ds[1].Socket}, srvArgs...), &o, &o)
		srv = result{o.String(), err}
		if err != nil {
			cancel()
		}
	}()
	select {
	case <-listening:
		var o bytes.Buffer
		err := run(ctx, append([]string{"--socket", ds[0].Socket, "-s", ds[1].Host.Addr.String()}, cliArgs...), &o, &o)
		cli = result{o.String(), err}
	case <-ctx.Done():
	}
	wg.Wait()
	return srv, cli
}

// cmatose's output on success (cmatose.c run_server, run_client, main).
var (
	serverLines = []string{"cmatose: starting server", "initiating data transfers", "completing sends",
		"receiving data transfers", "data transfers complete", "cmatose: disconnecting", "disconnected",
		"test complete", "return status 0"}
	clientLines = []string{"cmatose: starting client", "cmatose: connecting", "receiving data transfers",
		"sending replies", "data transfers complete", "test complete", "return status 0"}
)

func without(lines []string, drop ...string) []string {
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

func checkLines(t *testing.T, who string, r result, want []string) {
	t.Helper()
	got := strings.Split(strings.TrimSuffix(r.out, "\n"), "\n")
	if r.err != nil || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s: err %v, output:\n%s\nwant:\n%s", who, r.err, r.out, strings.Join(want, "\n"))
	}
}

// TestUcmatoseTwoDaemons: vrnic-ucmatose's server and client between two
// daemons: several connections, messages both ways, the server's
// disconnect; the output is cmatose's.
func TestUcmatoseTwoDaemons(t *testing.T) {
	noData := []string{"initiating data transfers", "completing sends", "receiving data transfers",
		"sending replies", "data transfers complete"}
	for _, tc := range []struct {
		name               string
		conns, count, size int
		srvWant, cliWant   []string
	}{
		{"defaults", 1, 10, 100, serverLines, clientLines},
		{"4 conns 4096", 4, 20, 4096, serverLines, clientLines},
		{"no messages", 3, 0, 100, without(serverLines, noData...), without(clientLines, noData...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := servertest.TwoDaemons(t, 1500)
			args := []string{"-c", fmt.Sprint(tc.conns), "-C", fmt.Sprint(tc.count), "-S", fmt.Sprint(tc.size)}
			srv, cli := runPair(t, ds, args, args)
			checkLines(t, "server", srv, tc.srvWant)
			checkLines(t, "client", cli, tc.cliWant)
		})
	}
}

// TestUcmatoseRejected: a client to a port nobody listens on reports
// rdma_cm's REJECTED with reason 8 and returns that status.
func TestUcmatoseRejected(t *testing.T) {
	ds := servertest.TwoDaemons(t, 1500)
	var o bytes.Buffer
	err := run(context.Background(), []string{"--socket", ds[0].Socket, "-s", ds[1].Host.Addr.String(), "-p", "9999"}, &o, &o)
	if err == nil || !strings.Contains(o.String(), "cmatose: event: RDMA_CM_EVENT_REJECTED, error: 8\n") ||
		!strings.HasSuffix(o.String(), "return status 8\n") {
		t.Fatalf("err %v, output %q", err, o.String())
	}
}

func TestUcmatoseUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"-c", "0"}, "-c: \"0\" is not a number from 1"},
		{[]string{"-S", "x"}, "-S:"},
		{[]string{"-p", "70000"}, "invalid port"},
		{[]string{"-m"}, "-m is not supported"},
		{[]string{"-P", "ib"}, "only the tcp port space"},
		{[]string{"-s", "192.0.2.1", "-b", "192.0.2.2"}, "-b: the client's source"},
		{[]string{"-x"}, "invalid option -- 'x'"},
	} {
		var o, e bytes.Buffer
		if err := run(context.Background(), tc.args, &o, &e); err == nil || !strings.Contains(e.String(), tc.msg) ||
			!strings.Contains(o.String(), "usage: vrnic-ucmatose") {
			t.Errorf("%v: err %v, stderr %q, want %q", tc.args, err, e.String(), tc.msg)
		}
	}
}
