package netstack

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/vrnic/vrnicd/transport/clock"
)

// IP multicast group membership, for UD multicast (issue #29). The port
// receives RoCEv2 addressed to the groups joined. Raw mode leaves the
// membership protocol to the kernel (membership_linux.go); TAP mode speaks
// IGMPv3/v2 (igmp.go) and MLDv2/v1 (mld.go) itself, with the report
// scheduling shared here.

// ErrNotMulticast: JoinGroup was given something other than an IPv4 or
// IPv6 multicast address.
var ErrNotMulticast = errors.New("netstack: not an IP multicast address")

// ErrTooManyGroups: JoinGroup would exceed Config.MaxGroups.
var ErrTooManyGroups = errors.New("netstack: too many multicast groups")

// DefaultMaxGroups is Config.MaxGroups' default: kernel rxe's
// max_mcast_grp.
const DefaultMaxGroups = 8192

// Protocol timing (RFC 3376 §8, RFC 3810 §9, RFC 2236 §8.10, RFC 2710 §7.10).
const (
	robustness = 2 // unsolicited reports are sent this many times
	// unsolicitedV3 and unsolicitedOld are the Unsolicited Report Interval
	// of IGMPv3/MLDv2 and of IGMPv2/MLDv1: retransmissions of a state
	// change go at a random point within it.
	unsolicitedV3  = time.Second
	unsolicitedOld = 10 * time.Second
	// olderQuerierTimeout is the Older Version Querier Present Timeout:
	// Robustness × Query Interval (125 s) + Query Response Interval (10 s).
	olderQuerierTimeout = robustness*125*time.Second + 10*time.Second
)

// Group record types (RFC 3376 §4.2.12, RFC 3810 §5.2.12).
const (
	recIsExclude = 2 // current state: a member (no sources excluded)
	recToInclude = 3 // state change: leave
	recToExclude = 4 // state change: join
)

// record is one group record of a report to send.
type record struct {
	typ uint8
	g   netip.Addr
}

// change is a state change still to be (re)announced.
type change struct {
	join bool
	left int // sends remaining
}

// mcProto is the report state of one family: IGMP for IPv4, MLD for IPv6.
type mcProto struct {
	v6 bool
	// olderUntil: an IGMPv2 (or v1) / MLDv1 querier was heard and its
	// version is spoken until then; v1Until: the same for IGMPv1.
	olderUntil time.Time
	v1Until    time.Time
	changes    map[netip.Addr]*change
	changeDue  time.Time // next state-change (re)transmission
	generalDue time.Time // pending answer to a general query; zero: none
	groupDue   map[netip.Addr]time.Time
}

func (p *mcProto) older(now time.Time) bool { return now.Before(p.olderUntil) }
func (p *mcProto) v1(now time.Time) bool    { return now.Before(p.v1Until) }

// querierVersion is the version of a query heard.
type querierVersion uint8

const (
	querierV3    querierVersion = iota // IGMPv3 or MLDv2
	querierOlder                       // IGMPv2 or MLDv1
	querierV1                          // IGMPv1
)

// mcast is the stack's group table and report scheduler. One timer serves
// both families: it is armed for the earliest thing due.
type mcast struct {
	// op serializes joins, leaves and Close, so the kernel's (raw mode)
	// slow membership calls happen outside mu, which receive reads.
	op     sync.Mutex
	mu     sync.RWMutex
	max    int
	groups map[netip.Addr]struct{} // +checklocks:mu
	v4, v6 mcProto                 // +checklocks:mu
	timer  clock.Timer             // +checklocks:mu
	at     time.Time               // +checklocks:mu
	closed bool                    // +checklocks:mu
}

func newMcast(max int) *mcast {
	if max <= 0 {
		max = DefaultMaxGroups
	}
	m := &mcast{max: max, groups: map[netip.Addr]struct{}{}}
	m.v4 = mcProto{changes: map[netip.Addr]*change{}, groupDue: map[netip.Addr]time.Time{}}
	m.v6 = mcProto{v6: true, changes: map[netip.Addr]*change{}, groupDue: map[netip.Addr]time.Time{}}
	return m
}

// joined says whether g is a joined group; the receive path's check (a
// read lock and a map lookup: no allocation).
func (m *mcast) joined(g netip.Addr) bool {
	m.mu.RLock()
	_, ok := m.groups[g]
	m.mu.RUnlock()
	return ok
}

// +checklocks:m.mu
func (m *mcast) proto(g netip.Addr) *mcProto {
	if g.Is4() {
		return &m.v4
	}
	return &m.v6
}

// JoinGroup makes the port a member of the IP multicast group g (an IPv4
// or IPv6 multicast address; anything else: an error wrapping
// ErrNotMulticast). RoCEv2 packets addressed to g are delivered from then
// on (RxPacket.Dst is g), and the membership is announced on the wire: by
// the kernel in raw mode, by the stack's IGMP/MLD reports in TAP mode. The
// caller joins once per group (it keeps its own reference count); a second
// join of the same group returns nil and changes nothing. More than
// Config.MaxGroups groups: an error wrapping ErrTooManyGroups.
func (s *Stack) JoinGroup(g netip.Addr) error {
	g = g.WithZone("").Unmap()
	if !g.IsMulticast() {
		return fmt.Errorf("%w: %v", ErrNotMulticast, g)
	}
	m := s.mc
	m.op.Lock()
	defer m.op.Unlock()
	m.mu.RLock()
	_, ok := m.groups[g]
	n, closed := len(m.groups), m.closed
	m.mu.RUnlock()
	switch {
	case ok:
		return nil
	case closed:
		return fmt.Errorf("netstack: join %v: %w", g, net.ErrClosed)
	case n >= m.max:
		return fmt.Errorf("%w: %d joined, the limit", ErrTooManyGroups, m.max)
	}
	if s.kern != nil {
		// The kernel joins first: if it refuses, nothing changed.
		if err := s.kern.joinGroup(g); err != nil {
			return err
		}
	}
	m.mu.Lock()
	m.groups[g] = struct{}{}
	var frames [][]byte
	if s.cfg.Mode == ModeTAP && reportable(g) {
		frames = s.stateChangeLocked(m.proto(g), g, true)
	}
	m.mu.Unlock()
	s.ctr.McastJoins.Add(1)
	s.writeReports(frames)
	return nil
}

// LeaveGroup ends the membership of g (a leave on the wire); leaving a
// group not joined returns nil.
func (s *Stack) LeaveGroup(g netip.Addr) error {
	g = g.WithZone("").Unmap()
	m := s.mc
	m.op.Lock()
	defer m.op.Unlock()
	m.mu.Lock()
	if _, ok := m.groups[g]; !ok {
		m.mu.Unlock()
		return nil
	}
	delete(m.groups, g) // receive stops first, then the kernel leaves
	m.mu.Unlock()
	var err error
	if s.kern != nil {
		err = s.kern.leaveGroup(g)
	}
	m.mu.Lock()
	var frames [][]byte
	if s.cfg.Mode == ModeTAP {
		p := m.proto(g)
		delete(p.groupDue, g)
		if reportable(g) {
			frames = s.stateChangeLocked(p, g, false)
		}
	}
	m.mu.Unlock()
	s.ctr.McastLeaves.Add(1)
	s.writeReports(frames)
	return err
}

// Groups lists the joined groups, sorted.
func (s *Stack) Groups() []netip.Addr {
	s.mc.mu.RLock()
	l := make([]netip.Addr, 0, len(s.mc.groups))
	for g := range s.mc.groups {
		l = append(l, g)
	}
	s.mc.mu.RUnlock()
	slices.SortFunc(l, netip.Addr.Compare)
	return l
}

// reportable: the groups membership reports are sent for. All-systems and
// the rest of 224.0.0.0/24 (RFC 3376 §5, as the brief wants for the whole
// local block), ff02::1 (RFC 3810 §6) and interface-local or reserved
// scopes (ff00::/16, ff01::/16, never on a link) are not.
func reportable(g netip.Addr) bool {
	if g.Is4() {
		a := g.As4()
		return !(a[0] == 224 && a[1] == 0 && a[2] == 0)
	}
	a := g.As16()
	return g != allNodes && a[1]&0x0f >= 2
}

// stateChangeLocked sends the first report of a join or leave now and
// schedules the other Robustness-1 (RFC 3376 §5.1, RFC 3810 §6.1). A
// change pending for the group is replaced: the newest state is what
// gets retransmitted.
// +checklocks:s.mc.mu
func (s *Stack) stateChangeLocked(p *mcProto, g netip.Addr, join bool) [][]byte {
	now := s.clock.Now()
	c := &change{join: join, left: robustness - 1}
	typ := uint8(recToInclude)
	if join {
		typ = recToExclude
	}
	if c.left > 0 {
		if len(p.changes) == 0 || p.changeDue.IsZero() {
			p.changeDue = now.Add(randDelay(s.unsolicited(p, now)))
		}
		p.changes[g] = c
	} else {
		delete(p.changes, g)
	}
	s.armLocked(now)
	return s.reportFrames(p, now, []record{{typ, g}})
}

func (s *Stack) unsolicited(p *mcProto, now time.Time) time.Duration {
	if p.older(now) {
		return unsolicitedOld
	}
	return unsolicitedV3
}

// randDelay is a random delay in (0, d] (RFC 3376 §5.1's "random point
// in the interval"); 0 for d <= 0.
func randDelay(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return 1 + rand.N(d)
}

// queryLocked records a query of one family heard on the link: group
// invalid for a general query; ver says which version asked. The answer is scheduled at a random point within maxResp (RFC
// 3376 §5.2, RFC 2236 §3, RFC 3810 §6.2, RFC 2710 §4).
// +checklocks:s.mc.mu
func (s *Stack) queryLocked(p *mcProto, now time.Time, group netip.Addr, maxResp time.Duration, ver querierVersion) {
	if ver != querierV3 {
		if !p.older(now) {
			// Entering compatibility mode cancels v3 work in flight
			// (RFC 3376 §7.2.1, RFC 3810 §8.2.1).
			clear(p.changes)
			p.generalDue = time.Time{}
		}
		p.olderUntil = now.Add(olderQuerierTimeout)
	}
	if ver == querierV1 {
		p.v1Until = now.Add(olderQuerierTimeout)
	}
	due := now.Add(randDelay(maxResp))
	switch {
	case !group.IsValid() && !p.older(now):
		// One current-state report for every group.
		if p.generalDue.IsZero() || due.Before(p.generalDue) {
			p.generalDue = due
		}
	case !group.IsValid():
		// v1/v2: a timer for each group.
		for g := range s.mc.groups {
			if g.Is6() == p.v6 && reportable(g) {
				setEarlier(p.groupDue, g, now.Add(randDelay(maxResp)))
			}
		}
	default:
		if _, ok := s.mc.groups[group]; !ok || !reportable(group) {
			return
		}
		if !p.generalDue.IsZero() && !p.generalDue.After(due) {
			return // the general answer comes first and covers it
		}
		setEarlier(p.groupDue, group, due)
	}
	s.armLocked(now)
}

// reportHeard: another member reported g in IGMPv1/v2 or MLDv1, which
// answers the querier for us too; our pending answer is dropped (report
// suppression, RFC 2236 §3, RFC 2710 §4). v3 has none.
func (s *Stack) reportHeard(g netip.Addr) {
	m := s.mc
	m.mu.Lock()
	if p := m.proto(g); p.older(s.clock.Now()) {
		delete(p.groupDue, g)
	}
	m.mu.Unlock()
}

func setEarlier(m map[netip.Addr]time.Time, g netip.Addr, t time.Time) {
	if old, ok := m[g]; !ok || t.Before(old) {
		m[g] = t
	}
}

// armLocked sets the one timer for the earliest thing due, if any.
// +checklocks:s.mc.mu
func (s *Stack) armLocked(now time.Time) {
	m := s.mc
	var next time.Time
	for _, p := range []*mcProto{&m.v4, &m.v6} {
		if len(p.changes) > 0 {
			next = earliest(next, p.changeDue)
		}
		next = earliest(next, p.generalDue)
		for _, t := range p.groupDue {
			next = earliest(next, t)
		}
	}
	if m.timer != nil && (next.IsZero() || !m.at.Equal(next)) {
		m.timer.Stop()
		m.timer = nil
	}
	if next.IsZero() || m.closed || m.timer != nil {
		return
	}
	m.at = next
	m.timer = s.clock.AfterFunc(max(next.Sub(now), 0), s.mcastTimer)
}

// earliest is the earlier of two times, zero meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// mcastTimer sends what has fallen due and re-arms.
func (s *Stack) mcastTimer() {
	m := s.mc
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.timer = nil
	now := s.clock.Now()
	var frames [][]byte
	for _, p := range []*mcProto{&m.v4, &m.v6} {
		frames = append(frames, s.dueLocked(p, now)...)
	}
	s.armLocked(now)
	m.mu.Unlock()
	s.writeReports(frames)
}

// dueLocked collects the records due at now into reports.
// +checklocks:s.mc.mu
func (s *Stack) dueLocked(p *mcProto, now time.Time) [][]byte {
	var recs []record
	if len(p.changes) > 0 && !p.changeDue.After(now) {
		for g, c := range p.changes {
			typ := uint8(recToInclude)
			if c.join {
				typ = recToExclude
			}
			recs = append(recs, record{typ, g})
			if c.left--; c.left <= 0 {
				delete(p.changes, g)
			}
		}
		p.changeDue = now.Add(randDelay(s.unsolicited(p, now)))
	}
	if !p.generalDue.IsZero() && !p.generalDue.After(now) {
		p.generalDue = time.Time{}
		clear(p.groupDue) // the general answer covers them
		for g := range s.mc.groups {
			recs = s.currentLocked(p, recs, g)
		}
	}
	for g, t := range p.groupDue {
		if !t.After(now) {
			delete(p.groupDue, g)
			recs = s.currentLocked(p, recs, g)
		}
	}
	if len(recs) == 0 {
		return nil
	}
	slices.SortFunc(recs, recordCmp)
	return s.reportFrames(p, now, recs)
}

func recordCmp(a, b record) int { return a.g.Compare(b.g) }

// currentLocked appends g's current-state record to recs if g is one of
// p's groups and still joined.
// +checklocks:s.mc.mu
func (s *Stack) currentLocked(p *mcProto, recs []record, g netip.Addr) []record {
	if _, ok := s.mc.groups[g]; ok && reportable(g) && g.Is6() == p.v6 {
		recs = append(recs, record{recIsExclude, g})
	}
	return recs
}

// reportFrames builds the reports carrying recs, in the version the link's
// querier speaks.
// +checklocks:s.mc.mu
func (s *Stack) reportFrames(p *mcProto, now time.Time, recs []record) [][]byte {
	if p.v6 {
		if p.older(now) {
			return s.mldv1Frames(recs)
		}
		return s.mldv2Frames(recs)
	}
	if p.older(now) {
		return s.igmpv2Frames(recs, p.v1(now))
	}
	return s.igmpv3Frames(recs)
}

// reannounce sends every reportable group's join again, as after a join
// (the link came back up: reports sent while it was down were lost, and a
// switch may have forgotten us).
func (s *Stack) reannounce() {
	if s.cfg.Mode != ModeTAP {
		return
	}
	m := s.mc
	m.mu.Lock()
	var frames [][]byte
	for _, p := range []*mcProto{&m.v4, &m.v6} {
		var recs []record
		for g := range m.groups {
			if g.Is6() == p.v6 && reportable(g) {
				recs = append(recs, record{recToExclude, g})
			}
		}
		if len(recs) == 0 {
			continue
		}
		now := s.clock.Now()
		for _, r := range recs {
			p.changes[r.g] = &change{join: true, left: robustness - 1}
		}
		p.changeDue = now.Add(randDelay(s.unsolicited(p, now)))
		slices.SortFunc(recs, recordCmp)
		frames = append(frames, s.reportFrames(p, now, recs)...)
		s.armLocked(now)
	}
	m.mu.Unlock()
	s.writeReports(frames)
}

// writeReports writes membership reports, counted by igmp/mld_reports_out
// as they are built.
func (s *Stack) writeReports(frames [][]byte) {
	if len(frames) > 0 {
		s.write(frames...)
	}
}

// closeMcast stops the timer and leaves every group: raw mode closes the
// membership sockets (the kernel leaves), TAP mode sends one leave report
// per family (not repeated: the stack is going away). The table itself
// stays, for Groups.
func (s *Stack) closeMcast() {
	m := s.mc
	m.op.Lock()
	defer m.op.Unlock()
	if s.kern != nil {
		s.kern.closeMemberships()
	}
	m.mu.Lock()
	m.closed = true
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	var frames [][]byte
	if s.cfg.Mode == ModeTAP {
		now := s.clock.Now()
		for _, p := range []*mcProto{&m.v4, &m.v6} {
			var recs []record
			for g := range m.groups {
				if g.Is6() == p.v6 && reportable(g) {
					recs = append(recs, record{recToInclude, g})
				}
			}
			slices.SortFunc(recs, recordCmp)
			frames = append(frames, s.reportFrames(p, now, recs)...)
		}
	}
	m.mu.Unlock()
	s.writeReports(frames)
}
