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

// A symlink planted at the socket path, before start or in the window
// between bind and the chmod/chown (whoever can write the directory can
// swap the file then), never gets its target's mode or group changed: the
// daemon refuses to start.
func TestSocketSymlinkPlanted(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o604); err != nil {
		t.Fatal(err)
	}
	var before syscall.Stat_t
	if err := syscall.Stat(victim, &before); err != nil {
		t.Fatal(err)
	}
	intact := func(what string) {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Stat(victim, &st); err != nil || st.Mode != before.Mode || st.Gid != before.Gid {
			t.Fatalf("%s: victim mode %#o gid %d, was %#o gid %d (%v)", what, st.Mode, st.Gid, before.Mode, before.Gid, err)
		}
	}
	gid := 65534
	path := filepath.Join(dir, "vrnicd.sock")
	if err := os.Symlink(victim, path); err != nil {
		t.Fatal(err)
	}
	if _, _, err := listenSocket(path, gid); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("symlink before start: %v", err)
	}
	intact("symlink before start")
	os.Remove(path)

	afterBind = func(p string) {
		if err := os.Remove(p); err != nil {
			t.Error(err)
		}
		if err := os.Symlink(victim, p); err != nil {
			t.Error(err)
		}
	}
	defer func() { afterBind = func(string) {} }()
	if _, _, err := listenSocket(path, gid); err == nil || !strings.Contains(err.Error(), "replaced after bind") {
		t.Fatalf("symlink swapped in after bind: %v", err)
	}
	intact("symlink after bind")
}
