package shm

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Wake-up channels (doorbells and completion events) are SOCK_SEQPACKET
// socketpairs, not eventfds. The daemon keeps one end and passes the other
// to the client, so the two never share an open file description, and
// every call the daemon makes on its end carries MSG_DONTWAIT, a flag of
// the call, not of the description: nothing the client does to either end
// (clearing O_NONBLOCK, filling the queue, not reading, closing) can make
// a daemon call block. An eventfd has no per-call non-blocking flag, and
// its O_NONBLOCK lives on a description both sides hold, which is how a
// client could pin daemon threads in read(2) and write(2).

// WakePair makes a wake-up channel: own is the end the caller keeps, peer
// the end it passes on.
func WakePair() (own, peer int, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("shm: wake-up socketpair: %w", err)
	}
	return fds[0], fds[1], nil
}

var wakeMsg = [1]byte{1}

// Wake sends one wake-up on fd without blocking. A full queue already
// holds a wake-up the reader has not taken, and a closed peer has nobody
// to wake: neither is an error.
func Wake(fd int) error {
	for {
		err := unix.Sendto(fd, wakeMsg[:], unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, nil)
		switch err {
		case nil, unix.EAGAIN, unix.EPIPE, unix.ECONNREFUSED, unix.ECONNRESET:
			return nil
		case unix.EINTR:
			continue
		}
		return err
	}
}

// maxDrain bounds one DrainWakes: a client that keeps its end full costs
// the daemon at most this many receives per wake-up it acts on.
const maxDrain = 64

// DrainWakes takes the wake-ups queued on fd without blocking and reports
// how many it took: one recvmmsg for up to maxDrain of them (a busy
// worker's doorbell costs one system call, not one per wake-up plus the
// one that finds the queue empty). closed is true once the peer end is
// gone (end of file: a message of no bytes, which recvmmsg repeats for
// the rest of the batch), after which fd never wakes again.
func DrainWakes(fd int) (n int, closed bool, err error) {
	var (
		bufs [maxDrain][8]byte
		iovs [maxDrain]unix.Iovec
		hdrs [maxDrain]unix.Mmsghdr
	)
	for i := range hdrs {
		iovs[i].Base = &bufs[i][0]
		iovs[i].SetLen(len(bufs[i]))
		hdrs[i].Hdr.Iov = &iovs[i]
		hdrs[i].Hdr.SetIovlen(1)
	}
	for {
		k, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&hdrs[0])), maxDrain,
			unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return 0, false, nil
		default:
			return 0, false, e
		}
		for i := range int(k) {
			if hdrs[i].Len == 0 {
				return n, true, nil
			}
			n++
		}
		return n, false, nil
	}
}
