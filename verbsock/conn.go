package verbsock

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Conn frames messages on a SOCK_SEQPACKET Unix socket: one frame per
// packet, descriptors in the same packet's SCM_RIGHTS. Read and Write may
// be called from different goroutines; Read from one goroutine at a time.
type Conn struct {
	uc   *net.UnixConn
	rbuf []byte
	oob  []byte
}

// NewConn wraps a connected unixpacket socket.
func NewConn(uc *net.UnixConn) *Conn {
	return &Conn{uc: uc, rbuf: make([]byte, MaxMessage+1), oob: make([]byte, unix.CmsgSpace(4*MaxFDs)+64)}
}

// UnixConn is the underlying socket.
func (c *Conn) UnixConn() *net.UnixConn { return c.uc }

// Close closes the socket.
func (c *Conn) Close() error { return c.uc.Close() }

// FrameError is a frame that arrived whole enough to answer (its header is
// readable) but broke a framing rule. Its descriptors have been closed.
type FrameError struct {
	Header Header
	Err    *Error
}

func (e *FrameError) Error() string { return e.Err.Error() }
func (e *FrameError) Unwrap() error { return e.Err }

// ErrShortFrame is a packet too short to hold a header: the peer does not
// speak the protocol, and there is nothing to answer.
var ErrShortFrame = errors.New("verbsock: frame shorter than a header")

// Read receives one frame. The payload is valid until the next Read. The
// caller owns the returned descriptors (close-on-exec). On error no
// descriptor is left open.
func (c *Conn) Read() (Header, []byte, []int, error) {
	n, oobn, flags, _, err := c.uc.ReadMsgUnix(c.rbuf, c.oob)
	if err != nil {
		return Header{}, nil, nil, err
	}
	fds, ferr := parseRights(c.oob[:oobn])
	fail := func(errno syscall.Errno, format string, args ...any) (Header, []byte, []int, error) {
		closeAll(fds)
		h, ok := ParseHeader(c.rbuf[:n])
		if !ok {
			return Header{}, nil, nil, ErrShortFrame
		}
		e := Errf(errno, format, args...)
		e.Op = h.Op
		return h, nil, nil, &FrameError{Header: h, Err: e}
	}
	if n == 0 && oobn == 0 && flags == 0 {
		return Header{}, nil, nil, errEOF
	}
	switch {
	case n < HeaderSize:
		closeAll(fds)
		return Header{}, nil, nil, ErrShortFrame
	case flags&unix.MSG_TRUNC != 0 || n > MaxMessage:
		return fail(syscall.EMSGSIZE, "frame longer than %d bytes", MaxMessage)
	case flags&unix.MSG_CTRUNC != 0:
		return fail(syscall.EBADF, "more than %d descriptors", MaxFDs)
	case ferr != nil:
		return fail(syscall.EBADF, "control message: %v", ferr)
	}
	h, _ := ParseHeader(c.rbuf[:n])
	if int(h.Length) != n-HeaderSize {
		return fail(syscall.EINVAL, "header length %d, frame carries %d payload bytes", h.Length, n-HeaderSize)
	}
	if len(fds) > MaxFDs {
		return fail(syscall.EBADF, "more than %d descriptors", MaxFDs)
	}
	return h, c.rbuf[HeaderSize:n], fds, nil
}

var errEOF = fmt.Errorf("verbsock: peer closed the connection: %w", net.ErrClosed)

// parseRights returns every descriptor in the control messages (even when
// it also reports an error, so the caller can close them).
func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	var bad error
	for i := range msgs {
		m := &msgs[i]
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_RIGHTS {
			bad = fmt.Errorf("unexpected control message %d/%d", m.Header.Level, m.Header.Type)
			continue
		}
		r, err := unix.ParseUnixRights(m)
		if err != nil {
			bad = err
			continue
		}
		fds = append(fds, r...)
	}
	return fds, bad
}

func closeAll(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// CloseFDs closes every descriptor in fds that is not -1.
func CloseFDs(fds []int) { closeAll(fds) }

// Write sends one frame: h (Length and NFDs are filled in), the payload
// and the descriptors, which stay the caller's. timeout > 0 bounds the wait
// for room in the socket buffer.
func (c *Conn) Write(h Header, payload []byte, fds []int, timeout time.Duration) error {
	if HeaderSize+len(payload) > MaxMessage || len(fds) > MaxFDs {
		return fmt.Errorf("verbsock: frame of %d bytes, %d fds is too large", HeaderSize+len(payload), len(fds))
	}
	h.Length = uint32(len(payload))
	h.NFDs = uint8(len(fds))
	buf := make([]byte, HeaderSize+len(payload))
	h.Put(buf)
	copy(buf[HeaderSize:], payload)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if timeout > 0 {
		_ = c.uc.SetWriteDeadline(time.Now().Add(timeout))
	}
	_, _, err := c.uc.WriteMsgUnix(buf, oob, nil)
	return err
}

// WriteRaw sends bytes and descriptors as one packet, unframed (tests of
// hostile input).
func (c *Conn) WriteRaw(b []byte, fds []int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	_, _, err := c.uc.WriteMsgUnix(b, oob, nil)
	return err
}

// Socketpair returns two connected unixpacket sockets.
func Socketpair() (*net.UnixConn, *net.UnixConn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("verbsock: socketpair: %w", err)
	}
	var out [2]*net.UnixConn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "verbsock")
		fc, err := net.FileConn(f)
		f.Close()
		if err != nil {
			unix.Close(fds[1-i])
			if out[0] != nil {
				out[0].Close()
			}
			return nil, nil, err
		}
		out[i] = fc.(*net.UnixConn)
	}
	return out[0], out[1], nil
}

// PeerCred is the peer's SO_PEERCRED.
func PeerCred(uc *net.UnixConn) (*unix.Ucred, error) {
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, cerr
}
