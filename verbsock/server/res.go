package server

import (
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/verbsock"
)

// list_res and list_clients page, by position, through a snapshot taken at
// Start 0 (as list_cm): of references only, 16 bytes an object, so that a
// device full of MRs costs the caller little; each object is read when its
// page is built, and one gone by then is left out.

// resRef names one object: the connection holding it and its handle.
type resRef struct {
	c *conn
	h uint32
}

// listRes answers list_res: one page of the objects of one kind that every
// client holds.
func (c *conn) listRes(r *verbsock.ResReq) (any, error) {
	if r.Kind == 0 || r.Kind > verbsock.NumResKinds {
		return nil, errf(syscall.EINVAL, "object kind %d (1..%d)", r.Kind, verbsock.NumResKinds)
	}
	if r.Start == 0 || c.resList == nil || c.resKind != r.Kind {
		c.resKind, c.resList = r.Kind, c.s.resSnapshot(r.Kind)
	}
	i := min(int(r.Start), len(c.resList))
	j := min(i+verbsock.ListResPage, len(c.resList))
	resp := &verbsock.ListResResp{}
	for _, ref := range c.resList[i:j] {
		if e, ok := c.resEntry(r.Kind, ref); ok {
			resp.Items[resp.Count] = e
			resp.Count++
		}
	}
	if j < len(c.resList) {
		resp.Next = uint32(j)
	} else {
		c.resList = nil // done: free it
	}
	return resp, nil
}

// clientsByID is every connection, in the order they came.
func (s *Server) clientsByID() []*conn {
	s.mu.Lock()
	cs := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		cs = append(cs, c)
	}
	s.mu.Unlock()
	slices.SortFunc(cs, func(a, b *conn) int { return int(a.id) - int(b.id) })
	return cs
}

// resSnapshot lists every client's objects of kind, by client, then by
// handle.
func (s *Server) resSnapshot(kind uint8) []resRef {
	var out []resRef
	for _, c := range s.clientsByID() {
		c.mu.RLock()
		hs := c.handlesLocked(kind)
		c.mu.RUnlock()
		slices.Sort(hs)
		for _, h := range hs {
			out = append(out, resRef{c: c, h: h})
		}
	}
	return out
}

// handlesLocked is the handles of the connection's objects of kind.
// Caller holds c.mu.
func (c *conn) handlesLocked(kind uint8) []uint32 {
	switch kind {
	case verbsock.ResPD:
		return keys(c.pds)
	case verbsock.ResMR:
		return keys(c.mrs)
	case verbsock.ResMW:
		return keys(c.mws)
	case verbsock.ResCQ:
		return keys(c.cqs)
	case verbsock.ResQP:
		return keys(c.qps)
	case verbsock.ResSRQ:
		return keys(c.srqs)
	case verbsock.ResAH:
		return keys(c.ahs)
	}
	return nil
}

func keys[T any](m map[uint32]*T) []uint32 {
	out := make([]uint32, 0, len(m))
	for h := range m {
		out = append(out, h)
	}
	return out
}

// handleOf is the handle under which m holds o, 0 if none (o nil).
func handleOf[T any](m map[uint32]*T, o *T) uint32 {
	for h, x := range m {
		if x == o {
			return h
		}
	}
	return 0
}

// seesKeys reports whether the caller may see the keys of owner's MRs and
// MWs: root, the daemon's own user, and the owner's user (kernel rdma
// shows them to CAP_NET_ADMIN only: an rkey is what a remote access needs).
func (c *conn) seesKeys(owner *conn) bool {
	uid := c.acct.uid
	return uid == 0 || int(uid) == os.Geteuid() || uid == owner.acct.uid
}

// resEntry reads one object now; false if it has gone since the snapshot.
func (c *conn) resEntry(kind uint8, ref resRef) (verbsock.ResEntry, bool) {
	o := ref.c
	e := verbsock.ResEntry{Kind: kind, Client: o.id, Owner: uint32(max(o.pid, 0)), Handle: ref.h}
	if kind == verbsock.ResQP {
		return o.qpEntry(e) // reads the QP outside o.mu
	}
	o.mu.RLock()
	defer o.mu.RUnlock()
	ok := false
	switch kind {
	case verbsock.ResPD:
		ok = o.pds[ref.h] != nil
	case verbsock.ResMR:
		ok = o.mrEntryLocked(&e)
	case verbsock.ResMW:
		ok = o.mwEntryLocked(&e)
	case verbsock.ResCQ:
		ok = o.cqEntryLocked(&e)
	case verbsock.ResSRQ:
		ok = o.srqEntryLocked(&e)
	case verbsock.ResAH:
		ok = o.ahEntryLocked(&e)
	}
	if (kind == verbsock.ResMR || kind == verbsock.ResMW) && !c.seesKeys(o) {
		e.LKey, e.RKey, e.IOVA = 0, 0, 0
		e.Flags |= verbsock.ResKeysHidden
	}
	return e, ok
}

// mrEntryLocked fills an MR's entry: its key, and what the memory table
// says of it now (a fast-reg MR's range is its last registration's).
// Caller holds c.mu.
func (c *conn) mrEntryLocked(e *verbsock.ResEntry) bool {
	r := c.mrs[e.Handle]
	if r == nil {
		return false
	}
	e.PD, e.LKey, e.RKey, e.Length = r.pd, r.key, r.key, r.length
	if in, ok := c.s.dev.Mem().Query(r.key); ok {
		e.LKey, e.RKey, e.Access, e.IOVA, e.Length = in.Key, in.Key, uint32(in.Access), in.IOVA, in.Length
		e.Users = uint32(in.BoundMWs)
	}
	return true
}

// mwEntryLocked fills a window's entry. Caller holds c.mu.
func (c *conn) mwEntryLocked(e *verbsock.ResEntry) bool {
	w := c.mws[e.Handle]
	if w == nil {
		return false
	}
	e.PD, e.RKey = w.pd, w.key
	if in, ok := c.s.dev.Mem().Query(w.key); ok {
		e.RKey, e.Access, e.IOVA, e.Length, e.QPN = in.Key, uint32(in.Access), in.IOVA, in.Length, in.QPN
		e.Type = 1
		if in.Kind == mem.ObjMW2B {
			e.Type = 2
		}
	}
	return true
}

// cqEntryLocked fills a CQ's entry. Caller holds c.mu.
func (c *conn) cqEntryLocked(e *verbsock.ResEntry) bool {
	q := c.cqs[e.Handle]
	if q == nil {
		return false
	}
	e.MaxWR = q.cq.Entries()
	for _, o := range c.qps { // q.users counts a QP with it as both CQs twice
		if o.scq == q || o.rcq == q {
			e.Users++
		}
	}
	return true
}

// srqEntryLocked fills an SRQ's entry. Caller holds c.mu.
func (c *conn) srqEntryLocked(e *verbsock.ResEntry) bool {
	s := c.srqs[e.Handle]
	if s == nil {
		return false
	}
	maxWR, maxSGE, _ := s.srq.Attr()
	e.PD, e.QPN, e.MaxWR, e.MaxSGE, e.Users = s.pd, s.srq.SRQN(), maxWR, maxSGE, uint32(s.users)
	return true
}

// ahEntryLocked fills an AH's entry: its destination. Caller holds c.mu.
func (c *conn) ahEntryLocked(e *verbsock.ResEntry) bool {
	a := c.ahs[e.Handle]
	if a == nil {
		return false
	}
	for h, p := range c.pds {
		if p.pd == a.pd {
			e.PD = h
		}
	}
	e.DGID, e.SGIDIndex, e.HopLimit = a.av.DGID, a.av.SGIDIndex, a.av.HopLimit
	return true
}

// qpEntry fills a QP's entry: what the connection keeps under c.mu, then
// its state and peer from the QP, without c.mu (which nothing waiting on a
// datapath worker may hold).
func (c *conn) qpEntry(e verbsock.ResEntry) (verbsock.ResEntry, bool) {
	c.mu.RLock()
	o := c.qps[e.Handle]
	var qp *nic.QP
	if o != nil {
		qp = o.qp.Load()
		e.PD, e.Type = o.pd, uint8(o.typ)
		e.MaxWR, e.MaxRecvWR, e.MaxSGE = o.cap.MaxSendWR, o.cap.MaxRecvWR, o.cap.MaxSendSGE
		e.SendCQ, e.RecvCQ, e.SRQ = handleOf(c.cqs, o.scq), handleOf(c.cqs, o.rcq), handleOf(c.srqs, o.srq)
	}
	c.mu.RUnlock()
	if qp == nil {
		return e, false
	}
	in := qp.Info()
	e.QPN, e.State = in.QPN, uint8(in.State)
	if in.Type == transport.QPTypeRC || in.Type == transport.QPTypeUC {
		a, _ := qp.Engine().Query()
		e.DGID = a.AV.DGID
	}
	return e, true
}

// listClients answers list_clients: one page of the connections and their
// quotas.
func (c *conn) listClients(r *verbsock.PageReq) (any, error) {
	if r.Start == 0 || c.clientList == nil {
		c.clientList = c.s.clientsByID()
	}
	i := min(int(r.Start), len(c.clientList))
	j := min(i+verbsock.ListClientsPage, len(c.clientList))
	resp := &verbsock.ListClientsResp{}
	for _, o := range c.clientList[i:j] {
		resp.Items[resp.Count] = o.clientEntry()
		resp.Count++
	}
	if j < len(c.clientList) {
		resp.Next = uint32(j)
	} else {
		c.clientList = nil
	}
	return resp, nil
}

// clientEntry is what the connection holds against its quotas and its
// uid's. A connection that has gone since the snapshot holds nothing.
func (c *conn) clientEntry() verbsock.ClientEntry {
	var held [nRes]uint64
	for r := range nRes {
		held[r] = c.held[r].Load()
	}
	held[resMemBytes] = uint64(max(c.memBytes.Load(), 0))
	return verbsock.ClientEntry{Client: c.id, Owner: uint32(max(c.pid, 0)), UID: c.acct.uid,
		Used: limitsOf(held), Limit: c.s.limits, UserUsed: c.s.Used(c.acct.uid), UserLimit: limitsOf(c.s.userLim)}
}

// queryDaemon answers query_daemon: the interface, mode, version and
// uptime the daemon was configured with.
func (c *conn) queryDaemon() *verbsock.DaemonInfo {
	cfg := &c.s.cfg
	d := &verbsock.DaemonInfo{UptimeMS: uint64(max(time.Since(cfg.Started).Milliseconds(), 0)), Mode: cfg.Mode}
	copy(d.Netdev[:len(d.Netdev)-1], cfg.Netdev)
	copy(d.Version[:len(d.Version)-1], cfg.Version)
	return d
}
