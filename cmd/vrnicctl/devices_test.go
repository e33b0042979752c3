package main

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// deadSocket leaves a socket file in dir that nobody listens on, as a
// daemon killed with SIGKILL leaves its socket.
func deadSocket(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: p, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	return p
}

// devices lists the sockets of $VRNICD_SOCKET (a colon list) and of the
// directory, each once: a live daemon with its name, GUID and netdev, a
// socket nobody listens on and a path with no socket as not running.
func TestDevices(t *testing.T) {
	_, _, live := daemonHost(t)
	dir := t.TempDir()
	dead := deadSocket(t, dir, "old.sock")
	deadSocket(t, dir, "metrics.sock") // the metrics endpoint is no device
	if err := os.WriteFile(filepath.Join(dir, "notes.sock"), nil, 0o644); err != nil {
		t.Fatal(err) // a file, not a socket
	}
	missing := filepath.Join(dir, "gone", "vrnicd.sock")
	t.Setenv(verbs.SocketEnv, live+"::"+missing+":"+dead)

	var doc struct {
		Devices []devEntry `json:"devices"`
	}
	runJSON(t, &doc, "devices", "--json", "--dir", dir)
	want := []devEntry{
		{Name: "vrnic0", NodeGUID: "000000fffe000001", Netdev: "vrnic0", Mode: "tap", Socket: live, Running: true},
		{Socket: missing, Error: "no such file or directory"},
		{Socket: dead, Error: "connection refused"},
	}
	if len(doc.Devices) != len(want) {
		t.Fatalf("devices --json: %+v, want %+v", doc.Devices, want)
	}
	for i := range want {
		if doc.Devices[i] != want[i] {
			t.Errorf("device %d: %+v, want %+v", i, doc.Devices[i], want[i])
		}
	}

	rc, out, errOut := runCmd("devices", "--dir", dir)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if rc != 0 || len(lines) != 5 || strings.Join(strings.Fields(lines[0]), " ") != "device node GUID netdev socket" {
		t.Fatalf("devices: exit %d, stderr %q:\n%s", rc, errOut, out)
	}
	for i, re := range []string{
		`^    vrnic0 +\t000000fffe000001\tvrnic0 +\t` + regexp.QuoteMeta(live) + `$`,
		`^    - +\t- +\t- +\t` + regexp.QuoteMeta(missing) + ` \(not running: no such file or directory\)$`,
		`^    - +\t- +\t- +\t` + regexp.QuoteMeta(dead) + ` \(not running: connection refused\)$`,
	} {
		if !regexp.MustCompile(re).MatchString(lines[2+i]) {
			t.Errorf("line %q, want %s", lines[2+i], re)
		}
	}
}

// Without $VRNICD_SOCKET, the directory's sockets alone, sorted.
func TestDevicesDir(t *testing.T) {
	t.Setenv(verbs.SocketEnv, "")
	dir := t.TempDir()
	b, a := deadSocket(t, dir, "b.sock"), deadSocket(t, dir, "a.sock")
	if got := socketPaths("", dir); strings.Join(got, " ") != a+" "+b {
		t.Errorf("socketPaths: %q, want %q and %q", got, a, b)
	}
	if got := socketPaths("", filepath.Join(dir, "none")); len(got) != 0 {
		t.Errorf("socketPaths of a missing directory: %q", got)
	}
}

// A daemon that accepts no connection (stopped, wedged) is not running
// once the probe's time is up; devices does not hang on it.
func TestDevicesHungDaemon(t *testing.T) {
	defer func(d time.Duration) { probeTimeout = d }(probeTimeout)
	probeTimeout = 100 * time.Millisecond
	p := filepath.Join(t.TempDir(), "hung.sock")
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: p, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close() // listening, never accepting: connects land in the backlog
	if e := probe(p); e.Running || e.Error != "does not answer" {
		t.Errorf("probe of a daemon that never answers: %+v", e)
	}
}
