package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link/linktest"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// plantVictim makes a file a planted link will point at, and a check that
// it kept its contents and mode.
func plantVictim(t *testing.T, dir string) (string, func(what string)) {
	t.Helper()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	return victim, func(what string) {
		t.Helper()
		b, err := os.ReadFile(victim)
		fi, _ := os.Stat(victim)
		if err != nil || string(b) != "precious" || fi.Mode().Perm() != 0o644 {
			t.Fatalf("%s: victim %q mode %v (%v)", what, b, fi.Mode(), err)
		}
	}
}

// The daemon refuses to start on a capture path that is a planted
// symlink, before it makes anything (one error line), and the link's
// target is untouched.
func TestDaemonPcapSymlinkAtStart(t *testing.T) {
	dir := t.TempDir()
	victim, intact := plantVictim(t, dir)
	pcap := filepath.Join(dir, "roce.pcap")
	if err := os.Symlink(victim, pcap); err != nil {
		t.Fatal(err)
	}
	code, stderr := runFail(t, nil, "--iface", "tap:"+linktest.UniqueName("vs"), "--socket",
		filepath.Join(dir, "vrnicd.sock"), "--pcap", pcap)
	if code == 0 {
		t.Fatal("vrnicd started with a symlink as its capture")
	}
	oneLine(t, stderr, "pcap "+pcap, "too many levels of symbolic links")
	intact("start")
}

// A symlink planted where the capture was, after logrotate moved it away
// and before the SIGHUP that reopens it, is refused: the reload logs it,
// the old capture goes on, the target is untouched, and the daemon serves.
func TestDaemonPcapSymlinkAtReload(t *testing.T) {
	linktest.RequireRoot(t)
	ns := linktest.NewNS(t, "vsy")
	dir := t.TempDir()
	victim, intact := plantVictim(t, dir)
	pcap := filepath.Join(dir, "roce.pcap")
	sock := filepath.Join(dir, "vrnicd.sock")
	d := startDaemon(t, ns, nil, "--iface", "tap:"+linktest.UniqueName("vs"), "--ip", "192.0.2.10/24",
		"--socket", sock, "--pcap", pcap)
	if fi, err := os.Stat(pcap); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("capture %v (%v), want mode 0600", fi.Mode(), err)
	}
	if err := os.Rename(pcap, pcap+".1"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, pcap); err != nil {
		t.Fatal(err)
	}
	from := d.log.Len()
	d.signal(syscall.SIGHUP)
	r, _ := d.log.waitRecord(t, from, "pcap not reopened; the old file stays in use", 5*time.Second)
	if !strings.Contains(recordString(r, "err"), "too many levels of symbolic links") {
		t.Fatalf("reload record %v", r)
	}
	intact("reload")
	d.counters() // still serving signals
	d.signal(syscall.SIGTERM)
	if code, ok := d.wait(10 * time.Second); !ok || code != 0 {
		t.Fatalf("exit %d (exited %v)", code, ok)
	}
	intact("shutdown")
}

// A symlink planted at the socket path stops the daemon at start (one
// error line), and its target keeps its contents and mode.
func TestDaemonSocketSymlinkAtStart(t *testing.T) {
	dir := t.TempDir()
	victim, intact := plantVictim(t, dir)
	sock := filepath.Join(dir, "vrnicd.sock")
	if err := os.Symlink(victim, sock); err != nil {
		t.Fatal(err)
	}
	code, stderr := runFail(t, nil, "--iface", "tap:"+linktest.UniqueName("vs"), "--socket", sock)
	if code == 0 {
		t.Fatal("vrnicd started with a symlink at its socket path")
	}
	oneLine(t, stderr, "socket "+sock, "is not a socket")
	intact("start")
}

// The client limits of the config file reach the server: with
// max_connections_per_user = 1 a second connection of the same user gets
// EUSERS. They are fixed for the daemon's life: a reload that changes one
// says it takes effect at restart.
func TestDaemonClientLimitsFromConfig(t *testing.T) {
	linktest.RequireRoot(t)
	ns := linktest.NewNS(t, "vcl")
	dir := t.TempDir()
	sock := filepath.Join(dir, "vrnicd.sock")
	cfg := filepath.Join(dir, "vrnicd.toml")
	tap := linktest.UniqueName("vc")
	write := func(perUser int) {
		body := fmt.Sprintf("iface = \"tap:%s\"\nip = [\"192.0.2.10/24\"]\nmax_connections_per_user = %d\n"+
			"user_limits = { max_pd = 2 }\n", tap, perUser)
		if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(1)
	d := startDaemon(t, ns, nil, "--config", cfg, "--socket", sock)
	c, err := verbs.Open(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := verbs.Open(sock); !errors.Is(err, syscall.EUSERS) {
		t.Fatalf("second connection of the user: %v, want EUSERS", err)
	}
	for i := range 3 {
		if _, err := c.AllocPD(); (i < 2) != (err == nil) || i == 2 && !errors.Is(err, syscall.EDQUOT) {
			t.Fatalf("PD %d: %v (user_limits max_pd = 2)", i, err)
		}
	}
	write(4)
	from := d.log.Len()
	d.signal(syscall.SIGHUP)
	r, _ := d.log.waitRecord(t, from, "setting changed; it takes effect at restart", 5*time.Second)
	if r["key"] != "max_connections_per_user" {
		t.Fatalf("restart-only change logged as %v", r)
	}
	if _, err := verbs.Open(sock); !errors.Is(err, syscall.EUSERS) {
		t.Fatalf("after the reload: %v, want EUSERS still", err)
	}
}
