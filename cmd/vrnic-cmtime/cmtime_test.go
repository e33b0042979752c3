package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/verbsock/server/servertest"
)

// cmtime's table row: "%-13s: %11.2f%11.2f%11.2f%11.2f".
var rowRE = regexp.MustCompile(`^(create qp|connect|disconnect|destroy) *: +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]{2}$`)

// TestCmtimeTwoDaemons: a vrnic-cmtime server and client between two
// daemons; the client connects and disconnects -c connections three times
// over against the same server, and prints cmtime's table each time.
func TestCmtimeTwoDaemons(t *testing.T) {
	ds := servertest.TwoDaemons(t, 1500)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	listening := make(chan struct{})
	onListen = func() { close(listening) }
	defer func() { onListen = nil }()
	var srvOut, srvErr bytes.Buffer
	done := make(chan error, 1)
	sctx, stop := context.WithCancel(ctx)
	go func() { done <- run(sctx, []string{"--socket", ds[1].Socket}, &srvOut, &srvErr) }()
	select {
	case <-listening:
	case err := <-done:
		t.Fatalf("server ended: %v\n%s", err, srvErr.String())
	}
	for round := range 3 {
		var o, e bytes.Buffer
		err := run(ctx, []string{"--socket", ds[0].Socket, "-s", ds[1].Host.Addr.String(), "-c", "100"}, &o, &e)
		if err != nil {
			t.Fatalf("round %d: %v\n%s%s\nserver:\n%s", round, err, o.String(), e.String(), srvOut.String())
		}
		lines := strings.Split(strings.TrimSuffix(o.String(), "\n"), "\n")
		want := []string{"creating qp", "connecting", "disconnecting", "destroying id",
			"step              total ms     max ms     min us  us / conn"}
		if len(lines) != len(want)+4 || strings.Join(lines[:len(want)], "\n") != strings.Join(want, "\n") {
			t.Fatalf("round %d output:\n%s", round, o.String())
		}
		for _, l := range lines[len(want):] {
			if !rowRE.MatchString(l) {
				t.Errorf("round %d: row %q is not cmtime's", round, l)
			}
		}
	}
	stop()
	if err := <-done; err != nil || srvOut.Len() != 0 {
		t.Errorf("server: %v\n%s%s", err, srvOut.String(), srvErr.String())
	}
}

// TestCmtimeRejected: every connection to a port nobody listens on fails
// with REJECTED 8, and the client says so and exits 1.
func TestCmtimeRejected(t *testing.T) {
	ds := servertest.TwoDaemons(t, 1500)
	var o, e bytes.Buffer
	err := run(context.Background(), []string{"--socket", ds[0].Socket, "-s", ds[1].Host.Addr.String(), "-c", "3", "-p", "9999"}, &o, &e)
	if err == nil || !strings.Contains(e.String(), "3 of 3 connections failed; the first: event: RDMA_CM_EVENT_REJECTED, error: 8") {
		t.Fatalf("err %v\n%s%s", err, o.String(), e.String())
	}
}

func TestCmtimeUsage(t *testing.T) {
	for _, args := range [][]string{{"-c", "0"}, {"-c", "1001"}, {"-r", "8"}, {"-p", "x"}, {"-s", "192.0.2.1", "-b", "192.0.2.2"}, {"-z"}} {
		var o, e bytes.Buffer
		if err := run(context.Background(), args, &o, &e); err == nil || !strings.HasPrefix(o.String(), "usage: vrnic-cmtime") {
			t.Errorf("%v: err %v, stdout %q, stderr %q", args, err, o.String(), e.String())
		}
	}
}
