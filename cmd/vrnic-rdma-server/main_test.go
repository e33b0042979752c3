package main

import (
	"bytes"
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/cmd/internal/cmtool"
	"github.com/vrnic/vrnicd/cmd/internal/tooltest"
	"github.com/vrnic/vrnicd/verbsock/server/servertest"
)

// rdmaServer is vrnic-rdma-server on daemon 1.
var rdmaServer = tooltest.CMTool{Run: run, OnListen: &onListen}

// TestRdmaServer: vrnic-rdma-server's command line with an rdma_client on
// the other daemon: "start", "end 0".
func TestRdmaServer(t *testing.T) {
	ds := servertest.TwoDaemons(t, 1500)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := rdmaServer.Start(t, ctx, ds, "-s", ds[1].Host.Addr.String())
	var cliOut bytes.Buffer
	s := cmtool.ExampleClient(ctx, netip.AddrPortFrom(ds[1].Host.Addr, cmtool.DefaultPort), ds[0].Socket, &cliOut)
	if r := srv.Wait(); r.Err != nil || s != 0 || r.Stdout != "rdma_server: start\nrdma_server: end 0\n" {
		t.Fatalf("server: %v\n%s%s\nclient %d:\n%s", r.Err, r.Stdout, r.Stderr, s, cliOut.String())
	}
	var o, e bytes.Buffer
	if err := run(ctx, []string{"extra"}, &o, &e); err == nil {
		t.Error("operand: no error")
	}
}
