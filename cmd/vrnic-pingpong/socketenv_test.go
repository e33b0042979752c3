package main

import (
	"strings"
	"testing"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// Without --socket the socket is $VRNICD_SOCKET, else the default; the
// flag wins over both, and --help says so.
func TestSocketFromEnv(t *testing.T) {
	t.Setenv(verbs.SocketEnv, "")
	if p, err := parseArgs(nil); err != nil || p.socket != verbs.DefaultSocket {
		t.Fatalf("no env: %v %+v", err, p)
	}
	t.Setenv(verbs.SocketEnv, "/tmp/env.sock")
	if p, err := parseArgs(nil); err != nil || p.socket != "/tmp/env.sock" {
		t.Fatalf("env: %v %+v", err, p)
	}
	if p, err := parseArgs([]string{"--socket=/tmp/flag.sock"}); err != nil || p.socket != "/tmp/flag.sock" {
		t.Fatalf("flag: %v %+v", err, p)
	}
	var b strings.Builder
	usage(&b, modes["rc"])
	if !strings.Contains(b.String(), "$"+verbs.SocketEnv) {
		t.Error("--help does not name " + verbs.SocketEnv)
	}
}
