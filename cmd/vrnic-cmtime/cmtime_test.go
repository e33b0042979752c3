package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/cmd/internal/tooltest"
	"github.com/vrnic/vrnicd/verbsock/server/servertest"
)

// cmtime is vrnic-cmtime as a server on daemon 1 and a client (-s) on
// daemon 0.
var cmtime = tooltest.CMTool{Run: run, OnListen: &onListen, ClientFlags: []string{"-s"}}

// cmtime's table row: "%-13s: %11.2f%11.2f%11.2f%11.2f".
var rowRE = regexp.MustCompile(`^(create qp|connect|disconnect|destroy) *: +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]{2}$`)

// TestCmtimeTwoDaemons: a vrnic-cmtime server and client between two
// daemons; the client connects and disconnects -c connections three times
// over against the same server, and prints cmtime's table each time.
func TestCmtimeTwoDaemons(t *testing.T) {
	ds := servertest.TwoDaemons(t, 1500)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := cmtime.Start(t, ctx, ds)
	for round := range 3 {
		r := cmtime.RunClient(ctx, ds, "-c", "100")
		if r.Err != nil {
			t.Fatalf("round %d: %v\n%s%s\nserver:\n%s", round, r.Err, r.Stdout, r.Stderr, srv.Stop().Stdout)
		}
		lines := strings.Split(strings.TrimSuffix(r.Stdout, "\n"), "\n")
		want := []string{"creating qp", "connecting", "disconnecting", "destroying id",
			"step              total ms     max ms     min us  us / conn"}
		if len(lines) != len(want)+4 || strings.Join(lines[:len(want)], "\n") != strings.Join(want, "\n") {
			t.Fatalf("round %d output:\n%s", round, r.Stdout)
		}
		for _, l := range lines[len(want):] {
			if !rowRE.MatchString(l) {
				t.Errorf("round %d: row %q is not cmtime's", round, l)
			}
		}
	}
	if r := srv.Stop(); r.Err != nil || r.Stdout != "" {
		t.Errorf("server: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
	}
}

// TestCmtimeRejected: every connection to a port nobody listens on fails
// with REJECTED 8, and the client says so and exits 1.
func TestCmtimeRejected(t *testing.T) {
	ds := servertest.TwoDaemons(t, 1500)
	r := cmtime.RunClient(context.Background(), ds, "-c", "3", "-p", "9999")
	if r.Err == nil || !strings.Contains(r.Stderr, "3 of 3 connections failed; the first: event: RDMA_CM_EVENT_REJECTED, error: 8") {
		t.Fatalf("err %v\n%s%s", r.Err, r.Stdout, r.Stderr)
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
