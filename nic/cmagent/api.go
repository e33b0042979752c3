package cmagent

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/cm"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
)

// Listen takes connect requests for an rdma_cm port (PortSpaceTCP when
// portSpace is 0) on addr, or on any of our addresses when addr is zero or
// unspecified; h gets the requests and, until Accept or Reject names
// another, their connections' events.
func (a *Agent) Listen(portSpace, port uint16, addr netip.Addr, h Handler) (uint64, error) {
	if portSpace == 0 {
		portSpace = cm.PortSpaceTCP
	}
	if addr.IsUnspecified() {
		addr = netip.Addr{}
	}
	if addr.IsValid() {
		if _, ok := a.dev.GIDs().IndexOf(addr); !ok {
			return 0, fmt.Errorf("%w: %v is not one of the port's addresses", ErrAddr, addr)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return 0, ErrClosed
	}
	l, err := a.tab.Listen(cm.ServiceID(portSpace, port), addr)
	if err != nil {
		return 0, err
	}
	a.lis[l] = h
	return l, nil
}

// Unlisten stops a listener; requests already delivered stay.
func (a *Agent) Unlisten(l uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.tab.Unlisten(l)
	delete(a.lis, l)
}

// ConnParams are rdma_conn_param's fields the consumer sets.
type ConnParams struct {
	RespRes     uint8 // responder_resources
	InitDepth   uint8 // initiator_depth
	RetryCount  uint8 // retry_count, 0-7
	RNRRetry    uint8 // rnr_retry_count, 0-7 (7: infinite)
	PrivateData []byte
	// Manual: the consumer moves the QP itself (rdma_cm with no QP on the
	// id): the agent never modifies it; Connect's REP comes as
	// CONNECT_RESPONSE and Establish sends the RTU; Accept expects the
	// QP in RTS already. PSN is then our starting PSN (what the consumer
	// gave the QP as rq_psn); otherwise the agent picks one.
	Manual bool
	PSN    uint32
}

// psn is the starting PSN for p: the consumer's when it moves the QP, else
// a random one as rdma_cm's.
func (p *ConnParams) psn() uint32 {
	if p.Manual {
		return p.PSN & 0xFFFFFF
	}
	return rand.Uint32() & 0xFFFFFF
}

// Connect sends a REQ for qp (RC or UC, in RESET or INIT) to the rdma_cm
// listener at dst (TCP port space), from src: its address, or the port's
// address of dst's family when zero; its port, or an ephemeral one when 0.
// The QP is taken to INIT, RTR and RTS when the REP comes. h gets the
// connection's events.
//
// The destination's link address is resolved first (ARP or ND through the
// port, rdma_resolve_addr), for at most Config.ResolveTimeout or until ctx
// ends: ErrUnresolved if it does not answer.
func (a *Agent) Connect(ctx context.Context, src, dst netip.AddrPort, qp *nic.QP, p ConnParams, h Handler) (uint32, error) {
	typ, err := qpService(qp, p.Manual)
	if err != nil {
		return 0, err
	}
	from, to, err := a.route(src.Addr(), dst)
	if err != nil {
		return 0, err
	}
	if err := a.resolve(ctx, to, a.resolveTimeout); err != nil {
		return 0, err
	}
	sport := src.Port()
	if sport == 0 {
		sport = ephemeralPort()
	}
	cp := cm.ConnectParams{
		Src: netip.AddrPortFrom(from, sport), Dst: netip.AddrPortFrom(to, dst.Port()), QPType: typ,
		QPN: qp.QPN(), PSN: p.psn(), RespRes: p.RespRes, InitDepth: p.InitDepth,
		RetryCount: p.RetryCount, RNRRetry: p.RNRRetry, PathMTU: uint8(a.dev.ActiveMTU()),
		SRQ: qp.Engine().SRQ() != nil, PrivateData: p.PrivateData, Manual: p.Manual,
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return 0, ErrClosed
	}
	a.learn(to, from)
	id, err := a.tab.Connect(cp, &a.out)
	if err != nil {
		a.out.Reset()
		return 0, err
	}
	a.conns[id] = h
	a.flush()
	a.poke()
	return id, nil
}

// resolve waits until the port knows to's link address, looking at the
// neighbour table every resolvePoll (netstack answers ARP and ND on its own
// goroutine), for at most timeout by the agent's clock, or until ctx ends.
func (a *Agent) resolve(ctx context.Context, to netip.Addr, timeout time.Duration) error {
	if a.dev.NeighborKnown(to) {
		return nil
	}
	a.dev.ResolveNeighbor(to)
	expired := make(chan struct{})
	deadline := a.clock.AfterFunc(timeout, func() { close(expired) })
	defer deadline.Stop()
	tick := make(chan struct{}, 1)
	for !a.dev.NeighborKnown(to) {
		t := a.clock.AfterFunc(resolvePoll, func() { tick <- struct{}{} })
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: %v: %w", ErrUnresolved, to, ctx.Err())
		case <-expired:
			t.Stop()
			return fmt.Errorf("%w: %v did not answer in %v", ErrUnresolved, to, timeout)
		case <-tick:
		}
	}
	return nil
}

// resolvePoll is how often resolve looks at the neighbour table.
const resolvePoll = 2 * time.Millisecond

// ResolvedAddr is what ResolveAddr found: the port's address a connection
// to Dst uses and the index of its GID.
type ResolvedAddr struct {
	Dst, Src  netip.Addr
	SGIDIndex int
}

// ResolveAddr is rdma_resolve_addr: it picks the source for dst (src when
// given, which must be one of the port's addresses, else the port's
// address of dst's family, as Connect picks it) and resolves dst's link
// address (ARP or ND) as Connect does first, for at most timeout (0 or
// more than Config.ResolveTimeout: Config.ResolveTimeout) or until ctx
// ends. Errors: ErrFamily (src and dst of different families),
// ErrInvalidDst (dst zero or unspecified), ErrAddr (src not the port's,
// or no address of dst's family), ErrUnresolved (nobody answered). A
// multicast dst resolves at once, as the kernel's does (mckey resolves
// its group before it joins).
func (a *Agent) ResolveAddr(ctx context.Context, src, dst netip.Addr, timeout time.Duration) (ResolvedAddr, error) {
	ra, err := a.ResolveSource(src, dst)
	if err != nil {
		return ResolvedAddr{}, err
	}
	if timeout <= 0 || timeout > a.resolveTimeout {
		timeout = a.resolveTimeout
	}
	if ra.Dst.IsMulticast() {
		return ra, nil // a group has no neighbour: its MAC comes from its address (the kernel's ip_eth_mc_map)
	}
	if err := a.resolve(ctx, ra.Dst, timeout); err != nil {
		return ResolvedAddr{}, err
	}
	return ra, nil
}

// ResolveSource is ResolveAddr without the network: it checks dst and src
// and picks the source, with the errors ResolveAddr gives for them.
func (a *Agent) ResolveSource(src, dst netip.Addr) (ResolvedAddr, error) {
	to, from := dst.Unmap(), src.Unmap()
	if !to.IsValid() || to.IsUnspecified() {
		return ResolvedAddr{}, fmt.Errorf("%w: %v", ErrInvalidDst, dst)
	}
	if from.IsValid() && !from.IsUnspecified() && from.Is4() != to.Is4() {
		return ResolvedAddr{}, fmt.Errorf("%w: %v and %v", ErrFamily, from, to)
	}
	from, err := a.source(from, to)
	if err != nil {
		return ResolvedAddr{}, err
	}
	idx, ok := a.dev.GIDs().IndexOf(from)
	if !ok {
		return ResolvedAddr{}, fmt.Errorf("%w: %v is not one of the port's addresses", ErrAddr, from)
	}
	return ResolvedAddr{Dst: to, Src: from, SGIDIndex: idx}, nil
}

// ephemeralPort is an rdma_cm ephemeral port, from Linux's default
// ip_local_port_range (32768-60999), as cma_alloc_any_port picks one.
func ephemeralPort() uint16 { return uint16(32768 + rand.IntN(60999-32768+1)) }

// route checks dst and picks the source address for it (src when given,
// which must be ours and of dst's family), for Connect and ResolveUD.
func (a *Agent) route(src netip.Addr, dst netip.AddrPort) (from, to netip.Addr, err error) {
	to = dst.Addr().Unmap()
	if !to.IsValid() || to.IsUnspecified() || to.IsMulticast() || dst.Port() == 0 {
		return from, to, fmt.Errorf("%w: destination %v", ErrAddr, dst)
	}
	from, err = a.source(src, to)
	return from, to, err
}

// source is route's choice of our address for to: src when given (ours,
// of to's family), else the port's address of to's family.
func (a *Agent) source(src, to netip.Addr) (netip.Addr, error) {
	from := src.Unmap()
	if !from.IsValid() || from.IsUnspecified() {
		var ok bool
		if from, ok = a.dev.SourceFor(to); !ok {
			return from, fmt.Errorf("%w: no address of %v's family", ErrAddr, to)
		}
	} else if _, ok := a.dev.GIDs().IndexOf(from); !ok {
		return from, fmt.Errorf("%w: %v is not one of the port's addresses", ErrAddr, from)
	}
	if from.Is4() != to.Is4() {
		return from, fmt.Errorf("%w: %v cannot reach %v", ErrAddr, from, to)
	}
	return from, nil
}

// qpService is the REQ transport service type of qp, which must be RC or
// UC and, unless its consumer moves it (manual), not yet past INIT.
func qpService(qp *nic.QP, manual bool) (uint8, error) {
	if qp == nil {
		return 0, fmt.Errorf("%w: no QP", transport.ErrInvalid)
	}
	in := qp.Info()
	if !manual && in.State != transport.StateReset && in.State != transport.StateInit {
		return 0, fmt.Errorf("%w: QP %#x is %v, not RESET or INIT", transport.ErrState, qp.QPN(), in.State)
	}
	switch in.Type {
	case transport.QPTypeRC:
		return mad.ServiceRC, nil
	case transport.QPTypeUC:
		return mad.ServiceUC, nil
	}
	return 0, fmt.Errorf("%w: QP %#x of type %v: rdma_cm connects RC and UC QPs", transport.ErrInvalid, qp.QPN(), in.Type)
}

// Accept answers connect request id with a REP for qp (RESET or INIT),
// which goes to INIT, RTR and RTS first; h (nil: the listener's) gets the
// connection's events from now on.
func (a *Agent) Accept(id uint32, qp *nic.QP, p ConnParams, h Handler) error {
	if _, err := qpService(qp, p.Manual); err != nil {
		return err
	}
	ap := cm.AcceptParams{QPN: qp.QPN(), PSN: p.psn(), RespRes: p.RespRes, InitDepth: p.InitDepth,
		RNRRetry: p.RNRRetry, SRQ: qp.Engine().SRQ() != nil, PrivateData: p.PrivateData, Manual: p.Manual}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return ErrClosed
	}
	if err := a.tab.Accept(id, ap, &a.out); err != nil {
		a.out.Reset()
		return err
	}
	if h != nil {
		a.conns[id] = h
	}
	a.flush()
	a.poke()
	return nil
}

// Establish sends the RTU of Manual connection id after its
// CONNECT_RESPONSE, once the consumer has its QP in RTS (rdma_establish).
func (a *Agent) Establish(id uint32) error {
	return a.call(id, func(out *cm.Output) error { return a.tab.Establish(id, out) })
}

// Reject refuses connect request id as rdma_reject does: REJ reason 28
// "consumer defined" with the private data; a SIDR request gets a SIDR_REP
// with status "rejected" instead.
func (a *Agent) Reject(id uint32, priv []byte) error {
	return a.call(id, func(out *cm.Output) error {
		if a.isSIDRRequest(id) {
			return a.rejectSIDR(id, priv, out)
		}
		return a.tab.Reject(id, mad.RejConsumerDefined, nil, priv, out)
	})
}

// Disconnect ends connection id as rdma_disconnect does (DREQ, or the DREP
// of the peer's DREQ, or REJ of an unfinished exchange).
func (a *Agent) Disconnect(id uint32, priv []byte) error {
	return a.call(id, func(out *cm.Output) error { return a.tab.Disconnect(id, priv, out) })
}

// Release stops the events of connection id (its consumer is gone); the
// Table keeps it until its exchange is over.
func (a *Agent) Release(id uint32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.conns, id)
	delete(a.ud, id)
}

// Conn is a copy of connection id.
func (a *Agent) Conn(id uint32) (cm.Conn, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tab.Conn(id)
}

func (a *Agent) call(id uint32, f func(out *cm.Output) error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return ErrClosed
	}
	if err := f(&a.out); err != nil {
		a.out.Reset()
		return fmt.Errorf("connection %#x: %w", id, err)
	}
	a.flush()
	a.poke()
	return nil
}

// Snapshot is a copy of the agent's connections (by local comm ID) and
// listeners, as Agent.Snapshot takes them.
type Snapshot struct {
	Conns     []cm.Conn
	Listeners []cm.Listener
}

// Snapshot copies the Table's connections and listeners under the lock;
// nothing is called out with it held.
func (a *Agent) Snapshot() Snapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	return Snapshot{Conns: a.tab.Conns(), Listeners: a.tab.Listeners()}
}
