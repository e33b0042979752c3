package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/vrnic/vrnicd/cmd/internal/version"
	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/nic/capture"
	"github.com/vrnic/vrnicd/nic/cmagent"
	"github.com/vrnic/vrnicd/nic/netstack"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/server"
)

// connServer serves one client connection until the client goes or the
// connection is closed: the verbsock server (*server.Server).
type connServer interface {
	ServeConn(c *net.UnixConn)
	Shutdown(ctx context.Context) error
	Broadcast(ev verbsock.EventType, port uint32)
	Clients() int
	Objects(yield func(kind string, n uint64))
}

// newConnServer returns the client protocol's server for dev (rdma_cm
// through cma); port adds
// the port's counters (netstack.Counters.Each) to the device's in
// query_stats (icrc_errors is counted there), and QP1's (cm_rx_req, ...)
// follow them; hub serves live capture to root, the daemon's user and
// group captureGID(); im is the port's fault injection (vrnicctl impair);
// c bounds what clients may hold and how they connect.
func newConnServer(dev *nic.Device, cma *cmagent.Agent, port server.CounterFunc, hub *capture.Hub, captureGID func() int,
	im server.Impairer, log *slog.Logger, c *Config) (connServer, error) {
	extra := func(yield func(string, uint64)) {
		if port != nil {
			port(yield)
		}
		dev.GSICounters(yield)
	}
	return server.New(server.Config{Device: dev, Log: log, ExtraCounters: withCapture(extra, hub), Capture: hub, CaptureGID: captureGID,
		Limits: c.ConnLimits, UserLimits: c.UserLimits, MaxConns: c.MaxConns, MaxConnsPerUser: c.MaxConnsPerUser,
		HelloTimeout: c.HelloTimeout, PrivilegedGroups: c.PrivilegedGIDs, CM: cma, Impair: im,
		Netdev: c.Iface, Mode: linkMode(c.Mode), Version: version.Version()})
}

// linkMode is the mode as query_daemon names it (vrnicctl devinfo).
func linkMode(m netstack.Mode) uint8 {
	if m == netstack.ModeRaw {
		return verbsock.ModeRaw
	}
	return verbsock.ModeTAP
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

// closeAll disconnects every client (the server destroys what each owned)
// and waits up to d for it all to end; it reports whether it did.
func (s *sessions) closeAll(d time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		return false
	}
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
	case <-ctx.Done():
		return false
	}
}

// count is the number of connected clients.
func (s *sessions) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}
