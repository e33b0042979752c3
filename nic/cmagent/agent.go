// Package cmagent is the device's Communication Manager agent: it owns the
// port's transport/cm Table, feeds it the CM MADs QP1 receives, drives its
// timers, sends the MADs it asks for from QP1, moves the consumers' QPs
// through the transitions it agrees (INIT, RTR, RTS, ERR) and hands each
// consumer the events of its listeners and connections. It is what the
// kernel's ib_cm MAD agent and rdma_cm's cma_modify_qp_* are together, for
// one nic.Device.
//
// One goroutine runs the Table's receive path and timers; consumer calls
// take the same lock. Event handlers run with that lock held: they must not
// block or call back into the Agent (the verbsock server only queues them).
package cmagent

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/nic/gid"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/clock"
	"github.com/vrnic/vrnicd/transport/cm"
	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
)

// Config configures New. Zero fields take defaults.
type Config struct {
	CM      cm.Config       // LocalCAGUID defaults to the device's node GUID
	Clock   transport.Clock // nil: the system clock
	Log     *slog.Logger
	RxQueue int // received MADs waiting for the agent; default 256, more are dropped and counted
	// ResolveTimeout bounds the address resolution of Connect, ResolveUD
	// and ResolveAddr (rping gives rdma_resolve_addr 2000 ms); default 2 s.
	ResolveTimeout time.Duration
}

// Event is a cm.Event with a copy of its connection as the Table had it
// then (the negotiated QPNs, PSNs, depths and retry counts, the peer).
type Event struct {
	cm.Event
	Conn cm.Conn
	UD   *UDRoute // a UD resolution's (ResolveUD) events
}

// Handler takes the events of a listener or connection. It runs with the
// agent's lock held: it must not block nor call the Agent. It returns false
// to refuse a connect request (its consumer has no room for it): the agent
// rejects it (REJ reason 28, as rdma_cm does when a listener's handler
// fails; a SIDR request gets SIDR_REP status "rejected"). For other events
// the result does not matter.
type Handler func(Event) bool

// Counters count what the agent itself did; the Table's are in
// Agent.TableCounters, the MADs by kind in nic.Device.GSICounters.
type Counters struct {
	RxQueueDrops atomic.Uint64 // MADs dropped because the agent was that far behind
	ModifyErrors atomic.Uint64 // QP transitions the QP refused (or a QP gone)
	SendErrors   atomic.Uint64 // MADs SendMAD refused
}

// Agent is the CM of one device.
type Agent struct {
	dev   *nic.Device
	clock transport.Clock
	log   *slog.Logger
	rx    chan nic.MAD
	kick  chan struct{}
	done  chan struct{}
	wg    sync.WaitGroup
	ctr   Counters

	resolveTimeout time.Duration

	mu     sync.Mutex
	tab    *cm.Table
	out    cm.Output
	lis    map[uint64]Handler
	conns  map[uint32]Handler
	ud     map[uint32]UDRoute        // UD resolutions waiting for their SIDR_REP
	local  map[netip.Addr]netip.Addr // peer -> our address it talks to (learned from REQs and Connect)
	closed bool
}

// maxLocal bounds the peer -> local address memory; past it, it starts over.
const maxLocal = 4096

// New starts the agent of dev and takes dev's CM MADs (nic.Device.SetCMHandler).
func New(dev *nic.Device, cfg Config) *Agent {
	if cfg.Clock == nil {
		cfg.Clock = transport.SystemClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.RxQueue <= 0 {
		cfg.RxQueue = 256
	}
	if cfg.ResolveTimeout <= 0 {
		cfg.ResolveTimeout = 2 * time.Second
	}
	if cfg.CM.LocalCAGUID == 0 {
		cfg.CM.LocalCAGUID = dev.Attr().NodeGUID
	}
	if cfg.CM.HiTID == 0 {
		cfg.CM.HiTID = rand.Uint32()
	}
	a := &Agent{dev: dev, clock: cfg.Clock, log: cfg.Log, rx: make(chan nic.MAD, cfg.RxQueue),
		kick: make(chan struct{}, 1), done: make(chan struct{}),
		tab: cm.NewTable(cfg.CM, cfg.Clock), lis: map[uint64]Handler{}, conns: map[uint32]Handler{}, ud: map[uint32]UDRoute{},
		local: map[netip.Addr]netip.Addr{}, resolveTimeout: cfg.ResolveTimeout}
	dev.SetCMHandler(a.input)
	a.wg.Add(1)
	go a.run()
	return a
}

// Close stops the agent; the device's CM MADs are dropped from then on.
// Connections are not disconnected (the daemon is going away).
func (a *Agent) Close() {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	a.closed = true
	a.mu.Unlock()
	a.dev.SetCMHandler(nil)
	close(a.done)
	a.wg.Wait()
}

// Counters are the agent's own counters.
func (a *Agent) Counters() *Counters { return &a.ctr }

// TableCounters is a copy of the CM Table's counters.
func (a *Agent) TableCounters() cm.Counters {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tab.Counters()
}

// Config is the Table's configuration, defaults filled in.
func (a *Agent) Config() cm.Config {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tab.Config()
}

// input is the device's CM handler: it queues the MAD for run, never
// blocking the receive path.
func (a *Agent) input(m *nic.MAD) {
	select {
	case a.rx <- *m:
	default:
		a.ctr.RxQueueDrops.Add(1)
	}
}

// run is the agent's goroutine: received MADs and the Table's timer, a
// timer of the injected clock (so that it follows a manual one too).
func (a *Agent) run() {
	defer a.wg.Done()
	wake := make(chan struct{}, 1)
	fire := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	var t clock.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		select {
		case <-a.done:
			return
		case m := <-a.rx:
			a.mu.Lock()
			a.learn(m.From, m.To)
			if err := a.tab.Receive(m.From, m.Data[:], &a.out); err != nil {
				a.log.Debug("CM MAD refused", "from", m.From, "err", err)
			}
			a.flush()
			a.mu.Unlock()
		case <-wake:
			a.mu.Lock()
			a.tab.OnTimer(a.clock.Now(), &a.out)
			a.flush()
			a.mu.Unlock()
		case <-a.kick:
		}
		t = a.rearm(t, fire)
	}
}

// rearm stops t and returns a timer that calls fire at the Table's next
// deadline, or nil when no connection waits for time. A stopped timer that
// fired anyway only makes run call OnTimer early, which runs nothing not
// due.
func (a *Agent) rearm(t clock.Timer, fire func()) clock.Timer {
	if t != nil {
		t.Stop()
	}
	a.mu.Lock()
	at, ok := a.tab.NextWake()
	now := a.clock.Now()
	a.mu.Unlock()
	if !ok {
		return nil
	}
	return a.clock.AfterFunc(max(at.Sub(now), 0), fire)
}

// poke has run look at the Table's deadline again after a consumer call.
func (a *Agent) poke() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// learn remembers which of our addresses peer talks to, the source of what
// we send it.
func (a *Agent) learn(peer, local netip.Addr) {
	peer, local = peer.Unmap(), local.Unmap()
	if !peer.IsValid() || !local.IsValid() || a.local[peer] == local {
		return
	}
	if len(a.local) >= maxLocal {
		clear(a.local)
	}
	a.local[peer] = local
}

// flush does what the Table's output asks, in its order: QP transitions,
// MADs, events (with the lock held). A refused connect request adds a REJ
// to the output while events are delivered: a second round sends it.
func (a *Agent) flush() {
	for range 2 {
		if len(a.out.Modify)+len(a.out.Sends)+len(a.out.Events) == 0 {
			return
		}
		a.flushOnce()
	}
}

func (a *Agent) flushOnce() {
	for _, m := range a.out.Modify {
		a.log.Debug("CM QP transition", "qpn", m.QPN, "id", m.ID, "state", m.State)
		if err := a.modify(m); err != nil {
			a.ctr.ModifyErrors.Add(1)
			// The connection goes on with the QP short of RTS: its sends
			// will fail, which the client sees; the log says why.
			a.log.Warn("CM QP transition failed", "qpn", m.QPN, "state", m.State, "err", err)
		}
	}
	for i := range a.out.Sends {
		s := &a.out.Sends[i]
		if err := a.dev.SendMAD(&nic.MAD{From: a.local[s.To.Unmap()], To: s.To, Data: s.MAD}); err != nil {
			a.ctr.SendErrors.Add(1)
			a.log.Debug("CM MAD not sent", "to", s.To, "err", err)
		}
	}
	evs := slices.Clone(a.out.Events)
	a.out.Reset()
	for _, ev := range evs {
		a.log.Debug("CM event", "id", ev.ID, "kind", ev.Kind)
		a.deliver(ev)
	}
}

// deliver hands ev to its listener's or connection's handler. A connect
// request's connection takes its listener's handler until Accept or
// Reject; a connection the Table has forgotten loses its handler.
func (a *Agent) deliver(ev cm.Event) {
	ev.PrivateData = slices.Clone(ev.PrivateData)
	ev.ARI = slices.Clone(ev.ARI)
	if ev.Request != nil {
		r := *ev.Request
		ev.Request = &r
		if h := a.lis[r.Listener]; h != nil {
			a.conns[ev.ID] = h
		}
	}
	c, live := a.tab.Conn(ev.ID)
	h := a.conns[ev.ID]
	if !live {
		delete(a.conns, ev.ID)
	}
	var ud *UDRoute
	if r, ok := a.ud[ev.ID]; ok {
		ud = &r
		if !live {
			delete(a.ud, ev.ID)
		}
	}
	if h == nil {
		return
	}
	if h(Event{Event: ev, Conn: c, UD: ud}) || !live {
		return
	}
	a.log.Debug("CM request refused by its consumer", "id", ev.ID, "kind", ev.Kind)
	switch ev.Kind {
	case cm.EventConnectRequest:
		delete(a.conns, ev.ID)
		_ = a.tab.Reject(ev.ID, mad.RejConsumerDefined, nil, nil, &a.out)
	case cm.EventSIDRRequest:
		delete(a.conns, ev.ID)
		_ = a.rejectSIDR(ev.ID, nil, &a.out)
	}
}

// modify applies one transition the Table agreed to our QP, as rdma_cm's
// cma_modify_qp_rtr / cma_modify_qp_rts / cma_modify_qp_err do.
func (a *Agent) modify(m cm.QPModify) error {
	q, ok := a.dev.QP(m.QPN)
	if !ok {
		return fmt.Errorf("%w: %#x", nic.ErrNoSuchQPN, m.QPN)
	}
	cur, _ := q.Query()
	rc := q.Info().Type == transport.QPTypeRC
	at := &m.Attr
	var attr transport.QPAttr
	var mask transport.AttrMask
	switch m.State {
	case cm.QPStateInit:
		attr = transport.QPAttr{State: transport.StateInit, AccessFlags: accessOf(at.AccessFlags)}
		mask = transport.AttrState | transport.AttrAccessFlags
		switch cur.State {
		case transport.StateReset:
			attr.Port = 1
			mask |= transport.AttrPort | transport.AttrPKeyIndex
		case transport.StateInit:
		default:
			return nil // already past INIT (a REP or RTU resent): nothing to redo
		}
	case cm.QPStateRTR:
		if cur.State != transport.StateInit {
			return nil
		}
		av, err := a.pathAV(at)
		if err != nil {
			return err
		}
		attr = transport.QPAttr{State: transport.StateRTR, AV: av, PathMTU: transport.MTU(at.PathMTU),
			DestQPN: at.DestQPN, RQPSN: at.RQPSN, MaxDestRdAtomic: at.MaxDestRdAtomic, MinRNRTimer: at.MinRNRTimer}
		mask = transport.AttrState | transport.AttrAV | transport.AttrPathMTU | transport.AttrDestQPN | transport.AttrRQPSN
		if rc {
			mask |= transport.AttrMaxDestRdAtomic | transport.AttrMinRNRTimer
		}
	case cm.QPStateRTS:
		if cur.State != transport.StateRTR {
			return nil
		}
		attr = transport.QPAttr{State: transport.StateRTS, SQPSN: at.SQPSN, Timeout: at.Timeout,
			RetryCnt: at.RetryCount, RNRRetry: at.RNRRetry, MaxRdAtomic: at.MaxRdAtomic}
		mask = transport.AttrState | transport.AttrSQPSN
		if rc {
			mask |= transport.AttrTimeout | transport.AttrRetryCnt | transport.AttrRNRRetry | transport.AttrMaxQPRdAtomic
		}
	case cm.QPStateErr:
		if cur.State == transport.StateReset || cur.State == transport.StateErr {
			return nil
		}
		attr, mask = transport.QPAttr{State: transport.StateErr}, transport.AttrState
	default:
		return fmt.Errorf("cmagent: QP state %v", m.State)
	}
	if m.State != cm.QPStateErr {
		return q.Modify(&attr, mask)
	}
	// A disconnect must not overtake the QP's own traffic (nic.QP.Quiesce;
	// the worker never waits on the agent). Before the move: what reached
	// the QP ahead of the DREQ (the ACK of our last SEND) is handled, not
	// flushed. After it: the ACKs the QP owes leave before our DREQ or
	// DREP.
	q.Quiesce()
	if err := q.Modify(&attr, mask); err != nil {
		return err
	}
	q.Quiesce()
	return nil
}

// accessOf is the CM's remote access as the transport's (the same ibverbs bits).
func accessOf(f uint32) mem.Access {
	return mem.Access(f) & (mem.RemoteWrite | mem.RemoteRead | mem.RemoteAtomic)
}

// pathAV is the address vector of the path the CM agreed: the GIDs are the
// IP addresses; the SGID index is our address's.
func (a *Agent) pathAV(at *cm.QPAttr) (transport.AddressVector, error) { return a.PathAV(&at.Path) }

// PathAV is the address vector of path p seen from this side, as the CM
// gives it a QP at RTR (rdma_init_qp_attr's ah_attr).
func (a *Agent) PathAV(p *mad.Path) (transport.AddressVector, error) {
	idx, ok := a.dev.GIDs().Index(gid.GID(p.LocalGID))
	if !ok {
		return transport.AddressVector{}, fmt.Errorf("%w: path source %v is not ours", ErrAddr, cm.AddrFromGID(p.LocalGID))
	}
	return transport.AddressVector{DGID: p.RemoteGID, SGIDIndex: uint8(idx), HopLimit: p.HopLimit,
		TrafficClass: p.TrafficClass, FlowLabel: p.FlowLabel, Port: 1}, nil
}

// Errors of the consumer API.
var (
	ErrClosed = errors.New("cmagent: closed")
	ErrAddr   = errors.New("cmagent: address not usable")
	// ErrUnresolved: the destination's link address did not resolve
	// (rdma_cm's ADDR_ERROR).
	ErrUnresolved = errors.New("cmagent: address not resolved")
	// ErrFamily: a source and destination of different families
	// (rdma_resolve_addr's EINVAL).
	ErrFamily = errors.New("cmagent: source and destination of different address families")
	// ErrInvalidDst: a destination that is not a unicast address.
	ErrInvalidDst = errors.New("cmagent: destination not a unicast address")
)
