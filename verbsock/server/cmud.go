package server

import (
	"net/netip"
	"syscall"

	"github.com/vrnic/vrnicd/nic/cmagent"
	"github.com/vrnic/vrnicd/transport/cm"
	"github.com/vrnic/vrnicd/verbsock"
)

// UD over SIDR (PROTOCOL.md §11): cm_resolve_ud makes a connection whose
// one event is the SIDR answer; a listener of the UDP port space gets
// SIDR requests as CONNECT_REQUESTs, answered by cm_accept_ud or
// cm_reject. Both count against the client's connection limit like a
// connection.

func (c *conn) cmResolveUD(a *cmagent.Agent, r *verbsock.CMResolveUDReq) (any, error) {
	if r.PortSpace != 0 && r.PortSpace != cm.PortSpaceUDP {
		return nil, errf(syscall.EPROTONOSUPPORT, "port space %#x: UD resolution is RDMA_PS_UDP's", r.PortSpace)
	}
	if int(r.PrivateLen) > len(r.Private) {
		return nil, errf(syscall.EINVAL, "%d bytes of private data, room for %d", r.PrivateLen, len(r.Private))
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
	cn := &cmConn{handle: k.next, ctx: r.Context, ud: true, peer: netip.AddrPortFrom(netip.AddrFrom16(r.Dst).Unmap(), r.DstPort),
		ch: ch}
	k.next++
	k.conns[cn.handle] = cn // held now: the answer may come before ResolveUD returns
	k.mu.Unlock()
	src := netip.Addr{}
	if r.Src != [16]byte{} {
		src = netip.AddrFrom16(r.Src).Unmap()
	}
	// The handler takes the connection's ends from the event itself: it
	// may run before the lines below.
	id, route, err := a.ResolveUD(c.ctx, netip.AddrPortFrom(src, r.SrcPort), cn.peer, r.Private[:r.PrivateLen],
		func(e cmagent.Event) bool {
			if e.UD != nil {
				c.cm.mu.Lock()
				cn.local = e.UD.Src
				c.cm.mu.Unlock()
			}
			return c.cmConnEvent(cn, e)
		})
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil {
		delete(k.conns, cn.handle)
		return nil, err
	}
	cn.id, cn.local = id, route.Src
	return &verbsock.CMConnectResp{Conn: cn.handle}, nil
}

// cmAcceptUD answers a SIDR request with one of the client's UD QPs.
func (c *conn) cmAcceptUD(a *cmagent.Agent, r *verbsock.CMAcceptUDReq) error {
	o, err := c.qp(r.QP)
	if err != nil {
		return err
	}
	if int(r.PrivateLen) > len(r.Private) {
		return errf(syscall.EINVAL, "%d bytes of private data, room for %d", r.PrivateLen, len(r.Private))
	}
	return c.cmWithConn(r.Conn, func(cn *cmConn) error {
		if !cn.ud || cn.listener == 0 { // a connection, or our own resolution
			return errf(syscall.EINVAL, "rdma_cm connection %d is not a SIDR request", r.Conn)
		}
		if err := a.AcceptUD(cn.id, o.qp.Load(), r.Private[:r.PrivateLen]); err != nil {
			return err
		}
		// SIDR has no connection: the handle's work is done.
		c.cmForget(a, cn)
		return nil
	})
}

// cmForget drops a connection the agent is done with (an answered SIDR
// request): the client's handle stays valid for cm_destroy, which then
// finds nothing to disconnect.
func (c *conn) cmForget(a *cmagent.Agent, cn *cmConn) {
	a.Release(cn.id)
	c.cm.mu.Lock()
	delete(c.cm.byID, cn.id)
	cn.id = 0 // the agent may give the ID to another connection
	c.cm.mu.Unlock()
}
