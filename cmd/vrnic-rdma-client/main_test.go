package main

import (
	"bytes"
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/cmd/internal/tooltest"
	"github.com/vrnic/vrnicd/verbsock/server/servertest"
)

// rdmaClient is vrnic-rdma-client (-s) on daemon 0.
var rdmaClient = tooltest.CMTool{Run: run, ClientFlags: []string{"-s"}}

// TestRdmaClient: vrnic-rdma-client's command line against an rdma_server
// on the other daemon: "start", "end 0".
func TestRdmaClient(t *testing.T) {
	ds := servertest.TwoDaemons(t, 1500)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := tooltest.StartExampleServer(t, ctx, netip.AddrPortFrom(netip.IPv4Unspecified(), 7000), ds[1].Socket)
	r := rdmaClient.RunClient(ctx, ds, "-p", "7000")
	if sr := srv.Wait(); r.Err != nil || sr.Err != nil || r.Stdout != "rdma_client: start\nrdma_client: end 0\n" {
		t.Fatalf("client: %v\n%s%s\nserver %v:\n%s", r.Err, r.Stdout, r.Stderr, sr.Err, sr.Stdout)
	}
	var o, e bytes.Buffer
	if err := run(ctx, []string{"-p", "x"}, &o, &e); err == nil {
		t.Error("-p x: no error")
	}
}
