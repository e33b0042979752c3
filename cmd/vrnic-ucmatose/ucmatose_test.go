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

// ucmatose is vrnic-ucmatose as a server on daemon 1 and a client (-s) on daemon
// 0; everything goes to stdout, as cmatose's printf does.
var ucmatose = tooltest.CMTool{Run: run, OnListen: &onListen, Combined: true, Client: []string{"-s"}}

// cmatose's output on success (cmatose.c run_server, run_client, main).
var (
	serverLines = []string{"cmatose: starting server", "initiating data transfers", "completing sends",
		"receiving data transfers", "data transfers complete", "cmatose: disconnecting", "disconnected",
		"test complete", "return status 0"}
	clientLines = []string{"cmatose: starting client", "cmatose: connecting", "receiving data transfers",
		"sending replies", "data transfers complete", "test complete", "return status 0"}
)

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
		{"no messages", 3, 0, 100, tooltest.Without(serverLines, noData...), tooltest.Without(clientLines, noData...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := servertest.TwoDaemons(t, 1500)
			args := []string{"-c", fmt.Sprint(tc.conns), "-C", fmt.Sprint(tc.count), "-S", fmt.Sprint(tc.size)}
			srv, cli := ucmatose.RunPair(t, ds, args, args)
			tooltest.CheckLines(t, "server", srv, tc.srvWant)
			tooltest.CheckLines(t, "client", cli, tc.cliWant)
		})
	}
}

// TestUcmatoseRejected: a client to a port nobody listens on reports
// rdma_cm's REJECTED with reason 8 and returns that status.
func TestUcmatoseRejected(t *testing.T) {
	ds := servertest.TwoDaemons(t, 1500)
	r := ucmatose.RunClient(context.Background(), ds, "-p", "9999")
	if r.Err == nil || !strings.Contains(r.Stdout, "cmatose: event: RDMA_CM_EVENT_REJECTED, error: 8\n") ||
		!strings.HasSuffix(r.Stdout, "return status 8\n") {
		t.Fatalf("err %v, output %q", r.Err, r.Stdout)
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
