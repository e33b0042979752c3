package verbs

import (
	"net/netip"
	"sync"

	"github.com/vrnic/vrnicd/verbsock"
)

// McastGroup is a multicast group joined through the daemon's rdma_cm
// (rdma_join_multicast): what its MULTICAST_JOIN event gives, and Leave.
//
//   - Group: the IPv4 group; MGID: its GID (::ffff:group), what a QP attaches to.
//   - AH: the path to the group (its DGID the MGID, hop limit 64): make the
//     address handle of sends with it, and send to QPN (0xFFFFFF) with QKey.
//   - QKey: rdma_cm's UD Q_Key (0x01234567), which receiving QPs must have.
//   - Local: the device's address the join is from.
type McastGroup struct {
	Group    netip.Addr
	MGID     GID
	AH       AHAttr
	QPN      uint32
	QKey     uint32
	Local    netip.Addr
	SendOnly bool

	d    *Device
	h    uint32
	once sync.Once
}

// JoinOptions are rdma_join_multicast_ex's: Src the device's address to
// join from (zero: the device's IPv4 address); SendOnly a send-only full
// member, which sends to the group but does not receive (the device does
// not join the group on its link).
type JoinOptions struct {
	Src      netip.Addr
	SendOnly bool
}

// JoinMulticast joins the IPv4 multicast group (rdma_join_multicast on
// RoCEv2, as the kernel's: an IPv6 group fails with the kernel's ENOTSUPP,
// errno 524; a group that is not multicast is EINVAL). A full member's
// device joins the group on its link (IGMP) until Leave; to receive, attach
// a UD QP with Q_Key QKey to MGID (QP.AttachMcast), as librdmacm does on
// the join event.
func (d *Device) JoinMulticast(group netip.Addr, o JoinOptions) (*McastGroup, error) {
	req := verbsock.CMJoinReq{Group: group.As16()}
	if o.Src.IsValid() && !o.Src.IsUnspecified() {
		req.Src = o.Src.As16()
	}
	if o.SendOnly {
		req.Flags = verbsock.CMJoinSendOnly
	}
	var r verbsock.CMJoinResp
	if _, err := d.call(verbsock.OpCMJoin, &req, nil, &r); err != nil {
		return nil, err
	}
	return &McastGroup{Group: group.Unmap(), MGID: GID(r.MGID), AH: verbsock.AVFromWire(&r.AH), QPN: r.QPN, QKey: r.QKey,
		Local: netip.AddrFrom16(r.Local).Unmap(), SendOnly: o.SendOnly, d: d, h: r.Handle}, nil
}

// Leave ends the membership (rdma_leave_multicast); detach the QPs first.
// Leaving twice is no error.
func (g *McastGroup) Leave() error {
	var err error
	g.once.Do(func() {
		_, err = g.d.call(verbsock.OpCMLeave, &verbsock.HandleReq{Handle: g.h}, nil, &verbsock.Empty{})
	})
	return err
}
