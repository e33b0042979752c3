package cmagent

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vrnic/vrnicd/nic/gid"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/cm"
	"github.com/vrnic/vrnicd/transport/wire"
)

// ErrMcastIPv6 is the kernel's answer to an IPv6 group over RoCEv2
// (cma_iboe_join_multicast: ENOTSUPP): rdma_cm joins IPv4 groups only.
var ErrMcastIPv6 = errors.New("cmagent: rdma_cm joins IPv4 multicast groups only over RoCEv2")

// McastHopLimit is the hop limit of a RoCEv2 group's path (the kernel's
// IPV6_DEFAULT_HOPLIMIT in cma_iboe_join_multicast).
const McastHopLimit = 64

// McastJoin is a group joined through rdma_cm, as its MULTICAST_JOIN
// event gives it (event->param.ud): the path to the group, its QPN
// (0xFFFFFF) and the Q_Key of its messages.
type McastJoin struct {
	Group    netip.Addr
	MGID     gid.GID
	AV       transport.AddressVector // DGID the MGID, hop limit 64, traffic class 0
	QPN      uint32
	QKey     uint32
	SendOnly bool
}

// JoinMulticast is rdma_join_multicast on RoCEv2 (the kernel's
// cma_iboe_join_multicast): group, an IPv4 multicast address, maps to the
// MGID ::ffff:group; src (zero: the port's IPv4 address) is the source.
// A full member makes the port a member of the group on its link (IGMP)
// until LeaveMulticast; a send-only one does not. Attaching the consumer's
// QP is the consumer's (librdmacm does it on the event).
func (a *Agent) JoinMulticast(src, group netip.Addr, sendOnly bool) (McastJoin, error) {
	group = group.Unmap()
	if !group.IsMulticast() {
		return McastJoin{}, fmt.Errorf("%w: %v is not a multicast group", ErrInvalidDst, group)
	}
	if !group.Is4() {
		return McastJoin{}, fmt.Errorf("%w: %v", ErrMcastIPv6, group)
	}
	from, err := a.source(src, group)
	if err != nil {
		return McastJoin{}, err
	}
	idx, ok := a.dev.GIDs().IndexOf(from)
	if !ok {
		return McastJoin{}, fmt.Errorf("%w: %v is not one of the port's addresses", ErrAddr, from)
	}
	mgid := gid.FromAddr(group)
	if !sendOnly {
		if err := a.dev.HoldGroup(mgid); err != nil {
			return McastJoin{}, err
		}
	}
	return McastJoin{Group: group, MGID: mgid, QPN: wire.MulticastQPN, QKey: cm.UDPQKey, SendOnly: sendOnly,
		AV: transport.AddressVector{DGID: mgid, SGID: gid.FromAddr(from), SGIDIndex: uint8(idx), HopLimit: McastHopLimit,
			Port: 1}}, nil
}

// LeaveMulticast ends a JoinMulticast: a full member's hold on the port's
// membership goes.
func (a *Agent) LeaveMulticast(j McastJoin) {
	if !j.SendOnly {
		a.dev.ReleaseGroup(j.MGID)
	}
}
