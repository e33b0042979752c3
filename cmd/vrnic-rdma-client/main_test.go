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

// TestRdmaClient: vrnic-rdma-client's command line against an rdma_server
// on the other daemon: "start", "end 0".
func TestRdmaClient(t *testing.T) {
	ds := servertest.TwoDaemons(t, 1500)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	listening := make(chan struct{})
	done := make(chan int, 1)
	var srvOut bytes.Buffer
	go func() {
		done <- cmtool.ExampleServer(ctx, netip.AddrPortFrom(netip.IPv4Unspecified(), 7000), ds[1].Socket, &srvOut, func() { close(listening) })
	}()
	select {
	case <-listening:
	case s := <-done:
		t.Fatalf("server ended (%d) before listening:\n%s", s, srvOut.String())
	}
	var o, e bytes.Buffer
	err := run(ctx, []string{"--socket", ds[0].Socket, "-s", ds[1].Host.Addr.String(), "-p", "7000"}, &o, &e)
	if s := <-done; err != nil || s != 0 || o.String() != "rdma_client: start\nrdma_client: end 0\n" {
		t.Fatalf("client: %v\n%s%s\nserver %d:\n%s", err, o.String(), e.String(), s, srvOut.String())
	}
	if err := run(ctx, []string{"-p", "x"}, &o, &e); err == nil {
		t.Error("-p x: no error")
	}
}
