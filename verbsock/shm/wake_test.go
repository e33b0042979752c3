package shm

import (
	"testing"

	"golang.org/x/sys/unix"
)

func wakePair(t *testing.T) (own, peer int) {
	t.Helper()
	own, peer, err := WakePair()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(own); unix.Close(peer) })
	return own, peer
}

func clearNonblock(t *testing.T, fd int) {
	t.Helper()
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
}

func TestWakeAndDrain(t *testing.T) {
	own, peer := wakePair(t)
	for range 3 {
		if err := Wake(peer); err != nil {
			t.Fatal(err)
		}
	}
	if n, closed, err := DrainWakes(own); n != 3 || closed || err != nil {
		t.Fatalf("drain: %d wake-ups, closed %v, %v; want 3", n, closed, err)
	}
	if n, closed, err := DrainWakes(own); n != 0 || closed || err != nil {
		t.Fatalf("second drain: %d, %v, %v; want nothing", n, closed, err)
	}
}

// The peer (a client) makes its end blocking and never reads: the owner's
// wake-ups and drains still return at once, since MSG_DONTWAIT is a flag
// of each call and the two ends are separate open file descriptions.
func TestWakeNeverBlocksWhateverThePeerDoes(t *testing.T) {
	own, peer := wakePair(t)
	clearNonblock(t, peer)
	clearNonblock(t, own)    // even the owner's own description, were it shared
	for i := range 1 << 16 { // far past the socket buffer
		if err := Wake(own); err != nil {
			t.Fatalf("wake %d: %v", i, err)
		}
	}
	if n, _, err := DrainWakes(own); n != 0 || err != nil {
		t.Fatalf("drain of an empty end: %d, %v", n, err)
	}
	if n, _, err := DrainWakes(peer); n != maxDrain || err != nil {
		t.Fatalf("a flooded end drains %d per call (%v), want the bound %d", n, err, maxDrain)
	}
}

// A closed peer is end of file for the drain and nobody to wake for Wake.
func TestWakePeerClosed(t *testing.T) {
	own, peer, err := WakePair()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(own)
	if err := Wake(peer); err != nil {
		t.Fatal(err)
	}
	unix.Close(peer)
	n, closed, err := DrainWakes(own)
	if err != nil || !closed {
		t.Fatalf("after the peer closed: %d, closed %v, %v; want end of file", n, closed, err)
	}
	if err := Wake(own); err != nil {
		t.Fatalf("wake towards a closed peer: %v", err)
	}
}
