package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestSocketCreatedWithModeAndGroup(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "vrnicd", "vrnicd.sock") // directories created
	gid := os.Getegid()
	if os.Geteuid() == 0 {
		gid = 65534 // root may give it away: check the group is set, not just kept
	}
	s, stale, err := listenSocket(path, gid)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.ln.Close(); s.remove() }()
	if stale {
		t.Error("fresh path reported stale")
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o660 || int(st.Gid) != gid {
		t.Fatalf("socket %v gid %d, want socket 0660 gid %d", fi.Mode(), st.Gid, gid)
	}
	c, err := net.Dial("unixpacket", path)
	if err != nil {
		t.Fatalf("SOCK_SEQPACKET dial: %v", err)
	}
	c.Close()
	s.ln.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatal("closing the listener removed the file; shutdown removes it last")
	}
	s.remove()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Fatal("remove left the socket")
	}
}

func TestSocketInUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vrnicd.sock")
	liveSocket(t, path)
	_, _, err := listenSocket(path, -1)
	if err == nil || err.Error() != "socket "+path+" is in use by a running vrnicd" {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Lstat(path); err != nil {
		t.Fatal("the live daemon's socket was removed")
	}
}

func TestSocketInUseByOtherProgram(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vrnicd.sock")
	live, err := net.Listen("unix", path) // SOCK_STREAM: not a vrnicd
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if _, _, err = listenSocket(path, -1); err == nil || !strings.Contains(err.Error(), "in use by another program") {
		t.Fatalf("err = %v", err)
	}
}

// liveSocket listens on path as a running vrnicd does (SOCK_SEQPACKET)
// until the test ends.
func liveSocket(t *testing.T, path string) {
	t.Helper()
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
}

// staleSocket leaves a socket file nobody listens on, as a killed daemon
// does.
func staleSocket(t *testing.T, path string) {
	t.Helper()
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
}

func TestSocketStaleReplaced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vrnicd.sock")
	staleSocket(t, path)
	s, stale, err := listenSocket(path, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.ln.Close(); s.remove() }()
	if !stale {
		t.Error("stale socket not reported")
	}
	c, err := net.Dial("unixpacket", path)
	if err != nil {
		t.Fatalf("new socket does not answer: %v", err)
	}
	c.Close()
}

func TestSocketPathNotASocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vrnicd.sock")
	os.WriteFile(path, []byte("precious"), 0o644)
	if _, _, err := listenSocket(path, -1); err == nil || !strings.Contains(err.Error(), "exists and is not a socket") {
		t.Fatalf("err = %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "precious" {
		t.Fatal("a regular file at the socket path was touched")
	}
}

// A daemon that is slow to stop must not remove the socket of the daemon
// that replaced it.
func TestSocketRemoveOnlyOurs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vrnicd.sock")
	old, _, err := listenSocket(path, -1)
	if err != nil {
		t.Fatal(err)
	}
	old.ln.Close() // stopped accepting; its file is now stale
	newer, stale, err := listenSocket(path, -1)
	if err != nil || !stale {
		t.Fatalf("replacing: stale=%v err=%v", stale, err)
	}
	defer func() { newer.ln.Close(); newer.remove() }()
	old.remove()
	if c, err := net.Dial("unixpacket", path); err != nil {
		t.Fatalf("the old daemon removed the new one's socket: %v", err)
	} else {
		c.Close()
	}
}
