package main

import (
	"context"
	"strings"
	"testing"

	"github.com/vrnic/vrnicd/cmd/internal/tooltest"
	"github.com/vrnic/vrnicd/verbsock/server/servertest"
)

// ucmatose is vrnic-ucmatose as a server on daemon 1 and a client (-s) on daemon
// 0; everything goes to stdout, as cmatose's printf does.
var ucmatose = tooltest.CMTool{Run: run, OnListen: &onListen, Combined: true, ClientFlags: []string{"-s"}}

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
	ucmatose.CheckExchanges(t, []tooltest.Exchange{
		{Name: "defaults", Conns: 1, Count: 10, Size: 100, SrvWant: serverLines, CliWant: clientLines},
		{Name: "4 conns 4096", Conns: 4, Count: 20, Size: 4096, SrvWant: serverLines, CliWant: clientLines},
		{Name: "no messages", Conns: 3, Count: 0, Size: 100, SrvWant: tooltest.Without(serverLines, noData...), CliWant: tooltest.Without(clientLines, noData...)},
	})
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
	tooltest.CheckUsage(t, run, "usage: vrnic-ucmatose", []tooltest.UsageCase{
		{Args: []string{"-c", "0"}, Msg: "-c: \"0\" is not a number from 1"},
		{Args: []string{"-S", "x"}, Msg: "-S:"},
		{Args: []string{"-p", "70000"}, Msg: "invalid port"},
		{Args: []string{"-m"}, Msg: "-m is not supported"},
		{Args: []string{"-P", "ib"}, Msg: "only the tcp port space"},
		{Args: []string{"-s", "192.0.2.1", "-b", "192.0.2.2"}, Msg: "-b: the client's source"},
		{Args: []string{"-x"}, Msg: "invalid option -- 'x'"},
	})
}
