package verbs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/vrnic/vrnicd/verbsock"
)

// rdma_cm, shaped after librdmacm: a Listener takes connect requests
// (rdma_listen, rdma_get_request), a Conn is one connection (rdma_cm_id)
// with its event channel; Dial is rdma_resolve_addr + rdma_resolve_route +
// rdma_connect, Accept/Reject/Disconnect are rdma_accept, rdma_reject and
// rdma_disconnect; ResolveAddr is rdma_resolve_addr alone. The daemon runs
// the CM protocol and moves the QP: pass it in RESET or INIT (INIT to post
// receives before the connection is up: CreateCMQP makes it so, as
// rdma_create_qp does); it is in RTS once Dial or Accept returns and in
// ERR after a disconnect. The peer's private data and what the exchange
// agreed stay on the Conn (PrivateData, Params).

// CMEventType is enum rdma_cm_event_type.
type CMEventType = verbsock.CMEventType

// rdma_cm event types.
const (
	CMEventConnectRequest = verbsock.CMEventConnectRequest
	CMEventUnreachable    = verbsock.CMEventUnreachable
	CMEventRejected       = verbsock.CMEventRejected
	CMEventEstablished    = verbsock.CMEventEstablished
	CMEventDisconnected   = verbsock.CMEventDisconnected
	CMEventTimewaitExit   = verbsock.CMEventTimewaitExit
	CMEventAddrError      = verbsock.CMEventAddrError
	CMEventRouteError     = verbsock.CMEventRouteError
	CMEventConnectError   = verbsock.CMEventConnectError
)

// REJ reasons a consumer meets (IBA Table 112).
const (
	RejectInvalidService  = 8  // nobody listens on the port (rping -c to an unused port)
	RejectConsumerDefined = 28 // the listener called Reject
)

// Private data room rdma_cm gives consumers over RoCE.
const (
	ConnectPrivateLen = verbsock.CMConnectPrivateLen // REQ, after the cma_hdr
	AcceptPrivateLen  = verbsock.CMAcceptPrivateLen  // REP
	RejectPrivateLen  = verbsock.CMRejectPrivateLen  // REJ
)

// ConnParams are struct rdma_conn_param's fields.
type ConnParams struct {
	ResponderResources uint8 // RDMA READs/atomics the peer may have outstanding at us
	InitiatorDepth     uint8 // RDMA READs/atomics we may have outstanding at the peer
	RetryCount         uint8 // 0-7
	RNRRetryCount      uint8 // 0-7, 7: forever
	PrivateData        []byte
}

// ConnInfo is what the exchange agreed, as an event reports it: for a
// connect request the peer's asks, afterwards our QP's settings.
type ConnInfo struct {
	RemoteQPN          uint32
	ResponderResources uint8
	InitiatorDepth     uint8
	RetryCount         uint8
	RNRRetryCount      uint8
	PathMTU            MTU
	SRQ                bool
	// A resolved UD peer's (ResolveUD): its Q_Key and the path to it.
	QKey uint32
	AH   AHAttr
}

// CMEvent is one rdma_cm event (struct rdma_cm_event).
type CMEvent struct {
	Type CMEventType
	// Status is rdma_cm's: REJECTED the REJ reason, UNREACHABLE -ETIMEDOUT.
	Status      int
	PrivateData []byte
	Peer, Local netip.AddrPort
	Info        ConnInfo
	// Conn is, for CONNECT_REQUEST, the new connection to Accept or Reject.
	Conn *Conn
}

// RejectedError is a Dial refused by the peer: REJ with its reason and
// private data.
type RejectedError struct {
	Reason      int
	PrivateData []byte
}

func (e *RejectedError) Error() string {
	switch e.Reason {
	case RejectInvalidService:
		return "rdma_cm: rejected (REJ reason 8, invalid service ID: nothing listens on that port of the server)"
	case RejectConsumerDefined:
		return "rdma_cm: rejected (REJ reason 28: the listener refused the connection)"
	}
	return fmt.Sprintf("rdma_cm: rejected (REJ reason %d)", e.Reason)
}

// Event is the rdma_cm event a Dial refused this way delivers in librdmacm
// (REJECTED, status the REJ reason).
func (e *RejectedError) Event() CMEvent {
	return CMEvent{Type: CMEventRejected, Status: e.Reason, PrivateData: e.PrivateData}
}

// AddrError is a Dial or ResolveUD whose destination's link address did
// not resolve: nobody answered ARP or neighbour discovery within the
// daemon's resolution timeout. librdmacm reports this as the ADDR_ERROR
// event of rdma_resolve_addr, status -ETIMEDOUT; errors.Is(err,
// syscall.EHOSTUNREACH) holds too.
type AddrError struct {
	Addr netip.Addr // the destination
	Err  error      // the daemon's answer (EHOSTUNREACH)
}

func (e *AddrError) Error() string {
	return fmt.Sprintf("rdma_cm: address %v not resolved (ARP/ND): %v", e.Addr, e.Err)
}

func (e *AddrError) Unwrap() error { return e.Err }

// Event is rdma_cm's ADDR_ERROR with status -ETIMEDOUT.
func (e *AddrError) Event() CMEvent {
	return CMEvent{Type: CMEventAddrError, Status: -int(syscall.ETIMEDOUT), Peer: netip.AddrPortFrom(e.Addr, 0)}
}

// addrErr turns the daemon's EHOSTUNREACH for dst into an *AddrError.
func addrErr(err error, dst netip.Addr) error {
	if errors.Is(err, syscall.EHOSTUNREACH) {
		return &AddrError{Addr: dst.Unmap(), Err: err}
	}
	return err
}

// ErrUnreachable: the peer never answered (CM retries exhausted).
var ErrUnreachable = &verbsock.Error{Op: verbsock.OpCMConnect, Errno: syscall.ETIMEDOUT, Msg: "rdma_cm: peer unreachable"}

// cmEventQueue is the buffer of each listener's and connection's events.
// The daemon sends a handful per connection; one that overflows (nobody
// reads) is dropped.
const cmEventQueue = 64

// listenBacklog is the buffer of each listener's connect requests, as
// rdma_listen(id, 0)'s backlog: the kernel's default (rdma_ucm
// max_backlog, 1024), the daemon's per-client bound on connections as
// well. A request past it is rejected rather than left unanswered.
const listenBacklog = 1024

type cmState struct {
	mu       sync.Mutex
	next     uint64
	byCtx    map[uint64]any // *Listener or *Conn
	byHandle map[uint32]*Conn
}

func (s *cmState) add(v any) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byCtx == nil {
		s.byCtx, s.byHandle = map[uint64]any{}, map[uint32]*Conn{}
	}
	s.next++
	s.byCtx[s.next] = v
	return s.next
}

// Listener takes connect requests on a port.
type Listener struct {
	d      *Device
	h      uint32
	ctx    uint64
	events chan CMEvent
	once   sync.Once
}

// Listen listens on addr (address zero or unspecified: every address of
// the device) for rdma_cm connect requests of the TCP port space
// (rdma_create_id(RDMA_PS_TCP) + rdma_bind_addr + rdma_listen).
func (d *Device) Listen(addr netip.AddrPort) (*Listener, error) {
	return d.listen(addr, 0)
}

func (d *Device) listen(addr netip.AddrPort, portSpace uint16) (*Listener, error) {
	l := &Listener{d: d, events: make(chan CMEvent, listenBacklog)}
	l.ctx = d.cm.add(l)
	req := verbsock.CMListenReq{Context: l.ctx, Port: addr.Port(), PortSpace: portSpace}
	if a := addr.Addr(); a.IsValid() && !a.IsUnspecified() {
		req.Addr = a.As16()
	}
	var resp verbsock.CMListenResp
	if _, err := d.call(verbsock.OpCMListen, &req, nil, &resp); err != nil {
		d.cm.drop(l.ctx)
		return nil, err
	}
	l.h = resp.Listener
	return l, nil
}

// Events delivers the listener's CONNECT_REQUEST events (each with its
// Conn); it is closed when the device closes.
func (l *Listener) Events() <-chan CMEvent { return l.events }

// Accept waits for the next connect request (rdma_get_request).
func (l *Listener) Accept(ctx context.Context) (*Conn, CMEvent, error) {
	select {
	case ev, ok := <-l.events:
		if !ok {
			return nil, CMEvent{}, ErrClosed
		}
		return ev.Conn, ev, nil
	case <-ctx.Done():
		return nil, CMEvent{}, ctx.Err()
	}
}

// Close stops listening; requests already delivered stay.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		_, err = l.d.call(verbsock.OpCMUnlisten, &verbsock.HandleReq{Handle: l.h}, nil, &verbsock.Empty{})
		l.d.cm.drop(l.ctx)
	})
	return err
}

// Conn is one rdma_cm connection (rdma_cm_id).
type Conn struct {
	d      *Device
	h      uint32
	ctx    uint64
	qp     *QP
	events chan CMEvent
	once   sync.Once

	mu   sync.Mutex
	priv []byte   // +checklocks:mu
	info ConnInfo // +checklocks:mu
}

// PrivateData is the private data the peer sent to make the connection,
// as librdmacm's event hands it over (the whole field, zero-padded past
// what the peer wrote): for a Conn from Dial the REP's, what the server
// passed to Accept (AcceptPrivateLen bytes: the ESTABLISHED event's
// param.conn.private_data, which Dial consumes); for a Conn of a connect
// request the REQ's after the cma_hdr (ConnectPrivateLen bytes, as in its
// CONNECT_REQUEST event). The slice is the caller's.
func (c *Conn) PrivateData() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte(nil), c.priv...)
}

// Params is what the connection's exchange agreed once Dial or Accept has
// returned, as the ESTABLISHED event reports it (librdmacm's
// event->param.conn): the peer's QPN, our QP's responder resources and
// initiator depth, its retry counts, the path MTU, whether the peer uses
// an SRQ. For a connect request not yet accepted, the peer's asks (its
// CONNECT_REQUEST event's).
func (c *Conn) Params() ConnInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.info
}

// established files what the ESTABLISHED event ev says; keepPriv keeps the
// private data of the connect request (a passive side's RTU brings none
// that rdma_cm reports).
func (c *Conn) established(ev *CMEvent, keepPriv bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.info = ev.Info
	if !keepPriv {
		c.priv = ev.PrivateData
	}
}

// Events delivers the connection's events after Dial or Accept returns
// (DISCONNECTED, TIMEWAIT_EXIT, ...); it is closed when the device closes.
func (c *Conn) Events() <-chan CMEvent { return c.events }

// QP is the connection's QP (nil before Accept).
func (c *Conn) QP() *QP { return c.qp }

// Dial connects qp (RC or UC, in RESET or INIT: CreateCMQP) to the
// rdma_cm listener at addr and waits until the connection is established,
// rejected (*RejectedError), unreachable (ErrUnreachable) or ctx is done
// (then it is destroyed). An address whose link address does not resolve
// (ARP/ND, the daemon's resolution timeout) fails with an *AddrError,
// rdma_cm's ADDR_ERROR. Private data: at most ConnectPrivateLen bytes. The
// ESTABLISHED event is Dial's: the Conn keeps its private data (the
// server's, from Accept) and parameters (PrivateData, Params).
func (d *Device) Dial(ctx context.Context, addr netip.AddrPort, qp *QP, p ConnParams) (*Conn, error) {
	if qp == nil {
		return nil, verr(verbsock.OpCMConnect, syscall.EINVAL, "no QP")
	}
	if len(p.PrivateData) > ConnectPrivateLen {
		return nil, verr(verbsock.OpCMConnect, syscall.EINVAL, "%d bytes of private data, room for %d", len(p.PrivateData), ConnectPrivateLen)
	}
	c := &Conn{d: d, qp: qp, events: make(chan CMEvent, cmEventQueue)}
	c.ctx = d.cm.add(c)
	req := verbsock.CMConnectReq{Context: c.ctx, QP: qp.h, Dst: addr.Addr().As16(), DstPort: addr.Port(), Params: wireParams(&p)}
	var resp verbsock.CMConnectResp
	if _, err := d.call(verbsock.OpCMConnect, &req, nil, &resp); err != nil {
		d.cm.drop(c.ctx)
		return nil, addrErr(err, addr.Addr())
	}
	c.h = resp.Conn
	d.cm.setHandle(c)
	ev, err := c.await(ctx, CMEventEstablished)
	if err != nil {
		c.Close()
		return nil, err
	}
	c.established(&ev, false)
	qp.state.Store(uint32(QPStateRTS))
	return c, nil
}

// await waits for want, or an event that ends the attempt.
func (c *Conn) await(ctx context.Context, want CMEventType) (CMEvent, error) {
	for {
		select {
		case ev, ok := <-c.events:
			if !ok {
				return CMEvent{}, ErrClosed
			}
			switch ev.Type {
			case want:
				return ev, nil
			case CMEventRejected:
				return ev, &RejectedError{Reason: ev.Status, PrivateData: ev.PrivateData}
			case CMEventUnreachable, CMEventConnectError, CMEventAddrError, CMEventRouteError:
				return ev, ErrUnreachable
			}
		case <-ctx.Done():
			return CMEvent{}, ctx.Err()
		}
	}
}

// Accept answers a connect request with qp (RC or UC, in RESET or INIT:
// CreateCMQP), which is in RTS when the REP leaves, and waits for the RTU
// (ESTABLISHED; Params has its parameters then). Private data: at most
// AcceptPrivateLen bytes; the peer's Dial hands it to its caller
// (Conn.PrivateData).
func (c *Conn) Accept(ctx context.Context, qp *QP, p ConnParams) error {
	if qp == nil {
		return verr(verbsock.OpCMAccept, syscall.EINVAL, "no QP")
	}
	if len(p.PrivateData) > AcceptPrivateLen {
		return verr(verbsock.OpCMAccept, syscall.EINVAL, "%d bytes of private data, room for %d", len(p.PrivateData), AcceptPrivateLen)
	}
	c.qp = qp
	req := verbsock.CMAcceptReq{Context: c.ctx, Conn: c.h, QP: qp.h, Params: wireParams(&p)}
	if _, err := c.d.call(verbsock.OpCMAccept, &req, nil, &verbsock.Empty{}); err != nil {
		return err
	}
	qp.state.Store(uint32(QPStateRTS))
	ev, err := c.await(ctx, CMEventEstablished)
	if err == nil {
		c.established(&ev, true)
	}
	return err
}

// Reject refuses a connect request (REJ reason 28 with privateData, at
// most RejectPrivateLen bytes) and destroys the connection. A SIDR request
// (ListenUD) gets a SIDR_REP with status SIDRRejected instead, with at most
// AcceptUDPrivateLen bytes.
func (c *Conn) Reject(privateData []byte) error {
	if len(privateData) > RejectPrivateLen {
		return verr(verbsock.OpCMReject, syscall.EINVAL, "%d bytes of private data, room for %d", len(privateData), RejectPrivateLen)
	}
	req := verbsock.CMRejectReq{Conn: c.h, PrivateLen: uint8(len(privateData))}
	copy(req.Private[:], privateData)
	_, err := c.d.call(verbsock.OpCMReject, &req, nil, &verbsock.Empty{})
	c.Close()
	return err
}

// Disconnect starts the disconnect (rdma_disconnect): DREQ, or the DREP of
// the peer's; the QP goes to ERR. DISCONNECTED and TIMEWAIT_EXIT follow on
// Events.
func (c *Conn) Disconnect() error {
	_, err := c.d.call(verbsock.OpCMDisconnect, &verbsock.HandleReq{Handle: c.h}, nil, &verbsock.Empty{})
	if err == nil && c.qp != nil {
		c.qp.state.Store(uint32(QPStateErr))
	}
	return err
}

// Close destroys the connection (rdma_destroy_id): the daemon disconnects
// it if it is still up. The QP stays the caller's.
func (c *Conn) Close() error {
	var err error
	c.once.Do(func() {
		_, err = c.d.call(verbsock.OpCMDestroy, &verbsock.HandleReq{Handle: c.h}, nil, &verbsock.Empty{})
		if errors.Is(err, ErrClosed) {
			err = nil
		}
		c.d.cm.drop(c.ctx)
		c.d.cm.mu.Lock()
		delete(c.d.cm.byHandle, c.h)
		c.d.cm.mu.Unlock()
	})
	return err
}

// CreateCMQP is rdma_create_qp: a QP of attr, readied for rdma_cm as
// rdma_create_qp leaves it (cma.c cma_init_conn_qp, cma_ib_init_qp_attr).
// An RC or UC QP is in INIT on port 1, P_Key index 0, access flags 0, so
// that receives can be posted before Dial or Accept; a UD QP is in RTS
// with Q_Key UDQKey (cma_init_ud_qp; see ReadyUD). The QP is destroyed if
// a step fails.
//
// The access flags of a connected QP are the CM's: Dial and Accept have
// the daemon move it to INIT again on its way to RTR with remote write,
// and with remote read and atomics too when the connection's responder
// resources (Params().ResponderResources: ConnParams.ResponderResources,
// bounded by the peer's initiator depth) are not 0, as ib_cm's
// cm_init_qp_init_attr gives them (cma_modify_qp_rtr).
func (pd *PD) CreateCMQP(attr QPInitAttr) (*QP, error) {
	qp, err := pd.CreateQP(attr)
	if err != nil {
		return nil, err
	}
	switch attr.Type {
	case QPTypeUD:
		err = ReadyUD(qp)
	default:
		err = qp.Modify(&QPAttr{State: QPStateInit, PKeyIndex: 0, Port: 1, AccessFlags: 0},
			QPAttrState|QPAttrPKeyIndex|QPAttrPort|QPAttrAccessFlags)
	}
	if err != nil {
		_ = qp.Destroy()
		return nil, err
	}
	return qp, nil
}

// ResolvedAddr is what ResolveAddr found (rdma_resolve_addr's
// ADDR_RESOLVED): the device's address a connection to Dst uses
// (rdma_get_local_addr) and the index of its GID on port 1.
type ResolvedAddr struct {
	Dst, Src  netip.Addr
	SGIDIndex int
}

// ResolveAddr is rdma_resolve_addr: it picks the device's address for dst
// (src when valid and not unspecified, which must be one of the device's
// and of dst's family) and resolves dst's link address (ARP or ND) as
// Dial does first. The daemon waits at most its resolution timeout (2 s by
// default), less if ctx has an earlier deadline; ctx's end returns its
// error at once. Nobody answering is an *AddrError (EHOSTUNREACH,
// librdmacm's ADDR_ERROR with status -ETIMEDOUT); a src that is not the
// device's EADDRNOTAVAIL; src and dst of different families, or a dst that
// is not unicast, EINVAL. Nothing is kept: connecting is Dial's.
func (d *Device) ResolveAddr(ctx context.Context, dst, src netip.Addr) (ResolvedAddr, error) {
	if err := ctx.Err(); err != nil {
		return ResolvedAddr{}, err
	}
	req := verbsock.CMResolveAddrReq{Dst: dst.As16()} // the zero Addr: zeros, which the daemon refuses
	if src.IsValid() && !src.IsUnspecified() {
		req.Src = src.As16()
	}
	if dl, ok := ctx.Deadline(); ok {
		ms := (time.Until(dl) + time.Millisecond - 1) / time.Millisecond
		req.TimeoutMS = uint32(min(max(ms, 1), time.Duration(^uint32(0))))
	}
	type result struct {
		r   verbsock.CMResolveAddrResp
		err error
	}
	done := make(chan result, 1)
	d.helpers.Go(func() {
		var res result
		_, res.err = d.call(verbsock.OpCMResolveAddr, &req, nil, &res.r)
		done <- res
	})
	select {
	case res := <-done:
		if res.err != nil {
			return ResolvedAddr{}, addrErr(res.err, dst)
		}
		return ResolvedAddr{Dst: dst.Unmap(), Src: netip.AddrFrom16(res.r.Src).Unmap(), SGIDIndex: int(res.r.SGIDIndex)}, nil
	case <-ctx.Done():
		return ResolvedAddr{}, ctx.Err() // the daemon's answer, bounded by its timeout, is dropped
	}
}

func wireParams(p *ConnParams) verbsock.CMConnParams {
	w := verbsock.CMConnParams{RespRes: p.ResponderResources, InitDepth: p.InitiatorDepth, RetryCount: p.RetryCount,
		RNRRetry: p.RNRRetryCount}
	w.PrivateLen = uint8(copy(w.PrivateData[:], p.PrivateData))
	return w
}

func (s *cmState) drop(ctx uint64) {
	s.mu.Lock()
	delete(s.byCtx, ctx)
	s.mu.Unlock()
}

func (s *cmState) setHandle(c *Conn) {
	s.mu.Lock()
	s.byHandle[c.h] = c
	s.mu.Unlock()
}

// deliverCM routes a CM event from the reader: a connect request to its
// listener (with a new Conn), anything else to its connection by context,
// or by handle for a request not yet accepted.
func (d *Device) deliverCM(p []byte) {
	var m verbsock.CMEventMsg
	if verbsock.Decode(p, &m) != nil {
		return
	}
	ev := CMEvent{Type: m.Type, Status: int(m.Status), PrivateData: append([]byte(nil), m.Private[:min(int(m.PrivateLen), len(m.Private))]...),
		Peer: netip.AddrPortFrom(netip.AddrFrom16(m.Peer).Unmap(), m.PeerPort), Local: netip.AddrPortFrom(netip.AddrFrom16(m.Local).Unmap(), m.LocalPort),
		Info: ConnInfo{RemoteQPN: m.RemoteQPN, ResponderResources: m.RespRes, InitiatorDepth: m.InitDepth, RetryCount: m.RetryCount,
			RNRRetryCount: m.RNRRetry, PathMTU: MTU(m.PathMTU), SRQ: m.SRQ != 0, QKey: m.QKey, AH: verbsock.AVFromWire(&m.AH)}}
	s := &d.cm
	s.mu.Lock()
	var ch chan CMEvent
	switch o := s.byCtx[m.Context].(type) {
	case *Listener:
		if m.Type == CMEventConnectRequest {
			c := &Conn{d: d, h: m.Conn, events: make(chan CMEvent, cmEventQueue),
				priv: slices.Clone(ev.PrivateData), info: ev.Info}
			c.ctx = s.next + 1
			s.next++
			s.byCtx[c.ctx] = c
			s.byHandle[c.h] = c
			ev.Conn, ch = c, o.events
		} else if c := s.byHandle[m.Conn]; c != nil {
			ch = c.events
		}
	case *Conn:
		ch = o.events
		if m.Type == CMEventDisconnected && o.qp != nil {
			o.qp.state.Store(uint32(QPStateErr))
		}
	}
	s.mu.Unlock()
	if ch != nil {
		select {
		case ch <- ev:
		default: // nobody reads this connection's events
			if ev.Conn != nil {
				// A connect request past the backlog: refuse it (REJ)
				// so the peer does not wait for an answer that never
				// comes. Not on the reader's goroutine, which the
				// call's response needs.
				d.helpers.Go(func() { _ = ev.Conn.Reject(nil) })
			}
		}
	}
}

// closeCM closes every listener's and connection's event channel (the
// reader is ending).
func (d *Device) closeCM() {
	s := &d.cm
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.byCtx {
		switch o := o.(type) {
		case *Listener:
			close(o.events)
		case *Conn:
			close(o.events)
		}
	}
	s.byCtx, s.byHandle = map[uint64]any{}, map[uint32]*Conn{}
}
