// Package server is the daemon side of verbsock: it serves client
// connections over a Unix socket against a Device (a *nic.Device).
//
// Each connection has its own handle namespace, its own quotas (Limits),
// shared quotas with the other connections of its peer uid (UserLimits),
// and its own objects; when it closes (or its process dies) every object it
// owns is destroyed: its QPs go to ERR and stop, its SRQs, AHs, MWs, MRs,
// CQs and PDs go, and its memory is unmapped once the last in-flight access
// is done. Nothing a client writes into shared memory or sends on the
// socket can make the server panic or stall another client.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/nic/capture"
	"github.com/vrnic/vrnicd/nic/cmagent"
	"github.com/vrnic/vrnicd/nic/gid"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/verbsock"
	"golang.org/x/sys/unix"
)

// Device is what the server needs of the device; *nic.Device has it.
type Device interface {
	Name() string
	Mem() *mem.Table
	Attr() nic.DeviceAttr
	Port() nic.PortAttr
	GIDs() *gid.Table
	CreateQP(cfg nic.QPConfig) (*nic.QP, error)
	CreateSRQ(pd mem.PD, maxWR, maxSGE uint32, onLimit func()) (*transport.SRQ, error)
	WatchSRQ(s *transport.SRQ, bell nic.Doorbell, post func(max int) (more bool)) error
	DestroySRQ(s *transport.SRQ) error
	ResolveAH(av *transport.AddressVector) error
	AttachMcast(q *nic.QP, mgid gid.GID) error
	DetachMcast(q *nic.QP, mgid gid.GID) error
}

var _ Device = (*nic.Device)(nil)

// DefaultLimits are the per-connection quotas when Config.Limits is zero.
var DefaultLimits = verbsock.Limits{
	MaxPD: 64, MaxCQ: 256, MaxQP: 256, MaxSRQ: 64, MaxMR: 4096, MaxMW: 4096, MaxAH: 4096, MaxMem: 4096,
	MaxMemBytes: 4 << 30, MaxMRBytes: 4 << 30, MaxMcast: 256,
}

// Config configures a Server.
type Config struct {
	Device Device
	Log    *slog.Logger
	// Limits are each connection's quotas; zero fields take DefaultLimits.
	Limits verbsock.Limits
	// UserLimits bound what all connections of one peer uid hold together;
	// zero fields take DefaultUserLimits, and each object count is held
	// below half of the device's table of it.
	UserLimits verbsock.Limits
	// MaxConns and MaxConnsPerUser bound the connections served, in all
	// and per peer uid (defaults DefaultMaxConns, DefaultMaxConnsPerUser);
	// a connection past them gets EUSERS in answer to its hello.
	MaxConns, MaxConnsPerUser int
	// HelloTimeout is how long a new connection may take to say hello
	// before it is closed (default DefaultHelloTimeout).
	HelloTimeout time.Duration
	// PrivilegedGroups are the groups whose members, besides uid 0, may set
	// controlled Q_Keys (high bit set) on their QPs.
	PrivilegedGroups []uint32
	// WriteTimeout bounds how long a reply may wait for room in a client's
	// socket buffer before the client is dropped (default 5 s).
	WriteTimeout time.Duration
	// MaxFastRegPages bounds a REG_MR page list (default 4096).
	MaxFastRegPages int
	// ExtraCounters, if set, adds counters kept outside the device (the
	// port's link layer: netstack.Counters.Each) to query_stats' device
	// counters; one with a transport counter's name (icrc_errors) adds to
	// it. Names are 1..32 bytes, and at most 64 counters in all.
	ExtraCounters CounterFunc
	// Capture, if set, serves live capture (op capture, capture.go) from
	// this hub; without it capture is EOPNOTSUPP. CaptureGID returns the
	// group (the socket's, which a reload may change) whose members may
	// capture besides root and the daemon's own user; nil or 0 is the
	// daemon's group.
	Capture    *capture.Hub
	CaptureGID func() int
	// Impair, if set, is the port's fault injection (op impair); without
	// it the op is EOPNOTSUPP.
	Impair Impairer
	// CM, if set, serves the rdma_cm operations (cm.go); CMLimits bound
	// each client's listeners and connections.
	CM       *cmagent.Agent
	CMLimits CMLimits
	// Netdev, Mode (verbsock.ModeTAP, ModeRaw), Version and Started (zero:
	// when New ran) are what query_daemon reports of the daemon (vrnicctl
	// devinfo, devices), as `rdma link show` names a device's netdev.
	Netdev  string
	Mode    uint8
	Version string
	Started time.Time
}

// Server serves verbsock connections.
type Server struct {
	cfg      Config
	dev      Device
	log      *slog.Logger
	limits   verbsock.Limits
	userLim  [nRes]uint64
	refusing chan struct{} // refused connections being answered
	cmLimits CMLimits

	mu        sync.Mutex
	users     map[uint32]*account        // +checklocks:mu
	refused   map[*net.UnixConn]struct{} // being answered by refuse; +checklocks:mu
	conns     map[*conn]struct{}
	listeners map[*net.UnixListener]struct{}
	closed    bool
	nextID    uint32
	wg        sync.WaitGroup
	// ctx is the parent of every client's context; Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
}

// New makes a server.
func New(cfg Config) (*Server, error) {
	if cfg.Device == nil {
		return nil, errors.New("server: no device")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 5 * time.Second
	}
	if cfg.MaxFastRegPages <= 0 {
		cfg.MaxFastRegPages = 4096
	}
	if cfg.Started.IsZero() {
		cfg.Started = time.Now()
	}
	if err := checkExtraCounters(cfg.ExtraCounters); err != nil {
		return nil, err
	}
	l := cfg.Limits
	d := DefaultLimits
	fill32 := func(v *uint32, def uint32) {
		if *v == 0 {
			*v = def
		}
	}
	fill32(&l.MaxPD, d.MaxPD)
	fill32(&l.MaxCQ, d.MaxCQ)
	fill32(&l.MaxQP, d.MaxQP)
	fill32(&l.MaxSRQ, d.MaxSRQ)
	fill32(&l.MaxMR, d.MaxMR)
	fill32(&l.MaxMW, d.MaxMW)
	fill32(&l.MaxAH, d.MaxAH)
	fill32(&l.MaxMem, d.MaxMem)
	fill32(&l.MaxMcast, d.MaxMcast)
	if l.MaxMemBytes == 0 {
		l.MaxMemBytes = d.MaxMemBytes
	}
	if l.MaxMRBytes == 0 {
		l.MaxMRBytes = d.MaxMRBytes
	}
	s := &Server{cfg: cfg, dev: cfg.Device, log: cfg.Log, limits: l, cmLimits: cfg.CMLimits.withDefaults(),
		users:    map[uint32]*account{},
		refused:  map[*net.UnixConn]struct{}{},
		refusing: make(chan struct{}, maxRefusing),
		conns:    map[*conn]struct{}{}, listeners: map[*net.UnixListener]struct{}{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if err := s.fillConnLimits(); err != nil {
		return nil, err
	}
	a := cfg.Device.Attr()
	s.userLim = userLimits(cfg.UserLimits, deviceTables{MaxPD: a.MaxPD, MaxCQ: a.MaxCQ, MaxQP: a.MaxQP,
		MaxSRQ: a.MaxSRQ, MaxMR: a.MaxMR, MaxMW: a.MaxMW, MaxAH: a.MaxAH, MaxMcastGrp: a.MaxMcastGrp})
	return s, nil
}

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("server: closed")

// Serve accepts connections on l until Close (then ErrServerClosed) or an
// accept error.
func (s *Server) Serve(l *net.UnixListener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()
	var delay time.Duration
	for {
		uc, err := l.AcceptUnix()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.log.Warn("verbsock accept", "err", err, "retry_in", delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.ServeConn(uc)
		}()
	}
}

// ServeConn serves one connected unixpacket socket until the client goes
// away or the server closes, then destroys everything the client owned. It
// closes uc.
func (s *Server) ServeConn(uc *net.UnixConn) {
	c, err := s.newConn(uc)
	if err != nil {
		s.log.Warn("verbsock connection refused", "err", err)
		if errors.Is(err, syscall.EUSERS) {
			s.refuse(uc, err)
			return
		}
		uc.Close()
		return
	}
	c.serve()
}

// Broadcast sends an unaffiliated event (port active/error, GID change,
// device fatal) to every connection.
func (s *Server) Broadcast(ev verbsock.EventType, port uint32) {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.event(verbsock.EventMsg{Type: ev, Port: port})
	}
}

// Clients is the number of connections being served.
func (s *Server) Clients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Close stops accepting, disconnects every client (destroying its
// objects) and waits until all of it is done.
func (s *Server) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.cancel() // every client's context: their CM waits end
	}
	s.closed = true
	for l := range s.listeners {
		l.Close()
	}
	for c := range s.conns {
		c.sock.Close()
	}
	for uc := range s.refused {
		uc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// Shutdown is Close bounded by ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Listen makes the daemon's listening socket at path: SOCK_SEQPACKET, mode
// 0660, group gid (-1 keeps the daemon's group). A stale socket file (no
// one answering) is replaced; a live one is EADDRINUSE. The parent
// directory is created 0750 if missing. The file is removed on Close.
func Listen(path string, gid int) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	if _, err := os.Lstat(path); err == nil {
		if c, err := net.DialTimeout("unixpacket", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("server: %s: another daemon is listening: %w", path, syscall.EADDRINUSE)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("server: removing stale socket: %w", err)
		}
	}
	old := unix.Umask(0o117) // created 0660 at once: no window with wider rights
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	unix.Umask(old)
	if err != nil {
		return nil, err
	}
	l.SetUnlinkOnClose(true)
	if gid >= 0 {
		if err := chgrpSocket(path, gid); err != nil {
			l.Close()
			return nil, fmt.Errorf("server: chown %s to group %d: %w", path, gid, err)
		}
	}
	return l, nil
}

// chgrpSocket gives the socket file at path to group gid without following
// a link someone swapped in after bind (O_PATH|O_NOFOLLOW, then fchownat on
// that descriptor, only if it is a socket). Its mode came from bind's umask.
func chgrpSocket(path string, gid int) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fmt.Errorf("replaced after bind (mode %#o)", st.Mode)
	}
	return unix.Fchownat(fd, "", -1, gid, unix.AT_EMPTY_PATH)
}

func (s *Server) register(c *conn, uid uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, err := s.admitLocked(uid)
	if err != nil {
		return err
	}
	c.acct = a
	s.nextID++
	c.id = s.nextID
	s.conns[c] = struct{}{}
	s.wg.Add(1) // released when the connection's cleanup is done
	return nil
}

func (s *Server) unregister(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.leaveLocked(c.acct)
	s.mu.Unlock()
	s.wg.Done()
}
