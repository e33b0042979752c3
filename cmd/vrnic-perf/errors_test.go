package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// fakePeer accepts one connection on 127.0.0.1 and runs f on it.
func fakePeer(t *testing.T, f func(c net.Conn)) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer l.Close()
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		f(c)
	}()
	return l.Addr().(*net.TCPAddr).Port
}

func TestPeerErrors(t *testing.T) {
	ds := twoDaemons(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	version := func(v string) func(c net.Conn) {
		return func(c net.Conn) {
			io.ReadFull(c, make([]byte, 16))
			c.Write(append([]byte(v), make([]byte, 16-len(v))...))
		}
	}
	// versions, page and cache line sizes, MTU, as a perftest server.
	setup := func(c net.Conn) {
		version("6.06")(c)
		for _, m := range [][]byte{{0, 0, 16, 0}, {0, 0, 0, 64}, []byte("3\x00")} {
			io.ReadFull(c, make([]byte, len(m)))
			c.Write(m)
		}
	}
	for name, tc := range map[string]struct {
		peer func(c net.Conn)
		want string
	}{
		"old perftest": {version("5.33"), `the peer runs perftest version "5.33"; perftest only talks to 5.70 and later`},
		"closes early": {func(c net.Conn) { c.Read(make([]byte, 16)) }, "reading the peer's perftest version (16 bytes): the peer closed the connection"},
		"short":        {func(c net.Conn) { c.Read(make([]byte, 16)); c.Write([]byte("6.0")) }, "after 3 bytes (a short message)"},
		"garbage address": {func(c net.Conn) {
			setup(c)
			io.ReadFull(c, make([]byte, 108))
			c.Write(bytes.Repeat([]byte("z"), 107))
			c.Write([]byte{0})
		}, "the peer's perftest address: field 1 is not 4 hex digits"},
	} {
		t.Run(name, func(t *testing.T) {
			port := fakePeer(t, tc.peer)
			var o, e bytes.Buffer
			start := time.Now()
			err := run(ctx, []string{"write_bw", "--socket", ds[0].Socket, "-x", "1", "-n", "5", "-p", fmt.Sprint(port), "127.0.0.1"}, &o, &e)
			if err == nil || !strings.Contains(e.String(), tc.want) {
				t.Fatalf("got %v, stderr %q; want %q", err, e.String(), tc.want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
	var o, e bytes.Buffer
	if err := run(ctx, []string{"write_bw", "--socket", ds[0].Socket, "-d", "mlx5_0", "127.0.0.1"}, &o, &e); err == nil || !strings.Contains(e.String(), "IB device mlx5_0 not found") {
		t.Errorf("-d mlx5_0: %v %q", err, e.String())
	}
	if err := run(ctx, []string{"write_bw", "--socket", "/nonexistent.sock", "127.0.0.1"}, &o, &e); err == nil || !strings.Contains(e.String(), "Couldn't get context for vrnicd at /nonexistent.sock") {
		t.Errorf("no daemon: %v %q", err, e.String())
	}
	port := fakePeer(t, func(c net.Conn) { setup(c); c.Read(make([]byte, 1)) }) // the client fails on its GID
	if err := run(ctx, []string{"write_bw", "--socket", ds[0].Socket, "-x", "5", "-p", fmt.Sprint(port), "127.0.0.1"}, &o, &e); err == nil || !strings.Contains(e.String(), "GID index 5") {
		t.Errorf("-x 5: %v %q", err, e.String())
	}
}

// TestServerGoesAway: the client of a long run sees its RC QP fail when
// the server's process (here: its device connection) goes away, and
// stops with perftest's completion error instead of waiting.
func TestServerGoesAway(t *testing.T) {
	ds := twoDaemons(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	listening := make(chan net.Addr, 1)
	onListen = func(a net.Addr) { listening <- a }
	defer func() { onListen = nil }()
	sctx, stopServer := context.WithCancel(ctx)
	srvDone := make(chan error, 1)
	go func() {
		var o, e bytes.Buffer
		srvDone <- run(sctx, []string{"send_bw", "--socket", ds[0].Socket, "-x", "1", "-s", "1024", "-n", "100000000", "-p", "0"}, &o, &e)
	}()
	a := <-listening
	time.AfterFunc(500*time.Millisecond, stopServer)
	var o, e bytes.Buffer
	start := time.Now()
	err := run(ctx, []string{"send_bw", "--quiet", "--socket", ds[1].Socket, "-x", "1", "-s", "1024", "-n", "100000000",
		"-p", fmt.Sprint(a.(*net.TCPAddr).Port), "127.0.0.1"}, &o, &e)
	if err == nil || !strings.Contains(e.String(), "Completion with error at client") {
		t.Errorf("client: %v\n%s", err, e.String())
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %v", d)
	}
	if err := <-srvDone; err == nil {
		t.Error("server: no error after cancel")
	}
}
