package netstack

import (
	"github.com/vrnic/vrnicd/transport/clock"
	"net/netip"
	"sync"
	"time"
)

// NeighConfig tunes the neighbour cache. Zero fields take the defaults in
// brackets, which are Linux's.
type NeighConfig struct {
	// ReachableTime: how long a confirmed entry is used without re-probing
	// [30s]. After it the entry is stale: still used, and each use at most
	// every RetransTime sends a unicast probe.
	ReachableTime time.Duration
	// RetransTime between probes [1s].
	RetransTime time.Duration
	// MaxProbes sent before a neighbour counts as unreachable [3]: an
	// unresolved entry is then removed and its queued frames dropped; a
	// stale one starts over with broadcast/multicast resolution.
	MaxProbes int
	// QueueLen is the most frames held per unresolved neighbour [64]; more
	// are dropped (Counters.NeighQueueDrops).
	QueueLen int
	// MaxEntries bounds the cache [1024]; when full, the oldest resolved
	// entry is evicted, and new unresolved ones are refused.
	MaxEntries int
}

func (c *NeighConfig) setDefaults() {
	if c.ReachableTime <= 0 {
		c.ReachableTime = 30 * time.Second
	}
	if c.RetransTime <= 0 {
		c.RetransTime = time.Second
	}
	if c.MaxProbes <= 0 {
		c.MaxProbes = 3
	}
	if c.QueueLen <= 0 {
		c.QueueLen = 64
	}
	if c.MaxEntries <= 0 {
		c.MaxEntries = 1024
	}
}

type nstate uint8

const (
	nIncomplete nstate = iota // resolving; frames queue
	nReachable                // confirmed within ReachableTime
	nStale                    // usable; re-probe on use
)

type neighbor struct {
	mac       [6]byte
	state     nstate
	updated   time.Time // last confirmation (or creation)
	probes    int       // probes sent in the current round
	lastProbe time.Time
	queue     [][]byte // whole frames waiting for the MAC (dst MAC unset)
	timer     clock.Timer
}

// probe is a solicitation to send once the table lock is released.
type probe struct {
	ip      netip.Addr
	unicast bool // to mac (stale re-probe) rather than broadcast/multicast
	mac     [6]byte
}

// neighTable maps on-link IP addresses to MACs. In TAP mode the stack fills
// it from ARP and ND; in raw mode (kernel true) it mirrors the kernel's
// neighbour table and asks the kernel to resolve.
type neighTable struct {
	mu     sync.RWMutex
	m      map[netip.Addr]*neighbor
	cfg    NeighConfig
	clock  clock.Clock
	kernel bool
	ctr    *Counters

	solicit func(p probe)                       // sends a probe (TAP) or asks the kernel (raw)
	flush   func(frames [][]byte, mac [6]byte)  // sends frames once resolved
	recheck func(ip netip.Addr) ([6]byte, bool) // raw mode: ask the kernel directly
}

func newNeighTable(cfg NeighConfig, clk clock.Clock, ctr *Counters) *neighTable {
	cfg.setDefaults()
	return &neighTable{m: map[netip.Addr]*neighbor{}, cfg: cfg, clock: clk, ctr: ctr}
}

// lookup returns ip's MAC if usable. It is the send fast path: a read lock,
// except when a stale entry needs a probe.
func (t *neighTable) lookup(ip netip.Addr) ([6]byte, bool) {
	now := t.clock.Now()
	t.mu.RLock()
	n := t.m[ip]
	if n != nil && n.state == nReachable && (t.kernel || now.Sub(n.updated) < t.cfg.ReachableTime) {
		mac := n.mac
		t.mu.RUnlock()
		return mac, true
	}
	t.mu.RUnlock()
	if n == nil {
		return [6]byte{}, false
	}
	// Stale (or just expired): use it, re-probing at most every RetransTime.
	t.mu.Lock()
	n = t.m[ip]
	if n == nil || n.state == nIncomplete {
		t.mu.Unlock()
		return [6]byte{}, false
	}
	if n.state == nReachable && !t.kernel && now.Sub(n.updated) >= t.cfg.ReachableTime {
		n.state, n.probes = nStale, 0
	}
	var p *probe
	if n.state == nStale && now.Sub(n.lastProbe) >= t.cfg.RetransTime {
		if !t.kernel && n.probes >= t.cfg.MaxProbes {
			// Unicast probes went unanswered: resolve afresh.
			n.state, n.probes = nIncomplete, 0
			p := t.startLocked(ip, n, now, t.cfg.RetransTime)
			t.mu.Unlock()
			t.solicit(p)
			return [6]byte{}, false
		}
		n.probes++
		n.lastProbe = now
		p = &probe{ip: ip, unicast: true, mac: n.mac}
	}
	mac := n.mac
	t.mu.Unlock()
	if p != nil {
		t.solicit(*p)
	}
	return mac, true
}

// enqueue holds frames for ip until it resolves, starting resolution if
// needed. It returns the MAC instead (and queues nothing) if ip resolved
// meanwhile. Queued frames are copied.
func (t *neighTable) enqueue(ip netip.Addr, frames [][]byte) ([6]byte, bool) {
	now := t.clock.Now()
	t.mu.Lock()
	n := t.m[ip]
	if n != nil && n.state != nIncomplete {
		mac := n.mac
		t.mu.Unlock()
		return mac, true
	}
	t.ctr.NeighMisses.Add(uint64(len(frames)))
	start := false
	if n == nil {
		if !t.makeRoomLocked() {
			t.mu.Unlock()
			t.ctr.NeighQueueDrops.Add(uint64(len(frames)))
			return [6]byte{}, false
		}
		n = &neighbor{state: nIncomplete, updated: now}
		t.m[ip] = n
		start = true
	}
	for _, f := range frames {
		if len(n.queue) >= t.cfg.QueueLen {
			t.ctr.NeighQueueDrops.Add(1)
			continue
		}
		n.queue = append(n.queue, append([]byte(nil), f...))
	}
	if !start {
		t.mu.Unlock()
		return [6]byte{}, false
	}
	p := t.startLocked(ip, n, now, t.cfg.RetransTime)
	t.mu.Unlock()
	t.solicit(p)
	return [6]byte{}, false
}

// resolve starts resolution of ip without queueing anything.
func (t *neighTable) resolve(ip netip.Addr) {
	if _, ok := t.lookup(ip); ok {
		return
	}
	t.enqueue(ip, nil)
}

// startLocked begins a resolution round: it arms the retry timer (first
// retry after wait) and returns the first probe, which the caller sends
// after unlocking (no link write happens under the lock).
func (t *neighTable) startLocked(ip netip.Addr, n *neighbor, now time.Time, wait time.Duration) probe {
	n.probes = 1
	n.lastProbe = now
	if n.timer != nil {
		n.timer.Stop()
	}
	n.timer = t.clock.AfterFunc(wait, func() { t.retry(ip, n) })
	return probe{ip: ip}
}

// retry runs RetransTime after each probe of an unresolved entry.
func (t *neighTable) retry(ip netip.Addr, n *neighbor) {
	if t.kernel && t.recheck != nil {
		if mac, ok := t.recheck(ip); ok {
			t.confirm(ip, mac, false)
			return
		}
	}
	t.mu.Lock()
	if t.m[ip] != n || n.state != nIncomplete {
		t.mu.Unlock()
		return
	}
	if n.probes >= t.cfg.MaxProbes {
		delete(t.m, ip)
		dropped := len(n.queue)
		n.queue = nil
		t.mu.Unlock()
		t.ctr.NeighUnresolvedDrops.Add(uint64(dropped))
		return
	}
	n.probes++
	n.lastProbe = t.clock.Now()
	n.timer = t.clock.AfterFunc(t.cfg.RetransTime, func() { t.retry(ip, n) })
	t.mu.Unlock()
	t.solicit(probe{ip: ip})
}

// confirm records that ip is at mac. create adds an entry when there is
// none (an ARP request or NS addressed to us, or a kernel entry); otherwise
// only known entries are updated, so unsolicited replies cannot fill the
// cache. Queued frames are sent.
func (t *neighTable) confirm(ip netip.Addr, mac [6]byte, create bool) {
	t.setState(ip, mac, nReachable, create)
}

// setState is confirm with an explicit state (nStale for learned-but-not-
// confirmed, as RFC 4861 wants for an NS's source link-layer address).
func (t *neighTable) setState(ip netip.Addr, mac [6]byte, st nstate, create bool) {
	now := t.clock.Now()
	t.mu.Lock()
	n := t.m[ip]
	if n == nil {
		if !create || !t.makeRoomLocked() {
			t.mu.Unlock()
			return
		}
		n = &neighbor{}
		t.m[ip] = n
	}
	if st == nStale && n.state == nReachable && n.mac == mac && !t.kernel {
		// A learned address (ARP request, NS) does not downgrade a
		// confirmed entry; the kernel's own STALE does.
		st = nReachable
	} else {
		n.updated = now
	}
	n.mac, n.state, n.probes = mac, st, 0
	if st == nStale {
		// Like Linux's DELAY: give traffic a RetransTime before probing.
		n.lastProbe = now
	}
	if n.timer != nil {
		n.timer.Stop()
		n.timer = nil
	}
	q := n.queue
	n.queue = nil
	t.mu.Unlock()
	if len(q) > 0 {
		t.flush(q, mac)
	}
}

// forget removes ip (kernel entry failed or deleted), dropping its queue.
func (t *neighTable) forget(ip netip.Addr) {
	t.mu.Lock()
	n := t.m[ip]
	if n == nil || (n.state == nIncomplete && t.kernel) {
		// An INCOMPLETE mirror keeps its own retry timer.
		t.mu.Unlock()
		return
	}
	delete(t.m, ip)
	if n.timer != nil {
		n.timer.Stop()
	}
	dropped := len(n.queue)
	t.mu.Unlock()
	t.ctr.NeighUnresolvedDrops.Add(uint64(dropped))
}

// makeRoomLocked ensures a slot for one more entry, evicting the
// least recently confirmed resolved entry.
func (t *neighTable) makeRoomLocked() bool {
	if len(t.m) < t.cfg.MaxEntries {
		return true
	}
	var oldest netip.Addr
	var ot time.Time
	for ip, n := range t.m {
		if n.state != nIncomplete && (!oldest.IsValid() || n.updated.Before(ot)) {
			oldest, ot = ip, n.updated
		}
	}
	if !oldest.IsValid() {
		return false
	}
	delete(t.m, oldest)
	return true
}

// get reports ip's entry for diagnostics.
func (t *neighTable) get(ip netip.Addr) (mac [6]byte, st nstate, ok bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	n := t.m[ip]
	if n == nil {
		return mac, 0, false
	}
	return n.mac, n.state, true
}

// stop cancels every timer and drops every queue.
func (t *neighTable) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for ip, n := range t.m {
		if n.timer != nil {
			n.timer.Stop()
		}
		if n.state == nIncomplete {
			t.ctr.NeighUnresolvedDrops.Add(uint64(len(n.queue)))
			delete(t.m, ip)
		}
		n.queue = nil
	}
}

// reprobe starts a new resolution round at once for every neighbour still
// unresolved: its probes so far went out while the link was down and
// were lost, and the next one is up to RetransTime away. The first retry
// comes after upRetry, not RetransTime, and spends no probe: an answer
// lost to the peer's own end still coming up then costs a tenth of the
// usual wait, well inside an RC QP's retry budget.
func (t *neighTable) reprobe() {
	t.mu.Lock()
	var ps []probe
	now := t.clock.Now()
	for ip, n := range t.m {
		if n.state == nIncomplete {
			ps = append(ps, t.startLocked(ip, n, now, t.upRetry()))
			n.probes = 0
		}
	}
	t.mu.Unlock()
	for _, p := range ps {
		t.solicit(p)
	}
}

// upRetry is how soon the round after a link's return follows its first.
func (t *neighTable) upRetry() time.Duration { return t.cfg.RetransTime / 10 }

// dropQueued drops the frames queued for unresolved neighbours (the link
// went down: they would leave late, after it came back) and returns how
// many.
func (t *neighTable) dropQueued() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, e := range t.m {
		n += len(e.queue)
		clear(e.queue)
		e.queue = e.queue[:0]
	}
	return n
}
