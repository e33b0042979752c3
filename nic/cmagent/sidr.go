package cmagent

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/cm"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
)

// UD over SIDR (rdma_cm's RDMA_PS_UDP): the active side resolves a UD
// peer with a SIDR_REQ and learns its QPN and Q_Key from the SIDR_REP
// (cma.c cma_resolve_ib_udp, cma_sidr_rep_handler); the passive side's
// listener on the UDP port space gets EventSIDRRequest and answers it with
// AcceptUD or Reject (cma_send_sidr_rep). No QP changes state: a UD QP is
// in RTS before either side asks (rdma_create_qp does it for PS_UDP).

// udHopLimit is the hop limit of the address vector a resolution gives, as
// the kernel's route for an on-link peer has it (the TTL of its IP route).
const udHopLimit = 64

// UDRoute is a UD resolution's two ends and the address vector from ours
// to the peer's.
type UDRoute struct {
	Src, Dst netip.AddrPort
	AV       transport.AddressVector
}

// ResolveUD sends a SIDR_REQ for the rdma_cm UDP-port-space service at dst
// from src (address zero: the port's of dst's family; port 0: an
// ephemeral one), with the cma_hdr and at most cm.SIDRREQUserPrivateLen
// bytes of priv after it. The answer comes to h as EventSIDRResolved (its
// SIDR field: status, QPN, Q_Key) or, after the CM retries,
// EventUnreachable, both with the UDRoute: its address vector is the path
// to the peer a UD sender needs (rdma_cm's event->param.ud.ah_attr).
//
// The destination's link address is resolved first, as for Connect.
func (a *Agent) ResolveUD(ctx context.Context, src, dst netip.AddrPort, priv []byte, h Handler) (uint32, UDRoute, error) {
	from, to, err := a.route(src.Addr(), dst)
	if err != nil {
		return 0, UDRoute{}, err
	}
	if err := a.resolve(ctx, to, a.resolveTimeout); err != nil {
		return 0, UDRoute{}, err
	}
	sport := src.Port()
	if sport == 0 {
		sport = ephemeralPort()
	}
	p := cm.SIDRParams{Src: netip.AddrPortFrom(from, sport), Dst: netip.AddrPortFrom(to, dst.Port()), PrivateData: priv}
	av, err := a.udPath(p.Src, p.Dst)
	if err != nil {
		return 0, UDRoute{}, err
	}
	r := UDRoute{Src: p.Src, Dst: p.Dst, AV: av}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return 0, UDRoute{}, ErrClosed
	}
	a.learn(to, from)
	id, err := a.tab.ResolveSIDR(p, &a.out)
	if err != nil {
		a.out.Reset()
		return 0, UDRoute{}, err
	}
	a.conns[id] = h
	// Kept for the answer's event: the SIDR_REP may be delivered before
	// the caller has looked at what this returns.
	a.ud[id] = r
	a.flush()
	a.poke()
	return id, r, nil
}

// udPath is the address vector from src to dst: the GIDs are the
// addresses, the flow label rdma_cm's hash of the ports (so the RoCEv2
// source port is what a kernel sender on the same route would use).
func (a *Agent) udPath(src, dst netip.AddrPort) (transport.AddressVector, error) {
	idx, ok := a.dev.GIDs().IndexOf(src.Addr())
	if !ok {
		return transport.AddressVector{}, fmt.Errorf("%w: %v is not one of the port's addresses", ErrAddr, src.Addr())
	}
	return transport.AddressVector{DGID: cm.GIDFromAddr(dst.Addr()), SGIDIndex: uint8(idx), HopLimit: udHopLimit,
		FlowLabel: cm.RoCEFlowLabel(src.Port(), dst.Port()), Port: 1}, nil
}

// AcceptUD answers SIDR request id with a SIDR_REP (status valid) naming
// qp, a UD QP, and its Q_Key (cm.UDPQKey when rdma_cm made it), with at
// most cm.SIDRREPPrivateLen bytes of priv. The request is over then: SIDR
// has no connection.
func (a *Agent) AcceptUD(id uint32, qp *nic.QP, priv []byte) error {
	if qp == nil {
		return fmt.Errorf("%w: no QP", transport.ErrInvalid)
	}
	if typ := qp.Info().Type; typ != transport.QPTypeUD {
		return fmt.Errorf("%w: QP %#x of type %v: SIDR answers with a UD QP", transport.ErrInvalid, qp.QPN(), typ)
	}
	attr, _ := qp.Query()
	ans := cm.SIDRAnswer{Status: mad.SIDRValid, QPN: qp.QPN(), QKey: attr.QKey}
	return a.call(id, func(out *cm.Output) error { return a.tab.AnswerSIDR(id, ans, priv, out) })
}

// rejectSIDR refuses SIDR request id as rdma_reject does for a UD ID: a
// SIDR_REP with status "rejected" (cma.c cma_send_sidr_rep,
// IB_SIDR_REJECT). Lock held.
func (a *Agent) rejectSIDR(id uint32, priv []byte, out *cm.Output) error {
	return a.tab.AnswerSIDR(id, cm.SIDRAnswer{Status: mad.SIDRRejected}, priv, out)
}

// isSIDRRequest reports whether connection id is a SIDR request waiting
// for its answer. Lock held.
func (a *Agent) isSIDRRequest(id uint32) bool {
	c, ok := a.tab.Conn(id)
	return ok && c.State == cm.StateSIDRREQRcvd
}
