package main

import (
	"bytes"
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/verbsock/server/servertest"
)

// TestParseScopedLinkLocal: -a takes a link-local address with its zone,
// as rping's getaddrinfo does ("fe80::1%eth0"); the interop tests run
// rping over the IPv6 link-local GID that way.
func TestParseScopedLinkLocal(t *testing.T) {
	for _, a := range []string{"fe80::5054:ff:fe12:3456%eth0", "fe80::1%vd1vra", "fe80::1"} {
		cfg, err := parseArgs([]string{"-c", "-a", a})
		if err != nil || cfg.addr != netip.MustParseAddr(a) || !cfg.addr.IsLinkLocalUnicast() {
			t.Errorf("-a %s: addr %v, err %v", a, cfg.addr, err)
		}
	}
}

// TestRpingLinkLocalTwoDaemons: vrnic-rping between two daemons over the
// IPv6 link-local GID (0), the server bound to its fe80:: address and the
// client given it scoped, as a kernel rping is; the zone names the one
// port and is not otherwise used.
func TestRpingLinkLocalTwoDaemons(t *testing.T) {
	ds := servertest.TwoDaemons(t, 1500)
	ll := ds[1].Host.GIDs.GIDAt(0).Addr()
	if !ll.IsLinkLocalUnicast() {
		t.Fatalf("daemon 1 GID 0 %v is not link-local", ll)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	listening := make(chan struct{}, 1)
	onListen = func() { listening <- struct{}{} }
	defer func() { onListen = nil }()
	var srv result
	done := make(chan struct{})
	go func() {
		defer close(done)
		var o, e bytes.Buffer
		err := run(ctx, []string{"--socket", ds[1].Socket, "-s", "-a", ll.WithZone("eth0").String(), "-v"}, &o, &e)
		srv = result{Stdout: o.String(), Stderr: e.String(), Err: err}
		if err != nil {
			cancel()
		}
	}()
	var cli result
	select {
	case <-listening:
		var o, e bytes.Buffer
		err := run(ctx, []string{"--socket", ds[0].Socket, "-c", "-a", ll.WithZone("eth0").String(), "-C", "5", "-v", "-V"}, &o, &e)
		cli = result{Stdout: o.String(), Stderr: e.String(), Err: err}
	case <-ctx.Done():
	}
	<-done
	if cli.Err != nil || srv.Err != nil {
		t.Fatalf("client: %v\n%s%s\nserver: %v\n%s%s", cli.Err, cli.Stdout, cli.Stderr, srv.Err, srv.Stdout, srv.Stderr)
	}
	checkPing(t, cli, "ping data: ", 5, 64)
	checkPing(t, srv, "server ping data: ", 5, 64)
}
