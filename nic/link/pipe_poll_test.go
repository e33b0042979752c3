package link_test

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link"
	"golang.org/x/sys/unix"
)

func pipeFrame(n byte) []byte {
	f := make([]byte, 64)
	copy(f, []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x88, 0xb5})
	f[20] = n
	return f
}

// readable reports whether fd polls readable now.
func readable(t *testing.T, fd int) bool {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	if err != nil {
		t.Fatal(err)
	}
	return n == 1 && fds[0].Revents&unix.POLLIN != 0
}

// A pipe end polls as a socket does: its descriptor is readable while
// frames wait, TryRead never blocks, WaitReadable waits for a frame, a
// timeout or Wake, and a closed end says so.
func TestPipePoller(t *testing.T) {
	a, b := link.Pipe(1500)
	defer a.Close()
	fd, err := b.PollFD()
	if err != nil {
		t.Fatal(err)
	}
	bufs, sizes := [][]byte{make([]byte, 2048), make([]byte, 2048)}, make([]int, 2)
	if n, err := b.TryRead(bufs, sizes, 0); n != 0 || err != nil {
		t.Fatalf("TryRead of an empty pipe: %d, %v", n, err)
	}
	if readable(t, fd) {
		t.Fatal("an empty pipe polls readable")
	}
	if _, err := a.Write([][]byte{pipeFrame(1), pipeFrame(2), pipeFrame(3)}, 0); err != nil {
		t.Fatal(err)
	}
	if !readable(t, fd) {
		t.Fatal("frames wait but the pipe does not poll readable")
	}
	if n, _ := b.TryRead(bufs, sizes, 0); n != 2 || bufs[0][20] != 1 || bufs[1][20] != 2 {
		t.Fatalf("TryRead: %d frames", n)
	}
	if !readable(t, fd) {
		t.Fatal("a frame still waits but the pipe does not poll readable")
	}
	if n, _ := b.TryRead(bufs, sizes, 0); n != 1 || bufs[0][20] != 3 {
		t.Fatalf("TryRead of the last frame: %d", n)
	}
	if n, _ := b.TryRead(bufs, sizes, 0); n != 0 {
		t.Fatalf("TryRead after the last frame: %d", n)
	}
	if readable(t, fd) {
		t.Fatal("the pipe polls readable after it was read empty")
	}
	start := time.Now()
	if ok, err := b.WaitReadable(20 * time.Millisecond); ok || err != nil || time.Since(start) < 20*time.Millisecond {
		t.Fatalf("WaitReadable on an empty pipe: %v, %v after %v", ok, err, time.Since(start))
	}
	go func() { time.Sleep(10 * time.Millisecond); b.Wake() }()
	if ok, err := b.WaitReadable(5 * time.Second); ok || err != nil {
		t.Fatalf("WaitReadable ended by Wake: %v, %v", ok, err)
	}
	go func() { time.Sleep(10 * time.Millisecond); _, _ = a.Write([][]byte{pipeFrame(4)}, 0) }()
	if ok, err := b.WaitReadable(5 * time.Second); !ok || err != nil {
		t.Fatalf("WaitReadable for a frame: %v, %v", ok, err)
	}
	b.Close()
	if _, err := b.TryRead(bufs, sizes, 0); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("TryRead of a closed end: %v", err)
	}
	if _, err := b.WaitReadable(time.Second); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("WaitReadable of a closed end: %v", err)
	}
}

// No frame is left behind unsignalled: a reader that sleeps on the
// descriptor whenever TryRead finds nothing gets every frame a concurrent
// writer sends, and its sleeps end.
func TestPipePollerNoLostWakeup(t *testing.T) {
	a, b := link.Pipe(1500)
	defer a.Close()
	defer b.Close()
	const total = 20000
	go func() {
		for i := range total {
			if _, err := a.Write([][]byte{pipeFrame(byte(i))}, 0); err != nil {
				return
			}
		}
	}()
	fd, _ := b.PollFD()
	bufs, sizes := [][]byte{make([]byte, 2048), make([]byte, 2048), make([]byte, 2048)}, make([]int, 3)
	deadline := time.Now().Add(20 * time.Second)
	for got := 0; got < total; {
		n, err := b.TryRead(bufs, sizes, 0)
		if err != nil {
			t.Fatal(err)
		}
		got += n
		if n > 0 {
			continue
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if k, _ := unix.Poll(fds, 1000); k == 0 && got < total {
			t.Fatalf("slept 1 s on the descriptor with %d of %d frames read: a lost wake-up", got, total)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d frames in 20 s", got, total)
		}
	}
}
