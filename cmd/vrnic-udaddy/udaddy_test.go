package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/vrnic/vrnicd/cmd/internal/tooltest"
	"github.com/vrnic/vrnicd/verbsock/server/servertest"
)

// udaddy is vrnic-udaddy as a server on daemon 1 and a client (-s) on daemon
// 0; everything goes to stdout, as udaddy's printf does.
var udaddy = tooltest.CMTool{Run: run, OnListen: &onListen, Combined: true, Client: []string{"-s"}}

// udaddy's output on success (udaddy.c run_server, run_client, main).
var (
	serverLines = []string{"udaddy: starting server", "receiving data transfers", "sending replies",
		"data transfers complete", "test complete", "return status 0"}
	clientLines = []string{"udaddy: starting client", "udaddy: connecting", "initiating data transfers",
		"receiving data transfers", "data transfers complete", "test complete", "return status 0"}
	noData = []string{"initiating data transfers", "receiving data transfers", "sending replies", "data transfers complete"}
)

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
		{"no messages", 2, 0, 100, tooltest.Without(serverLines, noData...), tooltest.Without(clientLines, noData...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := servertest.TwoDaemons(t, 1500)
			args := []string{"-c", fmt.Sprint(tc.conns), "-C", fmt.Sprint(tc.count), "-S", fmt.Sprint(tc.size)}
			srv, cli := udaddy.RunPair(t, ds, args, args)
			tooltest.CheckLines(t, "server", srv, tc.srvWant)
			tooltest.CheckLines(t, "client", cli, tc.cliWant)
		})
	}
}

// TestUdaddyNoListener: a client of a port nobody listens on reports
// rdma_cm's UNREACHABLE with SIDR status 1 and returns it.
func TestUdaddyNoListener(t *testing.T) {
	ds := servertest.TwoDaemons(t, 1500)
	r := udaddy.RunClient(context.Background(), ds, "--port", "9999")
	if r.Err == nil || !strings.Contains(r.Stdout, "udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 1\n") ||
		!strings.HasSuffix(r.Stdout, "return status 1\n") {
		t.Fatalf("err %v, output %q", r.Err, r.Stdout)
	}
}

// TestUdaddyMessageTooBig: a message larger than the active MTU fails
// before any SIDR_REQ, as verify_test_params does.
func TestUdaddyMessageTooBig(t *testing.T) {
	ds := servertest.TwoDaemons(t, 1500)
	r := udaddy.RunClient(context.Background(), ds, "-S", "2000")
	if r.Err == nil || !strings.Contains(r.Stdout, "udaddy: message_size 2000 is larger than active mtu 1024\n") {
		t.Fatalf("err %v, output %q", r.Err, r.Stdout)
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
