package server

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/nic/cmagent"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/cm"
	"github.com/vrnic/vrnicd/verbsock"
)

// CMLimits bound one client's rdma_cm objects. Zero fields take the
// defaults.
type CMLimits struct {
	MaxListens int // default 64
	MaxConns   int // connections of every state, connect requests not yet answered included; default 1024
	EventQueue int // CM events waiting for the client's socket, and for each event channel's; default 1024
	// MaxChannels bounds event channels (librdmacm's synchronous ids have
	// one each); default 1024.
	MaxChannels int
	// MaxResolving bounds address resolutions in progress; default 1024,
	// as MaxConns: cmtime resolves its 100 ids at once, and the kernel has
	// no such bound.
	MaxResolving int
	// MaxJoins bounds multicast groups joined through rdma_cm; default 1024.
	MaxJoins int
}

func (l CMLimits) withDefaults() CMLimits {
	if l.MaxListens <= 0 {
		l.MaxListens = 64
	}
	if l.MaxConns <= 0 {
		l.MaxConns = 1024
	}
	if l.EventQueue <= 0 {
		l.EventQueue = 1024
	}
	if l.MaxChannels <= 0 {
		l.MaxChannels = 1024
	}
	if l.MaxResolving <= 0 {
		l.MaxResolving = 1024
	}
	if l.MaxJoins <= 0 {
		l.MaxJoins = 1024
	}
	return l
}

// cmClient is one client's rdma_cm state: its listeners, connections and
// event channels by handle (one namespace), and the queue of the CM events
// for its own socket. The agent's handlers fill it (with the agent's lock
// held: they only queue); the request loop reads it.
type cmClient struct {
	mu        sync.Mutex
	next      uint32
	listens   map[uint32]*cmListen
	conns     map[uint32]*cmConn
	chans     map[uint32]*cmChannel
	joins     map[uint32]cmagent.McastJoin // rdma_cm multicast joins (cmmcast.go)
	byID      map[uint32]*cmConn           // agent connection ID -> connection, for the listener's handler
	events    chan verbsock.CMEventMsg
	lost      uint64
	resolving int // cm_resolve_addr_async in progress
	started   bool
	gone      bool
}

type cmListen struct {
	handle uint32
	id     uint64 // the agent's listener
	ctx    uint64
	ch     *cmChannel // where its events go (nil: the client's socket)
}

type cmConn struct {
	handle   uint32
	id       uint32 // the agent's connection ID
	ctx      uint64
	listener uint32
	peer     netip.AddrPort
	local    netip.AddrPort
	ud       bool       // a UD resolution or SIDR request
	ch       *cmChannel // where its events go (nil: the client's socket)
}

// dispatchCM runs the rdma_cm operations; ok is false for any other.
func (c *conn) dispatchCM(op verbsock.Op, req any) (resp any, ok bool, err error) {
	switch op {
	case verbsock.OpCMListen, verbsock.OpCMUnlisten, verbsock.OpCMConnect, verbsock.OpCMAccept,
		verbsock.OpCMReject, verbsock.OpCMDisconnect, verbsock.OpCMDestroy, verbsock.OpCMResolveUD, verbsock.OpCMAcceptUD,
		verbsock.OpCMResolveAddr, verbsock.OpCMCloseChannel, verbsock.OpCMMigrate, verbsock.OpCMResolveAddrAsync,
		verbsock.OpCMEstablish, verbsock.OpCMJoin, verbsock.OpCMLeave:
	default:
		return nil, false, nil
	}
	a := c.s.cfg.CM
	if a == nil {
		return nil, true, errf(syscall.EOPNOTSUPP, "%v: the daemon runs no connection manager", op)
	}
	c.cmStart()
	switch op {
	case verbsock.OpCMListen:
		resp, err = c.cmListen(a, req.(*verbsock.CMListenReq))
	case verbsock.OpCMUnlisten:
		resp, err = &verbsock.Empty{}, c.cmUnlisten(a, req.(*verbsock.HandleReq).Handle)
	case verbsock.OpCMConnect:
		resp, err = c.cmConnect(a, req.(*verbsock.CMConnectReq))
	case verbsock.OpCMAccept:
		resp, err = &verbsock.Empty{}, c.cmAccept(a, req.(*verbsock.CMAcceptReq))
	case verbsock.OpCMReject:
		r := req.(*verbsock.CMRejectReq)
		resp, err = &verbsock.Empty{}, c.cmWithConn(r.Conn, func(k *cmConn) error {
			return a.Reject(k.id, r.Private[:min(int(r.PrivateLen), len(r.Private))])
		})
	case verbsock.OpCMDisconnect:
		resp, err = &verbsock.Empty{}, c.cmWithConn(req.(*verbsock.HandleReq).Handle, func(k *cmConn) error {
			return a.Disconnect(k.id, nil)
		})
	case verbsock.OpCMDestroy:
		resp, err = &verbsock.Empty{}, c.cmDestroy(a, req.(*verbsock.HandleReq).Handle)
	case verbsock.OpCMResolveUD:
		resp, err = c.cmResolveUD(a, req.(*verbsock.CMResolveUDReq))
	case verbsock.OpCMAcceptUD:
		resp, err = &verbsock.Empty{}, c.cmAcceptUD(a, req.(*verbsock.CMAcceptUDReq))
	case verbsock.OpCMResolveAddr:
		resp, err = cmResolveAddr(c.ctx, a, req.(*verbsock.CMResolveAddrReq))
	case verbsock.OpCMCloseChannel:
		resp, err = &verbsock.Empty{}, c.cmChannelClose(req.(*verbsock.HandleReq).Handle)
	case verbsock.OpCMMigrate:
		resp, err = &verbsock.Empty{}, c.cmMigrate(req.(*verbsock.CMMigrateReq))
	case verbsock.OpCMEstablish:
		resp, err = &verbsock.Empty{}, c.cmWithConn(req.(*verbsock.HandleReq).Handle, func(k *cmConn) error {
			return a.Establish(k.id)
		})
	case verbsock.OpCMResolveAddrAsync:
		resp, err = &verbsock.Empty{}, c.cmResolveAddrAsync(a, req.(*verbsock.CMResolveAddrAsyncReq))
	case verbsock.OpCMJoin:
		resp, err = c.cmJoin(a, req.(*verbsock.CMJoinReq))
	case verbsock.OpCMLeave:
		resp, err = &verbsock.Empty{}, c.cmLeave(a, req.(*verbsock.HandleReq).Handle)
	}
	return resp, true, cmErr(err)
}

// cmStart makes the client's CM state and its event writer on first use
// (request loop only).
func (c *conn) cmStart() {
	k := &c.cm
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.started {
		return
	}
	k.started = true
	k.listens, k.conns, k.byID = map[uint32]*cmListen{}, map[uint32]*cmConn{}, map[uint32]*cmConn{}
	k.chans = map[uint32]*cmChannel{}
	k.joins = map[uint32]cmagent.McastJoin{}
	k.next = 1
	k.events = make(chan verbsock.CMEventMsg, c.s.cmLimits.EventQueue)
	c.wg.Add(1)
	go c.cmWriter()
}

// cmWriter sends the client's CM events until it goes.
func (c *conn) cmWriter() {
	defer c.wg.Done()
	for {
		select {
		case <-c.done:
			return
		case ev := <-c.cm.events:
			err := c.sock.Write(verbsock.Header{Version: verbsock.Version, Op: verbsock.OpCMEvent, Flags: verbsock.FlagEvent},
				verbsock.Encode(nil, &ev), nil, c.s.cfg.WriteTimeout)
			if err != nil {
				c.sock.Close() // a client that does not read its socket is gone
				return
			}
		}
	}
}

func (c *conn) cmListen(a *cmagent.Agent, r *verbsock.CMListenReq) (any, error) {
	k := &c.cm
	k.mu.Lock()
	if len(k.listens) >= c.s.cmLimits.MaxListens {
		k.mu.Unlock()
		return nil, quota("rdma_cm listeners", uint64(c.s.cmLimits.MaxListens))
	}
	ch, err := k.channel(r.Channel)
	if err != nil {
		k.mu.Unlock()
		return nil, err
	}
	l := &cmListen{handle: k.next, ctx: r.Context, ch: ch}
	k.next++
	k.mu.Unlock()
	addr := netip.AddrFrom16(r.Addr).Unmap()
	if r.Addr == [16]byte{} {
		addr = netip.Addr{}
	}
	id, err := a.Listen(r.PortSpace, r.Port, addr, func(e cmagent.Event) bool { return c.cmListenEvent(l, e) })
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	l.id = id
	k.listens[l.handle] = l
	k.mu.Unlock()
	return &verbsock.CMListenResp{Listener: l.handle}, nil
}

func (c *conn) cmUnlisten(a *cmagent.Agent, h uint32) error {
	k := &c.cm
	k.mu.Lock()
	l := k.listens[h]
	delete(k.listens, h)
	k.mu.Unlock()
	if l == nil {
		return noObj("rdma_cm listener", h)
	}
	a.Unlisten(l.id)
	return nil
}

// cmListenEvent takes a listener's events: connect requests become new
// connections of the client (refused past its limit); the events of a
// request not yet accepted go to its connection.
func (c *conn) cmListenEvent(l *cmListen, e cmagent.Event) bool {
	k := &c.cm
	k.mu.Lock()
	request := e.Kind == cm.EventConnectRequest || e.Kind == cm.EventSIDRRequest
	if !request {
		cn := k.byID[e.ID]
		k.mu.Unlock()
		if cn != nil {
			c.cmConnEvent(cn, e)
		}
		return true
	}
	if k.gone || len(k.conns) >= c.s.cmLimits.MaxConns || e.Request == nil {
		c.log.Debug("rdma_cm request refused", "listener", l.handle, "gone", k.gone, "conns", len(k.conns))
		k.mu.Unlock()
		return false
	}
	cn := &cmConn{handle: k.next, id: e.ID, ctx: l.ctx, listener: l.handle, peer: e.Request.Src, local: e.Request.Dst,
		ud: e.Kind == cm.EventSIDRRequest, ch: l.ch}
	k.next++
	k.conns[cn.handle] = cn
	k.byID[cn.id] = cn
	k.mu.Unlock()
	c.cmConnEvent(cn, e)
	return true
}

// cmConnEvent queues a connection's event for the client.
func (c *conn) cmConnEvent(cn *cmConn, e cmagent.Event) bool {
	k := &c.cm
	k.mu.Lock()
	defer k.mu.Unlock()
	if e.Conn.ID == 0 {
		delete(k.byID, cn.id) // the agent has forgotten it
	}
	if k.gone || !c.ready.Load() {
		return true
	}
	c.cmSend(cn.ch, cmEventMsg(c.s.cfg.CM, cn, e))
	return true
}

// cmEventMsg is e as the client sees it.
func cmEventMsg(a *cmagent.Agent, cn *cmConn, e cmagent.Event) verbsock.CMEventMsg {
	typ, status := e.RDMACMEvent()
	m := verbsock.CMEventMsg{Type: verbsock.CMEventType(typ), Status: int32(status), Context: cn.ctx, Conn: cn.handle,
		Peer: cn.peer.Addr().As16(), PeerPort: cn.peer.Port(), Local: cn.local.Addr().As16(), LocalPort: cn.local.Port()}
	if e.Kind == cm.EventConnectRequest || e.Kind == cm.EventSIDRRequest {
		m.Listener = cn.listener
	}
	if e.SIDR != nil {
		m.RemoteQPN, m.QKey = e.SIDR.QPN, e.SIDR.QKey
	}
	if e.UD != nil {
		m.AH = verbsock.AVToWire(&e.UD.AV)
	}
	if r := e.Request; r != nil {
		m.RemoteQPN, m.RespRes, m.InitDepth, m.RetryCount, m.RNRRetry, m.PathMTU = r.RemoteQPN, r.RespRes, r.InitDepth,
			r.RetryCount, r.RNRRetry, r.PathMTU
		m.SRQ = b2u8(r.SRQ)
	} else if k := e.Conn; k.ID != 0 {
		m.RemoteQPN, m.RespRes, m.InitDepth, m.RetryCount, m.RNRRetry, m.PathMTU = k.RemoteQPN, k.RespRes, k.InitDepth,
			k.RetryCount, k.RNRRetry, k.PathMTU
		m.SRQ = b2u8(k.SRQ)
	}
	if k := e.Conn; k.ID != 0 && !cn.ud {
		// what rdma_init_qp_attr gives a QP at RTR and RTS (ib_cm's
		// PSN convention: ours is the one we receive)
		m.Timeout, m.RQPSN, m.SQPSN = k.Timeout, k.PSN, k.RemotePSN
		if av, err := a.PathAV(&k.Path); err == nil {
			m.AH = verbsock.AVToWire(&av)
		}
	}
	m.PrivateLen = uint8(copy(m.Private[:], e.PrivateData))
	return m
}

func b2u8(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func (c *conn) cmConnect(a *cmagent.Agent, r *verbsock.CMConnectReq) (any, error) {
	o, err := c.qp(r.QP)
	if err != nil {
		return nil, err
	}
	if err := c.checkDepths(&r.Params); err != nil {
		return nil, err
	}
	if r.PortSpace != 0 && r.PortSpace != cm.PortSpaceTCP {
		return nil, errf(syscall.EPROTONOSUPPORT, "port space %#x: connections are RDMA_PS_TCP's", r.PortSpace)
	}
	k := &c.cm
	k.mu.Lock()
	if len(k.conns) >= c.s.cmLimits.MaxConns {
		k.mu.Unlock()
		return nil, quota("rdma_cm connections", uint64(c.s.cmLimits.MaxConns))
	}
	ch, err := k.channel(r.Channel)
	if err != nil {
		k.mu.Unlock()
		return nil, err
	}
	cn := &cmConn{handle: k.next, ctx: r.Context, peer: netip.AddrPortFrom(netip.AddrFrom16(r.Dst).Unmap(), r.DstPort), ch: ch}
	k.next++
	k.conns[cn.handle] = cn // held now: events may come before Connect returns
	k.mu.Unlock()
	src := netip.Addr{}
	if r.Src != [16]byte{} {
		src = netip.AddrFrom16(r.Src).Unmap()
	}
	p := connParams(&r.Params, verbsock.CMConnectPrivateLen)
	id, err := a.Connect(c.ctx, netip.AddrPortFrom(src, r.SrcPort), cn.peer, o.qp.Load(), p,
		func(e cmagent.Event) bool { return c.cmConnEvent(cn, e) })
	var local netip.AddrPort
	if err == nil {
		if conn, ok := a.Conn(id); ok { // before k.mu: the agent's lock comes first
			local = netip.AddrPortFrom(cm.AddrFromGID(conn.Path.LocalGID), 0)
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil {
		delete(k.conns, cn.handle)
		return nil, err
	}
	cn.id, cn.local = id, local
	return &verbsock.CMConnectResp{Conn: cn.handle}, nil
}

// cmResolveAddr is rdma_resolve_addr: the request loop waits for the
// resolution as cm_connect's does, for at most the agent's resolution
// timeout. It keeps nothing: the client passes the source it learns to
// cm_connect.
func cmResolveAddr(ctx context.Context, a *cmagent.Agent, r *verbsock.CMResolveAddrReq) (any, error) {
	src := netip.Addr{}
	if r.Src != [16]byte{} {
		src = netip.AddrFrom16(r.Src)
	}
	ra, err := a.ResolveAddr(ctx, src, netip.AddrFrom16(r.Dst),
		time.Duration(r.TimeoutMS)*time.Millisecond)
	if err != nil {
		return nil, err
	}
	return &verbsock.CMResolveAddrResp{Src: ra.Src.As16(), SGIDIndex: uint32(ra.SGIDIndex)}, nil
}

// checkDepths refuses RDMA READ and atomic depths past the device's, as
// librdmacm's ucma_valid_param does: the QP could not take them at RTR/RTS.
func (c *conn) checkDepths(w *verbsock.CMConnParams) error {
	if w.Flags&^verbsock.CMManualQP != 0 {
		return errf(syscall.EINVAL, "rdma_cm connection flags %#x", w.Flags)
	}
	a := c.s.dev.Attr()
	if int(w.RespRes) > a.MaxQPRdAtom || int(w.InitDepth) > a.MaxQPInitRdAtom {
		return errf(syscall.EINVAL, "responder_resources %d, initiator_depth %d: the device takes at most %d and %d",
			w.RespRes, w.InitDepth, a.MaxQPRdAtom, a.MaxQPInitRdAtom)
	}
	return nil
}

func connParams(w *verbsock.CMConnParams, maxPriv int) cmagent.ConnParams {
	return cmagent.ConnParams{RespRes: w.RespRes, InitDepth: w.InitDepth, RetryCount: w.RetryCount, RNRRetry: w.RNRRetry,
		PrivateData: w.PrivateData[:min(int(w.PrivateLen), maxPriv, len(w.PrivateData))],
		Manual:      w.Flags&verbsock.CMManualQP != 0, PSN: w.PSN}
}

func (c *conn) cmAccept(a *cmagent.Agent, r *verbsock.CMAcceptReq) error {
	o, err := c.qp(r.QP)
	if err != nil {
		return err
	}
	if err := c.checkDepths(&r.Params); err != nil {
		return err
	}
	return c.cmWithConn(r.Conn, func(cn *cmConn) error {
		if r.Context != 0 {
			c.cm.mu.Lock()
			cn.ctx = r.Context
			c.cm.mu.Unlock()
		}
		return a.Accept(cn.id, o.qp.Load(), connParams(&r.Params, verbsock.CMAcceptPrivateLen),
			func(e cmagent.Event) bool { return c.cmConnEvent(cn, e) })
	})
}

func (c *conn) cmWithConn(h uint32, f func(*cmConn) error) error {
	c.cm.mu.Lock()
	cn := c.cm.conns[h]
	c.cm.mu.Unlock()
	if cn == nil {
		return noObj("rdma_cm connection", h)
	}
	return f(cn)
}

// cmDestroy is rdma_destroy_id: the connection stops reporting, and one
// still up or half made is disconnected (DREQ) or rejected.
func (c *conn) cmDestroy(a *cmagent.Agent, h uint32) error {
	k := &c.cm
	k.mu.Lock()
	cn := k.conns[h]
	if cn != nil {
		delete(k.conns, h)
		delete(k.byID, cn.id)
	}
	k.mu.Unlock()
	if cn == nil {
		return noObj("rdma_cm connection", h)
	}
	a.Release(cn.id)
	_ = a.Disconnect(cn.id, nil) // ErrNoConn: over already
	return nil
}

// cmCleanup tears down a departed client's listeners and connections: no
// more requests for it; its connections are disconnected or rejected.
func (c *conn) cmCleanup() {
	a := c.s.cfg.CM
	k := &c.cm
	k.mu.Lock()
	k.gone = true
	listens, conns, joins := k.listens, k.conns, k.joins
	for _, ch := range k.chans {
		ch.dead = true
		close(ch.quit)
	}
	k.listens, k.conns, k.byID, k.chans, k.joins = nil, nil, nil, nil, nil
	k.mu.Unlock()
	if a == nil {
		return
	}
	for _, j := range joins {
		a.LeaveMulticast(j)
	}
	for _, l := range listens {
		a.Unlisten(l.id)
	}
	for _, cn := range conns {
		a.Release(cn.id)
		_ = a.Disconnect(cn.id, nil)
	}
}

// cmErr gives the agent's and the CM's errors their errno.
func cmErr(err error) error {
	var ve *verbsock.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ve):
		return err
	case errors.Is(err, cm.ErrNoConn):
		return errf(syscall.ENOENT, "%v", err)
	case errors.Is(err, cm.ErrListening):
		return errf(syscall.EADDRINUSE, "%v", err)
	case errors.Is(err, cm.ErrQPInUse):
		return errf(syscall.EBUSY, "%v", err)
	case errors.Is(err, cm.ErrTableFull):
		return errf(syscall.ENOMEM, "%v", err)
	case errors.Is(err, cmagent.ErrUnresolved):
		return errf(syscall.EHOSTUNREACH, "%v", err)
	case errors.Is(err, cmagent.ErrFamily), errors.Is(err, cmagent.ErrInvalidDst):
		return errf(syscall.EINVAL, "%v", err)
	case errors.Is(err, cmagent.ErrAddr):
		return errf(syscall.EADDRNOTAVAIL, "%v", err)
	case errors.Is(err, cmagent.ErrClosed):
		return errf(syscall.ENODEV, "%v", err)
	case errors.Is(err, cmagent.ErrMcastIPv6):
		return errf(errENOTSUPP, "%v", err)
	case errors.Is(err, nic.ErrLimit):
		return errf(syscall.ENOMEM, "%v", err)
	case errors.Is(err, cm.ErrState), errors.Is(err, transport.ErrState):
		return errf(syscall.EINVAL, "%v", err)
	}
	return errf(syscall.EINVAL, "%v", err)
}
