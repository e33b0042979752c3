package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/cmd/internal/tooltest"
	"github.com/vrnic/vrnicd/verbsock/server/servertest"
)

// daemon is a vrnicd device served on a Unix socket.
type daemon = servertest.Daemon

func twoDaemons(t *testing.T) [2]daemon { return servertest.TwoDaemons(t, 1500) }

// result is one tool run.
type result = tooltest.Result

// runPair runs a server with srvArgs on daemon 0 and a client with
// cliArgs on daemon 1 (the server's address appended), in-process.
func runPair(t *testing.T, ds [2]daemon, srvArgs, cliArgs []string) (srv, cli result) {
	t.Helper()
	// A failed client leaves the server running: TestPingpongPeerFails
	// watches it give up on its own.
	tool := tooltest.Tool{Run: run, OnListen: &onListen}
	return tool.RunPair(60*time.Second,
		append([]string{"--socket", ds[0].Socket, "-p", "0", "-g", fmt.Sprint(ds[0].Host.GIDIndex())}, srvArgs...),
		func(port string) []string {
			return append([]string{"--socket", ds[1].Socket, "-p", port, "-g", fmt.Sprint(ds[1].Host.GIDIndex())}, cliArgs...)
		})
}

func TestPingpongTwoDaemons(t *testing.T) {
	ds := twoDaemons(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"rc", []string{"-s", "2500", "-n", "20", "-c"}},
		{"rc events", []string{"-s", "64", "-n", "50", "-e"}},
		{"uc", []string{"--mode", "uc", "-s", "4096", "-n", "20", "-c"}},
		{"ud", []string{"--mode", "ud", "-s", "512", "-n", "20", "-c"}},
		{"srq", []string{"--mode", "srq", "-q", "4", "-n", "40", "-s", "1000"}},
		{"rc mtu 512", []string{"-m", "512", "-s", "10000", "-n", "10", "-c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, cli := runPair(t, ds, tc.args, tc.args)
			for who, r := range map[string]result{"server": srv, "client": cli} {
				if r.Err != nil {
					t.Fatalf("%s: %v\nstdout:\n%sstderr:\n%s", who, r.Err, r.Stdout, r.Stderr)
				}
				t.Logf("%s:\n%s", who, r.Stdout)
			}
			checkOutput(t, tc.args, srv.Stdout, cli.Stdout)
		})
	}
}

// checkOutput checks both sides printed rdma-core's lines: each side's
// local addresses are the other's remote ones, and the summary counts.
func checkOutput(t *testing.T, args []string, srv, cli string) {
	t.Helper()
	cfg, err := parseArgs(args)
	if err != nil {
		t.Fatal(err)
	}
	lines := func(out, prefix string) []string {
		var l []string
		for _, s := range strings.Split(out, "\n") {
			if strings.HasPrefix(s, prefix) {
				l = append(l, s[len(prefix):])
			}
		}
		return l
	}
	sep := ","
	if cfg.mode.name == "ud" {
		sep = ":"
	}
	norm := func(ls []string) string { return strings.ReplaceAll(strings.Join(ls, "|"), "PSN 0x", "") }
	for _, p := range [][2]string{{srv, cli}, {cli, srv}} {
		local := lines(p[0], "  local address:  ")
		remote := lines(p[1], "  remote address: ")
		for i := range local {
			if cfg.mode.name == "ud" {
				local[i] = strings.Replace(local[i], ": GID", ", GID", 1)
			}
		}
		if len(local) != cfg.numQP || norm(local) != norm(remote) {
			t.Errorf("local %q, peer's remote %q (sep %q)", local, remote, sep)
		}
		bytesLine := fmt.Sprintf("%d bytes in ", cfg.size*cfg.iters*2)
		itersLine := fmt.Sprintf("%d iters in ", cfg.iters)
		if !strings.Contains(p[0], "\n"+bytesLine) || !strings.Contains(p[0], "\n"+itersLine) {
			t.Errorf("no summary %q / %q in\n%s", bytesLine, itersLine, p[0])
		}
	}
}

func TestPingpongErrors(t *testing.T) {
	ds := twoDaemons(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runOne := func(args ...string) (string, error) {
		var o, e bytes.Buffer
		err := run(ctx, append([]string{"--socket", ds[0].Socket}, args...), &o, &e)
		return e.String(), err
	}
	if msg, err := runOne("-d", "mlx5_0", "-g", "1", "127.0.0.1"); err == nil || !strings.Contains(msg, "IB device mlx5_0 not found") {
		t.Errorf("-d mlx5_0: %v %q", err, msg)
	}
	if msg, err := runOne("-d", "vrnic0", "127.0.0.1"); err == nil || !strings.Contains(msg, "no GID index: RoCE needs one; pass -g") {
		t.Errorf("no -g: %v %q", err, msg)
	}
	if msg, err := runOne("-g", "77", "127.0.0.1"); err == nil || !strings.Contains(msg, "can't read sgid of index 77") {
		t.Errorf("-g 77: %v %q", err, msg)
	}
	if msg, err := runOne("--mode", "ud", "-g", "1", "-s", "2000", "127.0.0.1"); err == nil || !strings.Contains(msg, "Requested size larger than port MTU (1024)") {
		t.Errorf("ud -s 2000: %v %q", err, msg)
	}
	if msg, err := runOne("-g", "1", "-p", "1", "127.0.0.1"); err == nil || !strings.Contains(msg, "Couldn't connect to 127.0.0.1:1") {
		t.Errorf("nobody listening: %v %q", err, msg)
	}
}

// TestPingpongPeerFails: a path MTU the link cannot carry loses every
// packet: the client's RC send fails with retry exceeded and the server,
// whose receive never comes, gives up after the stall timeout rather
// than waiting forever.
func TestPingpongPeerFails(t *testing.T) {
	defer func(d time.Duration) { stallTimeout = d }(stallTimeout)
	stallTimeout = 2 * time.Second
	ds := twoDaemons(t)
	args := []string{"-m", "4096", "-s", "3000", "-n", "2"}
	start := time.Now()
	srv, cli := runPair(t, ds, args, args)
	if cli.Err == nil || !strings.Contains(cli.Err.Error(), "Failed status transport retry counter exceeded (12) for wr_id 2") {
		t.Errorf("client: %v", cli.Err)
	}
	if srv.Err == nil || !strings.Contains(srv.Err.Error(), "no completion for 2s after 0 sends and 0 receives") {
		t.Errorf("server: %v", srv.Err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("took %v", d)
	}
}
