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

// udaddy's output on success (udaddy.c run_server, run_client, main).
var (
	serverLines = []string{"udaddy: starting server", "receiving data transfers", "sending replies",
		"data transfers complete", "test complete", "return status 0"}
	clientLines = []string{"udaddy: starting client", "udaddy: connecting", "initiating data transfers",
		"receiving data transfers", "data transfers complete", "test complete", "return status 0"}
	noData = []string{"initiating data transfers", "receiving data transfers", "sending replies", "data transfers complete"}
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

// TestUdaddyTwoDaemons: vrnic-udaddy's server and client between two
// daemons: SIDR resolution of each peer, messages both ways; the output is
// udaddy's.
func TestUdaddyTwoDaemons(t *testing.T) {
	for _, tc := range []struct {
		name               string
		conns, count, size int
		srvWant, cliWant   []string
	}{
		{"defaults", 1, 10, 100, serverLines, clientLines},
		{"4 peers 1024", 4, 20, 1024, serverLines, clientLines},
		{"no messages", 2, 0, 100, without(serverLines, noData...), without(clientLines, noData...)},
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

// TestUdaddyNoListener: a client of a port nobody listens on reports
// rdma_cm's UNREACHABLE with SIDR status 1 and returns it.
func TestUdaddyNoListener(t *testing.T) {
	ds := servertest.TwoDaemons(t, 1500)
	var o bytes.Buffer
	err := run(context.Background(), []string{"--socket", ds[0].Socket, "-s", ds[1].Host.Addr.String(), "--port", "9999"}, &o, &o)
	if err == nil || !strings.Contains(o.String(), "udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 1\n") ||
		!strings.HasSuffix(o.String(), "return status 1\n") {
		t.Fatalf("err %v, output %q", err, o.String())
	}
}

// TestUdaddyMessageTooBig: a message larger than the active MTU fails
// before any SIDR_REQ, as verify_test_params does.
func TestUdaddyMessageTooBig(t *testing.T) {
	ds := servertest.TwoDaemons(t, 1500)
	var o bytes.Buffer
	err := run(context.Background(), []string{"--socket", ds[0].Socket, "-s", ds[1].Host.Addr.String(), "-S", "2000"}, &o, &o)
	if err == nil || !strings.Contains(o.String(), "udaddy: message_size 2000 is larger than active mtu 1024\n") {
		t.Fatalf("err %v, output %q", err, o.String())
	}
}

func TestUdaddyUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"-c", "0"}, "-c: \"0\" is not a number from 1"},
		{[]string{"-S", "x"}, "-S:"},
		{[]string{"--port", "70000"}, "invalid port"},
		{[]string{"-t", "1"}, "-t is not supported"},
		{[]string{"-P", "ipoib"}, "only the udp port space"},
		{[]string{"-p", "0x106"}, "only the UDP port space"},
		{[]string{"-f", "gid"}, "only ip and name"},
		{[]string{"-x"}, "invalid option -- 'x'"},
	} {
		var o, e bytes.Buffer
		if err := run(context.Background(), tc.args, &o, &e); err == nil || !strings.Contains(e.String(), tc.msg) ||
			!strings.Contains(o.String(), "usage: vrnic-udaddy") {
			t.Errorf("%v: err %v, stderr %q, want %q", tc.args, err, e.String(), tc.msg)
		}
	}
	if cfg, err := parseArgs([]string{"-p", "0x111", "-P", "udp", "-b", "192.0.2.1"}); err != nil || cfg.port != 7174 || !cfg.src.IsValid() {
		t.Fatalf("%+v %v", cfg, err)
	}
}
