package link

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestWaitSet: a member that becomes readable ends a Wait and is
// reported; a level-triggered member is reported until it is read, an
// edge-triggered one once per event; Wake ends a Wait (also one called
// before it) without reporting a member; a timeout ends it with nothing;
// a removed member is not reported.
func TestWaitSet(t *testing.T) {
	s, err := NewWaitSet()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pair := func() (int, int) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
		return fds[0], fds[1]
	}
	lvl, lvlPeer := pair()
	edge, edgePeer := pair()
	if err := s.Add(lvl, false); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(edge, true); err != nil {
		t.Fatal(err)
	}
	got := map[int]int{}
	note := func(fd int, _ uint32) { got[fd]++ }
	poll := func() map[int]int {
		clear(got)
		if _, err := s.Poll(note); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if n := poll(); len(n) != 0 {
		t.Fatalf("nothing sent, reported %v", n)
	}
	if _, err := unix.Write(lvlPeer, []byte{1}); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Write(edgePeer, []byte{1}); err != nil {
		t.Fatal(err)
	}
	if n := poll(); n[lvl] != 1 || n[edge] != 1 {
		t.Fatalf("both written: %v", n)
	}
	if n := poll(); n[lvl] != 1 || n[edge] != 0 {
		t.Fatalf("unread: level-triggered again, edge-triggered not: %v", n)
	}
	var b [8]byte
	_, _ = unix.Read(lvl, b[:])
	_, _ = unix.Read(edge, b[:])

	// Wait: a member written from another goroutine ends it.
	go func() {
		time.Sleep(20 * time.Millisecond)
		_, _ = unix.Write(lvlPeer, []byte{1})
	}()
	clear(got)
	if n, err := s.Wait(-1, note); err != nil || n != 1 || got[lvl] != 1 {
		t.Fatalf("Wait for a write: %d %v %v", n, err, got)
	}
	_, _ = unix.Read(lvl, b[:])

	// Wake, before and during a Wait.
	s.Wake()
	if n, err := s.Wait(-1, note); err != nil || n != 0 {
		t.Fatalf("Wait after Wake: %d %v", n, err)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		s.Wake()
	}()
	if n, err := s.Wait(-1, note); err != nil || n != 0 {
		t.Fatalf("Wait ended by Wake: %d %v", n, err)
	}

	// A timeout.
	if n, err := s.Wait(5*time.Millisecond, note); err != nil || n != 0 {
		t.Fatalf("Wait with a timeout: %d %v", n, err)
	}

	// Removed.
	if err := s.Remove(lvl); err != nil {
		t.Fatal(err)
	}
	_, _ = unix.Write(lvlPeer, []byte{1})
	if n := poll(); len(n) != 0 {
		t.Fatalf("removed member reported: %v", n)
	}
	// A peer that shut down is reported (level-triggered: until removed).
	if err := s.Add(lvl, false); err != nil {
		t.Fatal(err)
	}
	_, _ = unix.Read(lvl, b[:])
	_ = unix.Shutdown(lvlPeer, unix.SHUT_RDWR)
	if n := poll(); n[lvl] != 1 {
		t.Fatalf("shut-down peer not reported: %v", n)
	}
}
