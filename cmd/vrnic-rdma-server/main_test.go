package main

import (
	"bytes"
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/cmd/internal/cmtool"
	"github.com/vrnic/vrnicd/verbsock/server/servertest"
)

// TestRdmaServer: vrnic-rdma-server's command line with an rdma_client on
// the other daemon: "start", "end 0".
func TestRdmaServer(t *testing.T) {
	ds := servertest.TwoDaemons(t, 1500)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	listening := make(chan struct{})
	onListen = func() { close(listening) }
	defer func() { onListen = nil }()
	done := make(chan error, 1)
	var o, e bytes.Buffer
	go func() { done <- run(ctx, []string{"--socket", ds[1].Socket, "-s", ds[1].Host.Addr.String()}, &o, &e) }()
	select {
	case <-listening:
	case err := <-done:
		t.Fatalf("server ended before listening: %v\n%s%s", err, o.String(), e.String())
	}
	var cliOut bytes.Buffer
	s := cmtool.ExampleClient(ctx, netip.AddrPortFrom(ds[1].Host.Addr, cmtool.DefaultPort), ds[0].Socket, &cliOut)
	if err := <-done; err != nil || s != 0 || o.String() != "rdma_server: start\nrdma_server: end 0\n" {
		t.Fatalf("server: %v\n%s%s\nclient %d:\n%s", err, o.String(), e.String(), s, cliOut.String())
	}
	if err := run(ctx, []string{"extra"}, &o, &e); err == nil {
		t.Error("operand: no error")
	}
}
