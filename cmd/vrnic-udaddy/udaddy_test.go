package main

import (
	"context"
	"strings"
	"testing"

	"github.com/vrnic/vrnicd/cmd/internal/tooltest"
	"github.com/vrnic/vrnicd/verbsock/server/servertest"
)

// udaddy is vrnic-udaddy as a server on daemon 1 and a client (-s) on daemon
// 0; everything goes to stdout, as udaddy's printf does.
var udaddy = tooltest.CMTool{Run: run, OnListen: &onListen, Combined: true, ClientFlags: []string{"-s"}}

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
	udaddy.CheckExchanges(t, []tooltest.Exchange{
		{Name: "defaults", Conns: 1, Count: 10, Size: 100, SrvWant: serverLines, CliWant: clientLines},
		{Name: "4 peers 1024", Conns: 4, Count: 20, Size: 1024, SrvWant: serverLines, CliWant: clientLines},
		{Name: "no messages", Conns: 2, Count: 0, Size: 100, SrvWant: tooltest.Without(serverLines, noData...), CliWant: tooltest.Without(clientLines, noData...)},
	})
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
	tooltest.CheckUsage(t, run, "usage: vrnic-udaddy", []tooltest.UsageCase{
		{Args: []string{"-c", "0"}, Msg: "-c: \"0\" is not a number from 1"},
		{Args: []string{"-S", "x"}, Msg: "-S:"},
		{Args: []string{"--port", "70000"}, Msg: "invalid port"},
		{Args: []string{"-t", "1"}, Msg: "-t is not supported"},
		{Args: []string{"-P", "ipoib"}, Msg: "only the udp port space"},
		{Args: []string{"-p", "0x106"}, Msg: "only the UDP port space"},
		{Args: []string{"-f", "gid"}, Msg: "only ip and name"},
		{Args: []string{"-x"}, Msg: "invalid option -- 'x'"},
	})
	if cfg, err := parseArgs([]string{"-p", "0x111", "-P", "udp", "-b", "192.0.2.1"}); err != nil || cfg.port != 7174 || !cfg.src.IsValid() {
		t.Fatalf("%+v %v", cfg, err)
	}
}
