package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/cmd/internal/tooltest"
	"github.com/vrnic/vrnicd/nic/link"
	"github.com/vrnic/vrnicd/transport/cm"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/server/servertest"
)

type result = tooltest.Result

// rping is vrnic-rping as a server (-s) on daemon 1 and a client (-c -a)
// on daemon 0; its stderr stays apart from its stdout.
var rping = tooltest.CMTool{Run: run, OnListen: &onListen, ServerFlags: []string{"-s"}, ClientFlags: []string{"-c", "-a"}}

// want is rping's output for count pings of size bytes: the client's
// "ping data: rdma-ping-N: " then size-1 bytes of the letters 'A'..'z'
// from the N-th on, cycling; the server prints the same after "server ".
func want(count, size int) []string {
	var lines []string
	start := 65
	for ping := range count {
		s := []byte(fmt.Sprintf("rdma-ping-%d: ", ping))
		c := start
		for len(s) < size-1 {
			s = append(s, byte(c))
			if c++; c > 122 {
				c = 65
			}
		}
		if start++; start > 122 {
			start = 65
		}
		lines = append(lines, string(s[:size-1]))
	}
	return lines
}

func checkPing(t *testing.T, r result, prefix string, count, size int) {
	t.Helper()
	got := strings.Split(strings.TrimSuffix(r.Stdout, "\n"), "\n")
	w := want(count, size)
	if len(got) != len(w) {
		t.Fatalf("%d lines of output, want %d:\n%s", len(got), len(w), r.Stdout)
	}
	for i := range w {
		if got[i] != prefix+w[i] {
			t.Errorf("line %d:\n got %q\nwant %q", i, got[i], prefix+w[i])
		}
	}
}

// TestRpingTwoDaemons: vrnic-rping's server and client between two
// daemons, output as rping's, with the CM MADs of the setup lost once.
func TestRpingTwoDaemons(t *testing.T) {
	for _, tc := range []struct {
		name        string
		count, size int
		lossy       bool
	}{
		{"64", 10, 64, false},
		{"4096 lossy", 5, 4096, true},
		{"min size", 3, 26, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := servertest.TwoDaemonsCM(t, 1500, verbsock.Limits{}, cm.Config{CMResponseTimeout: 14, PacketLifeTime: 10})
			if tc.lossy {
				ds[0].Host.Link.SetHook(dropFirst(mad.AttrConnectRequest, mad.AttrReadyToUse, mad.AttrDisconnectRequest))
				ds[1].Host.Link.SetHook(dropFirst(mad.AttrConnectReply))
			}
			args := []string{"-C", fmt.Sprint(tc.count), "-S", fmt.Sprint(tc.size), "-v", "-V"}
			srv, cli := rping.RunPair(t, ds, []string{"-v", "-S", fmt.Sprint(tc.size)}, args)
			if cli.Err != nil || srv.Err != nil {
				t.Fatalf("client: %v\n%s%s\nserver: %v\n%s%s", cli.Err, cli.Stdout, cli.Stderr, srv.Err, srv.Stdout, srv.Stderr)
			}
			checkPing(t, cli, "ping data: ", tc.count, tc.size)
			checkPing(t, srv, "server ping data: ", tc.count, tc.size)
			if !strings.Contains(srv.Stderr, "server DISCONNECT EVENT...") {
				t.Errorf("server stderr %q, want the DISCONNECT EVENT line", srv.Stderr)
			}
		})
	}
}

// dropFirst loses the first CM MAD of each attribute.
func dropFirst(attrs ...uint16) link.Hook {
	var mu sync.Mutex
	left := map[uint16]bool{}
	for _, a := range attrs {
		left[a] = true
	}
	return func(f []byte) link.Action {
		const off = 14 + 20 + 8 + 12 + 8
		if len(f) < off+mad.Size || f[12] != 0x08 || f[off+1] != mad.ClassCM {
			return link.Deliver
		}
		attr := uint16(f[off+16])<<8 | uint16(f[off+17])
		mu.Lock()
		defer mu.Unlock()
		if left[attr] {
			left[attr] = false
			return link.Drop
		}
		return link.Deliver
	}
}

// TestRpingRejected: a client to a port nobody listens on ends at once
// with rping's "cma event RDMA_CM_EVENT_REJECTED, error 8".
func TestRpingRejected(t *testing.T) {
	ds := servertest.TwoDaemons(t, 1500)
	r := rping.RunClient(context.Background(), ds, "-p", "9999")
	if r.Err == nil || !strings.Contains(r.Stderr, "cma event RDMA_CM_EVENT_REJECTED, error 8") {
		t.Fatalf("err %v, stderr %q", r.Err, r.Stderr)
	}
}

func TestRpingUsage(t *testing.T) {
	tooltest.CheckUsage(t, run, "", []tooltest.UsageCase{
		{Args: []string{"-c"}, Msg: "needs the server's address"},
		{Args: []string{"-a", "192.0.2.1"}, Msg: "one of -s"},
		{Args: []string{"-s", "-S", "10"}, Msg: "Invalid size 10 (valid range is 26 to 65536)"},
		{Args: []string{"-s", "-S", "65536"}, Msg: "Invalid size 65536"},
		{Args: []string{"-s", "-C", "-1"}, Msg: "Invalid count -1"},
		{Args: []string{"-s", "-x"}, Msg: "invalid option -- 'x'"},
	})
}

// TestRpingPersistent: a -P server takes one client after another and
// keeps running until it is stopped.
func TestRpingPersistent(t *testing.T) {
	ds := servertest.TwoDaemons(t, 1500)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := rping.Start(t, ctx, ds, "-P", "-v")
	for i := range 3 {
		cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
		r := rping.RunClient(cctx, ds, "-C", "2", "-v", "-V")
		ccancel()
		if r.Err != nil {
			t.Fatalf("client %d: %v\n%s%s", i, r.Err, r.Stdout, r.Stderr)
		}
		checkPing(t, r, "ping data: ", 2, 64)
	}
	select {
	case <-srv.Done():
		r := srv.Wait()
		t.Fatalf("persistent server ended after its clients: %v\n%s", r.Err, r.Stderr)
	default:
	}
	cancel()
	select {
	case <-srv.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("persistent server did not stop")
	}
	r := srv.Wait()
	if r.Err != nil {
		t.Errorf("persistent server stopped with %v", r.Err)
	}
	if n := strings.Count(r.Stdout, "server ping data: rdma-ping-"); n != 6 {
		t.Errorf("server printed %d pings, want 6:\n%s", n, r.Stdout)
	}
}
