package oob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"
)

// DefaultPort is the TCP port both rdma-core's ibv_*_pingpong and perftest
// listen on unless told otherwise (-p).
const DefaultPort = 18515

// DefaultTimeout bounds each message read or write of an exchange when
// Conn.Timeout is zero. The peers answer each other within milliseconds;
// the long waits (a peer running its whole test) have their own bound.
const DefaultTimeout = 30 * time.Second

// Conn is one side of an out-of-band exchange over a TCP connection. Every
// read and write has a deadline: the earlier of the context's deadline and
// the operation's timeout, and cancelling the context interrupts it.
//
// The kernel tools read each message with a single read(2) and fail if it
// returns short, so every message here goes out in a single write.
type Conn struct {
	nc net.Conn

	// Timeout bounds each message read or write; DefaultTimeout if zero.
	Timeout time.Duration
}

// NewConn wraps an established connection.
func NewConn(nc net.Conn) *Conn { return &Conn{nc: nc} }

// NetConn is the underlying connection.
func (c *Conn) NetConn() net.Conn { return c.nc }

// Close closes the connection.
func (c *Conn) Close() error { return c.nc.Close() }

func (c *Conn) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return DefaultTimeout
}

// Error is a failed read or write of one message of an exchange.
type Error struct {
	Op   string        // what was being sent or received, e.g. "reading the server's address"
	Size int           // the message size
	Done int           // bytes transferred before the failure
	Wait time.Duration // the bound that applied
	Err  error
}

func (e *Error) Error() string {
	what := fmt.Sprintf("oob: %s (%d bytes)", e.Op, e.Size)
	switch {
	case errors.Is(e.Err, io.EOF) || errors.Is(e.Err, io.ErrUnexpectedEOF):
		if e.Done == 0 {
			return what + ": the peer closed the connection"
		}
		return fmt.Sprintf("%s: the peer closed the connection after %d bytes (a short message)", what, e.Done)
	case errors.Is(e.Err, context.Canceled):
		return what + ": cancelled"
	case errors.Is(e.Err, context.DeadlineExceeded) || errors.Is(e.Err, os.ErrDeadlineExceeded):
		return fmt.Sprintf("%s: nothing from the peer within %v (got %d bytes)", what, e.Wait, e.Done)
	case errors.Is(e.Err, syscall.ECONNRESET) || errors.Is(e.Err, syscall.EPIPE):
		return what + ": the peer reset the connection"
	}
	return fmt.Sprintf("%s: %v", what, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// ProtocolError is a message that arrived whole but is not what the
// protocol allows at that point.
type ProtocolError struct {
	Op  string // e.g. "the server's address"
	Msg []byte // the message as received
	Why string
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("oob: %s: %s: got %s", e.Op, e.Why, quote(e.Msg))
}

// quote shows a message the way a reader can compare with the capture
// listings: printable bytes as is, the rest escaped, trailing NULs elided.
func quote(b []byte) string {
	n := len(b)
	for n > 0 && b[n-1] == 0 {
		n--
	}
	s := strconv.Quote(string(b[:n]))
	if pad := len(b) - n; pad > 0 {
		s += fmt.Sprintf(" + %d NUL", pad)
	}
	return s
}

// do runs f with the connection's deadline set from ctx and wait, and
// turns context cancellation into an interrupted read or write.
// It returns the bound that applied.
func (c *Conn) do(ctx context.Context, wait time.Duration, f func() (int, error)) (int, time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	now := time.Now()
	dl := now.Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
		wait = d.Sub(now).Round(time.Millisecond)
	}
	if err := c.nc.SetDeadline(dl); err != nil {
		return 0, wait, err
	}
	stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(time.Unix(1, 0)) })
	n, err := f()
	if !stop() && err != nil {
		// The context ended while we were blocked: say so rather than
		// report the deadline we forced.
		err = ctx.Err()
	} else if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		if d, ok := ctx.Deadline(); ok && !d.After(dl) {
			err = context.DeadlineExceeded
		}
	}
	return n, wait, err
}

// write sends b in one write.
func (c *Conn) write(ctx context.Context, b []byte, op string) error {
	n, wait, err := c.do(ctx, c.timeout(), func() (int, error) { return c.nc.Write(b) })
	if err != nil {
		return &Error{Op: op, Size: len(b), Done: n, Wait: wait, Err: err}
	}
	return nil
}

// read fills b, waiting at most wait (Conn.Timeout if zero).
func (c *Conn) read(ctx context.Context, b []byte, op string, wait time.Duration) error {
	if wait <= 0 {
		wait = c.timeout()
	}
	n, wait, err := c.do(ctx, wait, func() (int, error) { return io.ReadFull(c.nc, b) })
	if err != nil {
		return &Error{Op: op, Size: len(b), Done: n, Wait: wait, Err: err}
	}
	return nil
}

// Dial connects to host:port as the client side of an exchange. network is
// "tcp" (rdma-core: any address family) or "tcp4" (perftest: IPv4 only).
func Dial(ctx context.Context, network, host string, port int) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("oob: couldn't connect to %s:%d: %w", host, port, err)
	}
	return NewConn(nc), nil
}

// Listener waits for the one client of an exchange, as the kernel tools'
// servers do (listen, accept one connection, stop listening).
type Listener struct {
	l net.Listener
}

// Listen listens on addr ("host:port"; ":18515" for every address).
// network is "tcp" or "tcp4" as for Dial.
func Listen(network, addr string) (*Listener, error) {
	l, err := net.Listen(network, addr)
	if err != nil {
		return nil, fmt.Errorf("oob: couldn't listen on %s: %w", addr, err)
	}
	return &Listener{l: l}, nil
}

// Addr is the address listened on.
func (l *Listener) Addr() net.Addr { return l.l.Addr() }

// Close stops listening.
func (l *Listener) Close() error { return l.l.Close() }

// Accept waits for one client until ctx ends, then stops listening.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	defer l.l.Close()
	stop := context.AfterFunc(ctx, func() { l.l.Close() })
	defer stop()
	nc, err := l.l.Accept()
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("oob: waiting for a client on %s: %w", l.l.Addr(), ctx.Err())
		}
		return nil, fmt.Errorf("oob: waiting for a client on %s: %w", l.l.Addr(), err)
	}
	return NewConn(nc), nil
}

// Connect makes the tools' TCP connection: with a server name the client
// dials server:port, else the server listens on port, tells onListen (if
// not nil) the address and accepts its one client. The errors read as
// the kernel tools', which vrnic-pingpong and vrnic-perf both print.
func Connect(ctx context.Context, network, server string, port int, onListen func(net.Addr)) (*Conn, error) {
	if server != "" {
		c, err := Dial(ctx, network, server, port)
		if err != nil {
			return nil, fmt.Errorf("Couldn't connect to %s:%d: %w", server, port, err)
		}
		return c, nil
	}
	l, err := Listen(network, fmt.Sprintf(":%d", port))
	if err != nil {
		return nil, fmt.Errorf("Couldn't listen to port %d: %w", port, err)
	}
	if onListen != nil {
		onListen(l.Addr())
	}
	c, err := l.Accept(ctx)
	if err != nil {
		return nil, fmt.Errorf("accept() failed: %w", err)
	}
	return c, nil
}
