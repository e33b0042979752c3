package server

import (
	"net/netip"
	"syscall"

	"github.com/vrnic/vrnicd/transport/cm"
	"github.com/vrnic/vrnicd/verbsock"
)

// listCM answers list_cm: one page of the CM snapshot taken at Start 0.
func (c *conn) listCM(r *verbsock.PageReq) (any, error) {
	a := c.s.cfg.CM
	if a == nil {
		return nil, errf(syscall.EOPNOTSUPP, "%v: the daemon runs no connection manager", verbsock.OpListCM)
	}
	if r.Start == 0 || c.cmList == nil {
		c.cmList = c.s.cmEntries()
	}
	i := min(int(r.Start), len(c.cmList))
	j := min(i+verbsock.ListCMPage, len(c.cmList))
	resp := &verbsock.ListCMResp{Count: uint32(j - i)}
	copy(resp.Items[:], c.cmList[i:j])
	if j < len(c.cmList) {
		resp.Next = uint32(j)
	} else {
		c.cmList = nil // done: free it
	}
	return resp, nil
}

// cmEntries is the agent's snapshot with each entry's owner pid, found in
// the clients' CM state. The agent's lock is not held meanwhile.
func (s *Server) cmEntries() []verbsock.CMEntry {
	snap := s.cfg.CM.Snapshot()
	connPid, lisPid := s.cmOwners()
	out := make([]verbsock.CMEntry, 0, len(snap.Conns)+len(snap.Listeners))
	for _, k := range snap.Conns {
		out = append(out, verbsock.CMEntry{Kind: verbsock.CMEntryConn, LocalID: k.ID, RemoteID: k.RemoteID,
			ServiceID: k.ServiceID, Local: addr16(cm.AddrFromGID(k.Path.LocalGID)), Peer: addr16(k.Peer),
			QPN: k.QPN, RemoteQPN: k.RemoteQPN, Owner: uint32(max(connPid[k.ID], 0)), State: uint8(k.State),
			Active: b2u8(k.Active)})
	}
	for _, l := range snap.Listeners {
		out = append(out, verbsock.CMEntry{Kind: verbsock.CMEntryListen, ServiceID: l.ServiceID,
			Local: addr16(l.Addr), Owner: uint32(max(lisPid[l.Handle], 0))})
	}
	return out
}

// addr16 is a as 16 bytes, all zeros for no address.
func addr16(a netip.Addr) [16]byte {
	if !a.IsValid() || a.IsUnspecified() {
		return [16]byte{}
	}
	return a.As16()
}

// cmOwners maps the agent's connection IDs and listener handles to the pid
// of the client holding them.
func (s *Server) cmOwners() (conns map[uint32]int, listens map[uint64]int) {
	s.mu.Lock()
	clients := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		clients = append(clients, c)
	}
	s.mu.Unlock()
	conns, listens = map[uint32]int{}, map[uint64]int{}
	for _, c := range clients {
		k := &c.cm
		k.mu.Lock()
		for _, cn := range k.conns {
			if cn.id != 0 {
				conns[cn.id] = c.pid
			}
		}
		for _, l := range k.listens {
			listens[l.id] = c.pid
		}
		k.mu.Unlock()
	}
	return conns, listens
}
