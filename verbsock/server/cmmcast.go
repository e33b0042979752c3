package server

import (
	"net/netip"
	"syscall"

	"github.com/vrnic/vrnicd/nic/cmagent"
	"github.com/vrnic/vrnicd/verbsock"
)

// errENOTSUPP is the kernel's internal ENOTSUPP (524), which
// rdma_join_multicast passes to programs for an IPv6 group over RoCEv2.
const errENOTSUPP = syscall.Errno(524)

// cmJoin is rdma_join_multicast: the join is made at once (the port joins
// the group on its link for a full member) and its reply is what the
// MULTICAST_JOIN event carries; the client queues that event itself. At
// most MaxJoins per client.
func (c *conn) cmJoin(a *cmagent.Agent, r *verbsock.CMJoinReq) (any, error) {
	if r.Flags > verbsock.CMJoinSendOnly {
		return nil, errf(syscall.EINVAL, "join flags %d (0 full member, 1 send-only full member)", r.Flags)
	}
	k := &c.cm
	k.mu.Lock()
	full := len(k.joins) >= c.s.cmLimits.MaxJoins
	k.mu.Unlock()
	if full {
		return nil, quota("multicast joins", uint64(c.s.cmLimits.MaxJoins))
	}
	var src netip.Addr
	if r.Src != [16]byte{} {
		src = netip.AddrFrom16(r.Src)
	}
	if err := c.chargeMcast(); err != nil {
		return nil, err
	}
	j, err := a.JoinMulticast(src, netip.AddrFrom16(r.Group), r.Flags == verbsock.CMJoinSendOnly)
	if err != nil {
		c.uncharge(resMcast, 1)
		return nil, err
	}
	k.mu.Lock()
	if k.gone {
		k.mu.Unlock()
		a.LeaveMulticast(j)
		c.uncharge(resMcast, 1)
		return nil, errf(syscall.ENOTCONN, "client gone")
	}
	h := k.next
	k.next++
	k.joins[h] = j
	k.mu.Unlock()
	return &verbsock.CMJoinResp{Handle: h, QPN: j.QPN, QKey: j.QKey, MGID: j.MGID, Local: j.AV.SGID,
		AH: verbsock.AVToWire(&j.AV)}, nil
}

// cmLeave is rdma_leave_multicast.
func (c *conn) cmLeave(a *cmagent.Agent, h uint32) error {
	k := &c.cm
	k.mu.Lock()
	j, ok := k.joins[h]
	delete(k.joins, h)
	k.mu.Unlock()
	if !ok {
		return noObj("multicast join", h)
	}
	a.LeaveMulticast(j)
	c.uncharge(resMcast, 1)
	return nil
}
