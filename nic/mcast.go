package nic

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/vrnic/vrnicd/nic/gid"
	"github.com/vrnic/vrnicd/transport"
)

// Kernel rxe's multicast limits (rxe_param.h), the defaults of Limits.
const (
	DefaultMaxMcastGrp           = 8192
	DefaultMaxMcastQPAttach      = 56
	DefaultMaxTotalMcastQPAttach = 0x70000
)

// Errors of multicast attach and detach.
var (
	// ErrNotAttached: detaching a QP from a group it is not a member of
	// (rxe_detach_mcg: EINVAL).
	ErrNotAttached = errors.New("nic: QP is not attached to that group")
)

// GroupMember is a port that can join IP multicast groups at the link
// level (netstack.Stack): a snooping bridge forwards a group's frames only
// to ports that joined it.
type GroupMember interface {
	JoinGroup(g netip.Addr) error
	LeaveGroup(g netip.Addr) error
}

// mcastTable is the device's multicast groups: MGID to the QPs attached.
// Readers (ingress, on any worker) load a snapshot; writers replace it
// under mcast.mu, so the datapath takes no lock.
type mcastTable map[gid.GID][]*QP

type mcastState struct {
	mu  sync.Mutex
	tab atomic.Pointer[mcastTable]
	// total counts QP attachments over all groups.
	total int // +checklocks:mu
	// port counts, per group, why the port is a member: one for a group
	// with QPs attached, one per HoldGroup (an rdma_cm join).
	port map[gid.GID]int // +checklocks:mu
}

// IsMulticastGID reports whether g is a multicast GID: an IPv6 multicast
// address, or an IPv4-mapped one whose IPv4 address is multicast (ib_core's
// rdma_is_multicast_addr).
func IsMulticastGID(g gid.GID) bool {
	return netip.AddrFrom16(g).Unmap().IsMulticast()
}

// AttachMcast attaches the UD QP q to the multicast group mgid
// (ibv_attach_mcast): from then on the QP receives the group's packets
// sent to QPN 0xFFFFFF. The first QP of a group makes the port join it.
// Attaching again is a no-op, as in rxe.
func (d *Device) AttachMcast(q *QP, mgid gid.GID) error {
	if err := checkMcast(q, mgid); err != nil {
		return err
	}
	m := &d.mcast
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.load()
	members := old[mgid]
	if slices.Contains(members, q) {
		return nil
	}
	if err := d.mcastRoom(len(m.port), m.port[mgid] > 0, len(members), m.total); err != nil {
		return err
	}
	if members == nil {
		if err := d.holdLocked(mgid); err != nil {
			return err
		}
	}
	next := maps.Clone(old)
	if next == nil {
		next = mcastTable{}
	}
	next[mgid] = append(slices.Clip(members), q)
	m.tab.Store(&next)
	m.total++
	return nil
}

// DetachMcast detaches q from mgid (ibv_detach_mcast); the last QP out
// makes the port leave the group.
func (d *Device) DetachMcast(q *QP, mgid gid.GID) error {
	if err := checkMcast(q, mgid); err != nil {
		return err
	}
	m := &d.mcast
	m.mu.Lock()
	defer m.mu.Unlock()
	if !d.detachLocked(q, mgid) {
		return fmt.Errorf("%w: QP %#x, group %v", ErrNotAttached, q.QPN(), mgid)
	}
	return nil
}

// detachAll takes q out of every group (its QP is being destroyed, as
// uverbs detaches a QP's groups before destroying it).
func (d *Device) detachAll(q *QP) {
	m := &d.mcast
	m.mu.Lock()
	defer m.mu.Unlock()
	for g, members := range m.load() {
		if slices.Contains(members, q) {
			d.detachLocked(q, g)
		}
	}
}

// +checklocks:d.mcast.mu
func (d *Device) detachLocked(q *QP, mgid gid.GID) bool {
	m := &d.mcast
	old := m.load()
	i := slices.Index(old[mgid], q)
	if i < 0 {
		return false
	}
	next := maps.Clone(old)
	rest := slices.Delete(slices.Clone(old[mgid]), i, i+1)
	if len(rest) == 0 {
		delete(next, mgid)
		d.releaseLocked(mgid)
	} else {
		next[mgid] = rest
	}
	m.tab.Store(&next)
	m.total--
	return true
}

func checkMcast(q *QP, mgid gid.GID) error {
	if !IsMulticastGID(mgid) {
		return fmt.Errorf("%w: %v is not a multicast GID", transport.ErrInvalid, mgid)
	}
	if q.tq.Type() != transport.QPTypeUD {
		return fmt.Errorf("%w: only a UD QP joins a multicast group (QP %#x is %v)", transport.ErrInvalid, q.QPN(), q.tq.Type())
	}
	return nil
}

// HoldGroup makes the port a member of the group without a QP in it (an
// rdma_cm join: the kernel's cma_igmp_send); ReleaseGroup ends it. The
// group counts against max_mcast_grp while held.
func (d *Device) HoldGroup(mgid gid.GID) error {
	if !IsMulticastGID(mgid) {
		return fmt.Errorf("%w: %v is not a multicast GID", transport.ErrInvalid, mgid)
	}
	m := &d.mcast
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := d.mcastRoom(len(m.port), m.port[mgid] > 0, 0, 0); err != nil {
		return err
	}
	return d.holdLocked(mgid)
}

// ReleaseGroup undoes one HoldGroup.
func (d *Device) ReleaseGroup(mgid gid.GID) {
	m := &d.mcast
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.port[mgid] > 0 {
		d.releaseLocked(mgid)
	}
}

// holdLocked counts one more reason for the port to be in the group; the
// first joins it on the link.
// +checklocks:d.mcast.mu
func (d *Device) holdLocked(mgid gid.GID) error {
	m := &d.mcast
	if m.port[mgid] == 0 {
		if err := d.joinGroup(mgid); err != nil {
			return err
		}
	}
	if m.port == nil {
		m.port = map[gid.GID]int{}
	}
	m.port[mgid]++
	return nil
}

// +checklocks:d.mcast.mu
func (d *Device) releaseLocked(mgid gid.GID) {
	m := &d.mcast
	if m.port[mgid]--; m.port[mgid] <= 0 {
		delete(m.port, mgid)
		d.leaveGroup(mgid)
	}
}

// mcastRoom checks the limits a new attachment must fit (rxe: ENOMEM past
// each of them): groups is how many the port is in, known whether mgid is
// one of them.
func (d *Device) mcastRoom(groups int, known bool, members, total int) error {
	l := d.cfg.Limits
	switch {
	case !known && groups >= l.MaxMcastGrp:
		return fmt.Errorf("%w: %d multicast groups (max_mcast_grp)", ErrLimit, groups)
	case members >= l.MaxMcastQPAttach:
		return fmt.Errorf("%w: %d QPs in the group (max_mcast_qp_attach)", ErrLimit, members)
	case total >= l.MaxTotalMcastQPAttach:
		return fmt.Errorf("%w: %d multicast attachments (max_total_mcast_qp_attach)", ErrLimit, total)
	}
	return nil
}

func (m *mcastState) load() mcastTable {
	if t := m.tab.Load(); t != nil {
		return *t
	}
	return nil
}

// McastGroups lists the groups with their QPNs (for tools and tests).
func (d *Device) McastGroups() map[gid.GID][]uint32 {
	out := map[gid.GID][]uint32{}
	for g, members := range d.mcast.load() {
		for _, q := range members {
			out[g] = append(out[g], q.QPN())
		}
		slices.Sort(out[g])
	}
	return out
}

// joinGroup makes the port a member of the group's IP address, if the port
// can be one; a port attached later joins in Attach.
func (d *Device) joinGroup(mgid gid.GID) error {
	p := d.port.Load()
	if p == nil {
		return nil
	}
	if gm, ok := p.s.(GroupMember); ok {
		if err := gm.JoinGroup(mgid.Addr()); err != nil {
			return fmt.Errorf("nic: join %v on the port: %w", mgid.Addr(), err)
		}
	}
	return nil
}

func (d *Device) leaveGroup(mgid gid.GID) {
	p := d.port.Load()
	if p == nil {
		return
	}
	if gm, ok := p.s.(GroupMember); ok {
		if err := gm.LeaveGroup(mgid.Addr()); err != nil {
			d.log.Warn("leaving a multicast group on the port", "group", mgid.Addr(), "err", err)
		}
	}
}

// rejoinGroups makes a newly attached port a member of every group.
func (d *Device) rejoinGroups() {
	m := &d.mcast
	m.mu.Lock()
	defer m.mu.Unlock()
	for g := range m.port {
		if err := d.joinGroup(g); err != nil {
			d.log.Warn("joining a multicast group on the port", "group", g.Addr(), "err", err)
		}
	}
}

// hasGroup reports whether a QP of the device is attached to g: its own
// multicast sends then loop back to them too.
func (d *Device) hasGroup(g [16]byte) bool {
	if !isMcastBytes(&g) {
		return false // the unicast send path pays no map lookup
	}
	return len(d.mcast.load()[gid.GID(g)]) > 0
}

// isMcastBytes is IsMulticastGID on the raw bytes, without building an
// address: ff00::/8, or ::ffff:224.0.0.0/100.
func isMcastBytes(g *[16]byte) bool {
	if g[0] == 0xff {
		return true
	}
	return g[10] == 0xff && g[11] == 0xff && g[12]&0xf0 == 0xe0 && [10]byte(g[:10]) == [10]byte{}
}
