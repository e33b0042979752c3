package main

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vrnic/vrnicd/nic"
)

// connServer serves one client connection until the client goes or the
// connection is closed. The verbsock server plugs in here.
type connServer interface {
	ServeConn(c *net.UnixConn)
}

// newConnServer returns the client protocol's server for dev.
//
// VERBSOCK PLUG POINT: until verbsock's server lands, connections are
// closed at once with a logged notice; the daemon still owns the socket,
// its permissions and its life cycle.
func newConnServer(dev *nic.Device, log *slog.Logger) connServer {
	return noServer{log: log}
}

type noServer struct{ log *slog.Logger }

func (s noServer) ServeConn(c *net.UnixConn) {
	s.log.Warn("client connection closed: this build has no verbs server yet", peerAttrs(c)...)
	c.Close()
}

// sessions accepts client connections and tracks them so shutdown can close
// every one.
type sessions struct {
	ln  *net.UnixListener
	srv connServer
	log *slog.Logger

	mu     sync.Mutex
	conns  map[*net.UnixConn]struct{}
	closed bool
	wg     sync.WaitGroup // the accept loop and every ServeConn
}

func newSessions(ln *net.UnixListener, srv connServer, log *slog.Logger) *sessions {
	return &sessions{ln: ln, srv: srv, log: log, conns: map[*net.UnixConn]struct{}{}}
}

// start runs the accept loop.
func (s *sessions) start() {
	s.wg.Add(1)
	go s.accept()
}

func (s *sessions) accept() {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and the like: wait, as net/http does, rather than spin.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Error("accept on the client socket", "err", err, "retry_in", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		s.log.Debug("client connected", peerAttrs(c)...)
		go func() {
			defer s.wg.Done()
			s.srv.ServeConn(c)
			c.Close()
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// stopAccepting closes the listener; the file stays until remove.
func (s *sessions) stopAccepting() {
	s.ln.Close()
}

// closeAll closes every client connection and waits up to d for their
// servers to return; it reports whether they all did.
func (s *sessions) closeAll(d time.Duration) bool {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// count is the number of connected clients.
func (s *sessions) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// peerAttrs names a client by its SO_PEERCRED credentials.
func peerAttrs(c *net.UnixConn) []any {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	var cred *unix.Ucred
	_ = rc.Control(func(fd uintptr) {
		cred, _ = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if cred == nil {
		return nil
	}
	return []any{"client_pid", cred.Pid, "client_uid", cred.Uid}
}
