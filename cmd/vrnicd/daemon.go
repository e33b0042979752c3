package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/nic/capture"
	"github.com/vrnic/vrnicd/nic/cmagent"
	"github.com/vrnic/vrnicd/nic/gid"
	"github.com/vrnic/vrnicd/nic/link"
	"github.com/vrnic/vrnicd/nic/metrics"
	"github.com/vrnic/vrnicd/nic/netstack"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/verbsock"
)

// Shutdown budget: SIGTERM must end the process within 2 s. Client
// sessions get part of it; if a step hangs anyway, the watchdog removes the
// socket and exits (the kernel then removes the TAP with the last fd).
const (
	sessionCloseWait = 500 * time.Millisecond
	shutdownBudget   = 1700 * time.Millisecond
	pcapFlushEvery   = time.Second
)

// daemon is one running vrnicd. After start, only the goroutine in wait
// touches cfg.
type daemon struct {
	opts  *options
	cfg   *Config
	level *slog.LevelVar
	log   *slog.Logger

	sock *socketFile
	sess *sessions
	lnk  link.Link
	more []*link.Raw // raw mode, --workers N: fanout members 1..N-1 (lnk is 0)
	st   *netstack.Stack
	dev  *nic.Device
	cma  *cmagent.Agent // rdma_cm over QP1
	gids *gid.Table
	pcap *pcapTap
	hub  *capture.Hub   // live capture (vrnicctl capture)
	capG captureGroup   // who may capture: the socket's group
	mets *metricsServer // nil without --metrics

	cancel    context.CancelFunc
	runDone   chan error    // netstack Run's result
	linkGone  chan struct{} // closed when the interface is deleted (linkstate.go)
	watchDone chan struct{} // ends the link watch
	sigs      chan os.Signal
	ready     atomic.Bool
}

// newLogger builds the slog handler: text or JSON on stderr. Under journald
// (JOURNAL_STREAM set) the journal stamps records, so time is left out.
func newLogger(format string, w io.Writer, level *slog.LevelVar) slog.Handler {
	opts := &slog.HandlerOptions{Level: level}
	if os.Getenv("JOURNAL_STREAM") != "" {
		opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}
	}
	if format == "json" {
		return slog.NewJSONHandler(w, opts)
	}
	return slog.NewTextHandler(w, opts)
}

// start brings the daemon up: socket, pcap, link, device, netstack, then
// the accept loop; READY=1 goes to systemd when all of it is up. On error
// everything already opened is closed again.
func start(o *options, cfg *Config, stderr io.Writer) (_ *daemon, err error) {
	d := &daemon{opts: o, cfg: cfg, level: new(slog.LevelVar), pcap: &pcapTap{}, hub: &capture.Hub{MaxSubs: cfg.CaptureMaxReaders, MaxBytes: cfg.CaptureReaderBytes}, runDone: make(chan error, 1)}
	d.level.Set(cfg.LogLevel)
	gate := newGate(newLogger(cfg.LogFormat, stderr, d.level))
	d.log = slog.New(gate)

	var undo []func()
	defer func() {
		if err != nil {
			slices.Reverse(undo)
			for _, f := range undo {
				f()
			}
			// What was logged on the way in is shown only at debug level:
			// otherwise a failed start is its error line alone.
			gate.release(cfg.LogLevel <= slog.LevelDebug)
		}
	}()

	sock, stale, err := listenSocket(cfg.Socket, cfg.SocketGID)
	if err != nil {
		return nil, err
	}
	d.sock = sock
	undo = append(undo, func() { sock.ln.Close(); sock.remove() })
	if stale {
		d.log.Info("replaced a stale socket left by a daemon that is gone", "socket", cfg.Socket)
	}

	if cfg.Pcap != "" {
		if err := d.pcap.open(cfg.Pcap); err != nil {
			return nil, fmt.Errorf("pcap %s: %w", cfg.Pcap, unwrapPath(err))
		}
		undo = append(undo, func() { d.pcap.close() })
	}

	if err := d.openLink(); err != nil {
		return nil, err
	}
	undo = append(undo, d.closeLinks)

	mac := d.lnk.HardwareAddr()
	d.gids = gid.New(mac, 0)
	d.gids.OnChange(func(es []gid.Entry) {
		if d.ready.Load() {
			d.log.Info("GID table changed", "gids", gidList(es))
			d.sess.srv.Broadcast(verbsock.EventGIDChange, 1)
		}
	})
	reservePs(cfg.Workers)
	d.dev, err = nic.NewDevice(nic.Config{Name: cfg.Name, MAC: mac, LinkMTU: d.lnk.MTU(), GIDs: d.gids,
		Workers: cfg.Workers, BusyPoll: cfg.BusyPoll, Log: d.log.With("device", cfg.Name),
		Limits: nic.Limits{MaxMcastGrp: cfg.McastGroups, MaxMcastQPAttach: cfg.McastQPsPerGroup,
			MaxTotalMcastQPAttach: cfg.McastAttachments}})
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() { d.dev.Close() })
	d.st, err = netstack.New(netstack.Config{
		Link:    d.lnk,
		Mode:    cfg.Mode,
		Addrs:   cfg.Addrs,
		Deliver: d.dev.Deliver,
		OnAddrs: func(a []netip.Addr) {
			if err := d.gids.Sync(a); err != nil {
				d.log.Warn("GID table", "err", err)
			}
		},
		Tap:    teeTap{d.pcap, d.hub},
		Logger: d.log,
	})
	if err != nil {
		if cfg.Mode == netstack.ModeRaw && isPerm(err) {
			return nil, fmt.Errorf("raw mode on %s needs CAP_NET_ADMIN as well as CAP_NET_RAW (netlink: the interface's neighbour table): %v", cfg.Iface, trimPkg(err))
		}
		if cfg.Mode == netstack.ModeRaw {
			return nil, fmt.Errorf("raw mode on %s: %w", cfg.Iface, trimPkg(err))
		}
		return nil, trimPkg(err)
	}
	undo = append(undo, func() { d.st.Close() })
	d.dev.Attach(d.st)
	if err := d.watchLink(); err != nil {
		return nil, err
	}
	undo = append(undo, func() { close(d.watchDone) })

	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	d.startReceive(ctx)

	d.cma = cmagent.New(d.dev, cmagent.Config{Log: d.log.With("device", cfg.Name, "role", "cm")})
	undo = append(undo, d.cma.Close)
	d.capG.set(cfg.SocketGID)
	srv, err := newConnServer(d.dev, d.cma, d.portCounters, d.hub, d.capG.get, d.st, d.log, cfg)
	if err != nil {
		return nil, err
	}
	if err := d.startMetrics(srv); err != nil {
		return nil, err
	}
	d.sess = newSessions(sock.ln, srv, d.log)
	d.sess.start()

	// Signals are ours from here on, before anyone is told we are ready.
	d.sigs = make(chan os.Signal, 4)
	signal.Notify(d.sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1)
	d.ready.Store(true)
	gate.release(true)
	d.log.Info("vrnicd ready", d.summary()...)
	if cfg.Mode == netstack.ModeTAP && len(cfg.Addrs) == 0 {
		d.log.Warn("TAP mode without --ip: the only GID is the IPv6 link-local one, so peers must use IPv6 link-local (-g with its index); give --ip ADDR/LEN for an IPv4 or routable GID")
	}
	d.notify(sd.SdNotifyReady)
	return d, nil
}

// startReceive has the device's worker read the link itself where the link
// can be polled (raw and TAP: run to completion, no hand-off between the
// reader and the engine), else the netstack's reader goroutine. Either way
// runDone reports the link's end: an error, or nil once ctx is done.
func (d *daemon) startReceive(ctx context.Context) {
	p, ok := d.st.RxPoller()
	if !ok {
		go func() { d.runDone <- d.st.Run(ctx) }()
		return
	}
	var once sync.Once
	report := func(err error) {
		once.Do(func() { d.runDone <- err })
	}
	if err := d.dev.AttachPoller(0, p, report); err != nil {
		d.log.Warn("the datapath worker cannot wait on the link; a reader goroutine serves it", "err", err)
		go func() { d.runDone <- d.st.Run(ctx) }()
		return
	}
	d.attachFanout(report)
	go func() {
		<-ctx.Done()
		report(nil)
	}()
}

// attachFanout gives workers 1..N-1 their fanout members to read.
func (d *daemon) attachFanout(report func(error)) {
	for i, l := range d.more {
		p, ok := d.st.RxPollerOn(l)
		err := fmt.Errorf("fanout member %d cannot be polled", i+1)
		if ok {
			err = d.dev.AttachPoller(i+1, p, report)
		}
		if err != nil {
			report(fmt.Errorf("worker %d: %w", i+1, err))
			return
		}
	}
}

// portCounters yields the netstack's counters and, in raw mode, what the
// kernel counted on the receive rings of all the workers' sockets:
// link_rx_ring_drops, frames lost because a ring was full (the peer had
// more in flight than --rx-ring-frames while the daemon was not running),
// and link_rx_truncated, frames longer than a slot.
func (d *daemon) portCounters(yield func(string, uint64)) {
	d.st.Counters().Each(yield)
	first, ok := d.lnk.(*link.Raw)
	if !ok {
		return
	}
	var drops, cut uint64
	for _, r := range append([]*link.Raw{first}, d.more...) {
		if st, err := r.Stats(); err == nil {
			drops += st.Drops
			cut += st.Truncated
		}
	}
	yield("link_rx_ring_drops", drops)
	yield("link_rx_truncated", cut)
}

// ringSlots is the frames a raw-mode receive ring holds (--rx-ring-frames
// rounded up to whole blocks), 0 in TAP mode.
func (d *daemon) ringSlots() int {
	if r, ok := d.lnk.(*link.Raw); ok {
		return r.RingSlots()
	}
	return 0
}

// startMetrics serves --metrics, if given.
func (d *daemon) startMetrics(srv connServer) error {
	if d.cfg.Metrics == "" {
		return nil
	}
	m, err := startMetrics(d.cfg.Metrics, metrics.Source{Device: d.dev, Port: d.portCounters,
		Daemon: d.daemonCounters, Clients: srv.Clients, Objects: srv.Objects,
		Impaired: func() bool { _, on := d.st.Impairment(); return on }}, d.log)
	if err != nil {
		return err
	}
	d.mets = m
	return nil
}

// daemonCounters are the daemon's own counters, for the metrics.
func (d *daemon) daemonCounters(yield func(name string, v uint64)) {
	d.hub.Each(yield)
}

// openLink opens the TAP or the raw interface and turns the errors a user
// can fix into sentences that say how.
func (d *daemon) openLink() error {
	cfg := d.cfg
	if cfg.Mode == netstack.ModeTAP {
		t, err := link.OpenTAP(link.TAPConfig{Name: cfg.Iface, MTU: cfg.MTU, MAC: cfg.MAC})
		if err != nil {
			return tapError(cfg.Iface, err)
		}
		if t.Adopted() {
			d.log.Info("attached to the persistent TAP "+t.Name()+"; it stays, with its addresses, after vrnicd stops", "mtu", t.MTU())
		}
		d.lnk = t
		return nil
	}
	ifi, err := net.InterfaceByName(cfg.Iface)
	if err != nil {
		if strings.Contains(err.Error(), "no such network interface") {
			return fmt.Errorf("interface %s not found (for a new TAP use --iface tap:%s)", cfg.Iface, cfg.Iface)
		}
		return fmt.Errorf("interface %s: %w", cfg.Iface, unwrapPath(err))
	}
	if cfg.MTU != 0 && cfg.MTU != ifi.MTU {
		return &configError{fmt.Sprintf("--mtu %d does not match %s's MTU %d: in raw mode the interface's MTU rules (change it with 'ip link set %s mtu %d', or drop mtu)",
			cfg.MTU, cfg.Iface, ifi.MTU, cfg.Iface, cfg.MTU)}
	}
	// A TPACKET_V2 receive ring: the kernel hands each frame over at once
	// (V3 holds a block until it fills or times out, which costs latency),
	// and the ring, unlike recvmmsg's socket buffer, keeps up with the
	// link (vrnic-linkbench; docs/performance.md). The filter passes
	// RoCEv2 only, so a slot need not hold more than MaxRoCEPacket; it holds
	// that much whatever the MTU is now, since the MTU is followed.
	ring := &link.RingConfig{Version: 2, MaxPacket: link.MaxRoCEPacket, Frames: cfg.RxRingFrames}
	links, err := openRawLinks(link.RawConfig{Interface: cfg.Iface, Filter: link.RoCEFilter(), Ring: ring}, cfg.Workers)
	if err != nil {
		if isPerm(err) {
			return fmt.Errorf("raw mode on %s needs CAP_NET_RAW (run vrnicd as root or give it that capability): %v", cfg.Iface, syscall.EPERM)
		}
		return fmt.Errorf("raw mode on %s: %w", cfg.Iface, trimPkg(err))
	}
	d.lnk, d.more = links[0], links[1:]
	return nil
}

// openRawLinks opens one raw socket, or with several workers a fanout
// group of one per worker, steered by BTH destination QP as the device
// assigns QPs to workers (QPN modulo the count).
func openRawLinks(cfg link.RawConfig, workers int) ([]*link.Raw, error) {
	if workers <= 1 {
		r, err := link.OpenRaw(cfg)
		if err != nil {
			return nil, err
		}
		return []*link.Raw{r}, nil
	}
	return link.OpenRawFanout(cfg, workers)
}

// closeLinks closes the link and any fanout members.
func (d *daemon) closeLinks() {
	d.lnk.Close()
	for _, l := range d.more {
		l.Close()
	}
}

func tapError(name string, err error) error {
	switch {
	case errors.Is(err, syscall.EACCES):
		// open(2) of the clone device, before any capability check.
		return fmt.Errorf("creating TAP %s: cannot open /dev/net/tun: permission denied (the daemon's user needs read and write access to it)", name)
	case isPerm(err):
		return fmt.Errorf("creating TAP %s needs CAP_NET_ADMIN (run vrnicd as root or give it that capability): %v", name, syscall.EPERM)
	case errors.Is(err, syscall.EBUSY):
		return fmt.Errorf("TAP %s exists and is in use by another process", name)
	case errors.Is(err, syscall.EINVAL):
		return fmt.Errorf("interface %s exists and is not a TAP device; choose another name", name)
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("creating TAP %s: /dev/net/tun is missing (load the tun module; in a container, pass the device in)", name)
	}
	return fmt.Errorf("creating TAP %s: %w", name, trimPkg(err))
}

func isPerm(err error) bool {
	return errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES)
}

// trimPkg drops the "link: " / "netstack: " prefixes of the layers' errors,
// which say nothing to a user.
func trimPkg(err error) error {
	s := err.Error()
	for _, p := range []string{"link: ", "netstack: "} {
		s = strings.TrimPrefix(s, p)
	}
	return errors.New(s)
}

// summary is what a user needs to know about the running NIC, for the
// ready line and SIGHUP.
func (d *daemon) summary() []any {
	var addrs []string
	for _, p := range d.st.Addrs() {
		addrs = append(addrs, p.String())
	}
	a := []any{
		"version", versionString(),
		"device", d.cfg.Name,
		"iface", d.lnk.Name(),
		"mode", d.cfg.Mode.String(),
		"mac", d.lnk.HardwareAddr().String(),
		"addrs", strings.Join(addrs, ","),
		"gids", gidList(d.gids.Entries()),
		"mtu", d.lnk.MTU(),
		"workers", d.cfg.Workers,
		"rx_ring_frames", d.ringSlots(),
		"busy_poll", d.cfg.BusyPoll.String(),
		"active_mtu", d.dev.ActiveMTU().Bytes(),
		"socket", d.cfg.Socket,
	}
	if p := d.pcap.current(); p != "" {
		a = append(a, "pcap", p)
	}
	if d.mets != nil {
		a = append(a, "metrics", d.mets.addr())
	}
	return a
}

// gidList formats a GID table as "0=fe80::… 1=::ffff:192.0.2.10".
func gidList(es []gid.Entry) string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d=%s", e.Index, netip.AddrFrom16(e.GID))
	}
	return b.String()
}

func (d *daemon) notify(state string) {
	if _, err := sd.SdNotify(false, state); err != nil {
		d.log.Warn("sd_notify", "state", state, "err", err)
	}
}

// wait runs the signal loop until the daemon stops and returns the exit
// status.
func (d *daemon) wait() int {
	sigs := d.sigs
	defer signal.Stop(sigs)
	tick := time.NewTicker(pcapFlushEvery)
	defer tick.Stop()
	flushFailed := false
	for {
		select {
		case s := <-sigs:
			switch s {
			case syscall.SIGHUP:
				d.reload()
			case syscall.SIGUSR1:
				d.log.Info("counters", d.counterAttrs()...)
			default:
				return d.shutdown("signal "+signalName(s), exitOK, false)
			}
		case err := <-d.runDone:
			if err == nil {
				err = errors.New("the link was closed")
			}
			return d.linkLost(err, true)
		case <-d.linkGone:
			return d.linkLost(errIfaceDeleted, false)
		case <-tick.C:
			if err := d.pcap.flush(); err != nil && !flushFailed {
				flushFailed = true
				d.log.Error("pcap write failed; capture stops until SIGHUP opens a new file", "pcap", d.pcap.current(), "err", err)
			} else if err == nil {
				flushFailed = false
			}
		}
	}
}

func signalName(s os.Signal) string {
	if s == syscall.SIGTERM {
		return "SIGTERM"
	}
	if s == syscall.SIGINT {
		return "SIGINT"
	}
	return s.String()
}

// shutdown stops everything in order: stop accepting, close client
// sessions, close the device (QPs flushed), stop the netstack, close the
// link (the TAP goes with it), close the pcap, remove the socket. STOPPING=1
// goes to systemd first, when shutdown begins, as sd_notify(3) defines it.
// A step that hangs past the budget is logged and the process exits anyway.
func (d *daemon) shutdown(reason string, code int, runEnded bool) int {
	d.notify(sd.SdNotifyStopping)
	d.log.Info("stopping", "reason", reason)
	var step atomic.Value
	step.Store("")
	done := make(chan struct{})
	go func() {
		defer close(done)
		close(d.watchDone)
		step.Store("closing the client socket")
		d.sess.stopAccepting()
		if d.mets != nil {
			d.mets.close()
		}
		step.Store("closing client sessions")
		if !d.sess.closeAll(sessionCloseWait) {
			d.log.Warn("client sessions did not end in time", "clients", d.sess.count())
		}
		step.Store("closing the device")
		d.cma.Close()
		d.dev.Close()
		step.Store("stopping the netstack")
		d.cancel()
		if !runEnded {
			<-d.runDone
		}
		d.st.Close()
		step.Store("closing the link")
		d.closeLinks()
		step.Store("closing the pcap file")
		if err := d.pcap.close(); err != nil {
			d.log.Error("pcap", "err", err)
		}
		step.Store("removing the socket")
		d.sock.remove()
	}()
	select {
	case <-done:
		d.log.Info("stopped", d.counterAttrs()...)
		return code
	case <-time.After(shutdownBudget):
		d.log.Error("shutdown did not finish in time; exiting anyway", "step", step.Load())
		d.sock.remove()
		return exitFail
	}
}

// reload re-reads the config file (flags still override it) and applies
// what can change while running: log level, pcap file (reopened when
// renamed away, as after logrotate), TAP-mode addresses, socket group. What
// needs a restart is logged and keeps its running value. A bad file changes
// nothing.
func (d *daemon) reload() {
	d.notify(sd.SdNotifyReloading)
	defer d.notify(sd.SdNotifyReady)
	nc, err := d.opts.load()
	if err != nil {
		d.log.Error("reload failed; the running configuration stays", "err", err)
		return
	}
	old := d.cfg
	var applied []string
	if nc.LogLevel != old.LogLevel {
		d.level.Set(nc.LogLevel)
		applied = append(applied, "log_level="+strings.ToLower(nc.LogLevel.String()))
	}
	if reopened, err := d.pcap.reopen(nc.Pcap); err != nil {
		d.log.Error("pcap not reopened; the old file stays in use", "pcap", nc.Pcap, "err", unwrapPath(err))
		nc.Pcap = old.Pcap
	} else if reopened {
		applied = append(applied, "pcap="+nc.Pcap)
	}
	if nc.Mode == netstack.ModeTAP && !slices.Equal(nc.Addrs, old.Addrs) {
		if err := d.st.SetAddrs(nc.Addrs); err != nil {
			d.log.Error("addresses not changed", "err", trimPkg(err))
			nc.Addrs = old.Addrs
		} else {
			applied = append(applied, "ip")
		}
	}
	if nc.SocketGID != old.SocketGID {
		if err := d.sock.setGroup(nc.SocketGID); err != nil {
			d.log.Error("socket group not changed", "err", err)
			nc.SocketGroup, nc.SocketGID = old.SocketGroup, old.SocketGID
		} else {
			d.capG.set(nc.SocketGID)
			applied = append(applied, "socket_group")
		}
	}
	// The rest is fixed for the daemon's life.
	restart := func(key string, changed bool, was, now any) {
		if changed {
			d.log.Warn("setting changed; it takes effect at restart", "key", key, "running", was, "configured", now)
		}
	}
	restart("iface", nc.Mode != old.Mode || nc.Iface != old.Iface, ifaceString(old), ifaceString(nc))
	restart("mac", nc.Mode == old.Mode && nc.MAC.String() != old.MAC.String(), old.MAC.String(), nc.MAC.String())
	restart("mtu", nc.MTU != 0 && nc.MTU != d.lnk.MTU(), d.lnk.MTU(), nc.MTU)
	restart("workers", nc.Workers != old.Workers, old.Workers, nc.Workers)
	nc.Workers = old.Workers
	restart("rx_ring_frames", nc.RxRingFrames != old.RxRingFrames, old.RxRingFrames, nc.RxRingFrames)
	nc.RxRingFrames = old.RxRingFrames
	restart("busy_poll", nc.BusyPoll != old.BusyPoll, old.BusyPoll.String(), nc.BusyPoll.String())
	nc.BusyPoll = old.BusyPoll
	restart("name", nc.Name != old.Name, old.Name, nc.Name)
	restart("socket", nc.Socket != old.Socket, old.Socket, nc.Socket)
	restart("log_format", nc.LogFormat != old.LogFormat, old.LogFormat, nc.LogFormat)
	restart("metrics", nc.Metrics != old.Metrics, old.Metrics, nc.Metrics)
	nc.Metrics = old.Metrics
	nc.Mode, nc.Iface, nc.MAC, nc.MACSet, nc.MTU = old.Mode, old.Iface, old.MAC, old.MACSet, old.MTU
	nc.Name, nc.Socket, nc.LogFormat = old.Name, old.Socket, old.LogFormat
	keepClientLimits(old, nc, restart)
	d.cfg = nc
	attrs := []any{"applied", strings.Join(applied, ",")}
	if _, ok := d.opts.configFile(); !ok {
		// The command line is not read again: only the pcap file was
		// reopened (log rotation). Say so rather than look like a reload.
		attrs = append(attrs, "note", "started without --config: nothing to reload but the pcap file")
	}
	d.log.Info("reloaded", append(attrs, d.summary()...)...)
}

// keepClientLimits warns of changed client limits, which the server took
// at start, and keeps the running ones in nc.
func keepClientLimits(old, nc *Config, restart func(key string, changed bool, was, now any)) {
	restart("max_connections", nc.MaxConns != old.MaxConns, old.MaxConns, nc.MaxConns)
	restart("max_connections_per_user", nc.MaxConnsPerUser != old.MaxConnsPerUser, old.MaxConnsPerUser, nc.MaxConnsPerUser)
	restart("hello_timeout", nc.HelloTimeout != old.HelloTimeout, old.HelloTimeout.String(), nc.HelloTimeout.String())
	restart("privileged_groups", !slices.Equal(nc.PrivilegedGIDs, old.PrivilegedGIDs), old.PrivilegedGIDs, nc.PrivilegedGIDs)
	restart("connection_limits", nc.ConnLimits != old.ConnLimits, fmt.Sprintf("%+v", old.ConnLimits), fmt.Sprintf("%+v", nc.ConnLimits))
	restart("user_limits", nc.UserLimits != old.UserLimits, fmt.Sprintf("%+v", old.UserLimits), fmt.Sprintf("%+v", nc.UserLimits))
	nc.MaxConns, nc.MaxConnsPerUser, nc.HelloTimeout = old.MaxConns, old.MaxConnsPerUser, old.HelloTimeout
	nc.PrivilegedGIDs, nc.ConnLimits, nc.UserLimits = old.PrivilegedGIDs, old.ConnLimits, old.UserLimits
	mcast := func(c *Config) [3]int { return [3]int{c.McastGroups, c.McastQPsPerGroup, c.McastAttachments} }
	restart("multicast", mcast(nc) != mcast(old), mcast(old), mcast(nc))
	nc.McastGroups, nc.McastQPsPerGroup, nc.McastAttachments = old.McastGroups, old.McastQPsPerGroup, old.McastAttachments
}

func ifaceString(c *Config) string {
	if c.Mode == netstack.ModeTAP {
		return "tap:" + c.Iface
	}
	return c.Iface
}

// counterAttrs are the non-zero port (netstack and link) and device
// counters.
func (d *daemon) counterAttrs() []any {
	var ns, dv []any
	d.portCounters(func(n string, v uint64) {
		if v != 0 {
			ns = append(ns, slog.Uint64(n, v))
		}
	})
	snap := d.dev.Counters().Snapshot()
	for _, n := range transport.CounterNames() {
		if v := snap[n]; v != 0 {
			dv = append(dv, slog.Uint64(n, v))
		}
	}
	return []any{slog.Group("netstack", ns...), slog.Group("device", dv...),
		"qps", len(d.dev.QPs()), "clients", d.sess.count(), "pcap_frames", d.pcap.frames()}
}

// reservePs keeps at least one P (GOMAXPROCS) beyond the datapath workers:
// an idle worker sleeps in a blocking system call that keeps its P
// (link.WaitSet), and the control plane (clients' requests, the CM agent,
// metrics) must not wait for the runtime's sysmon to take one back.
func reservePs(workers int) {
	if runtime.GOMAXPROCS(0) < workers+1 {
		runtime.GOMAXPROCS(workers + 1)
	}
}
