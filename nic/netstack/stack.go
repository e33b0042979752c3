package netstack

import (
	"context"
	"errors"
	"fmt"
	"github.com/vrnic/vrnicd/transport/clock"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netns"

	"github.com/vrnic/vrnicd/nic/gid"
	"github.com/vrnic/vrnicd/nic/link"
)

// Mode says who owns the interface's L2/L3 control plane.
type Mode int

const (
	// ModeTAP: the stack is the whole host on its link. It answers ARP,
	// IPv6 ND and ICMP/ICMPv6 echo for its addresses and resolves peers
	// itself.
	ModeTAP Mode = iota
	// ModeRaw: the kernel owns the interface (AF_PACKET on an existing
	// NIC). The stack uses the interface's own addresses and the kernel's
	// neighbour table (netlink), and keeps the kernel from answering UDP
	// 4791 with ICMP port unreachable.
	ModeRaw
)

func (m Mode) String() string {
	if m == ModeRaw {
		return "raw"
	}
	return "tap"
}

// FrameTap receives a copy of every RoCEv2 frame sent and received
// (pcapfile.Writer is one). WriteFrame must not keep frame.
type FrameTap interface {
	WriteFrame(frame []byte) error
}

// Config configures New.
type Config struct {
	Link link.Link
	Mode Mode
	// MAC is the source of every frame and the address ARP/ND answer with.
	// Default: Link.HardwareAddr().
	MAC net.HardwareAddr
	// Addrs are the NIC's addresses in TAP mode (IPv4 and IPv6). The
	// link-local fe80::/64 address from the MAC's EUI-64 is always added.
	// Ignored in raw mode, where the interface's addresses are used.
	Addrs []netip.Prefix
	// Deliver receives each batch of good RoCEv2 packets, on the Run
	// goroutine. See RxPacket for buffer ownership. Nil drops them.
	Deliver func(pkts []RxPacket)
	// OnAddrs is called with the full address list (link-local included)
	// at New and after every change (SetAddrs; netlink in raw mode). The
	// daemon wires it to gid.Table.Sync. In raw mode it is called from a
	// netlink goroutine, concurrently with Run and Send.
	OnAddrs func(addrs []netip.Addr)
	// Tap, if set, sees every RoCEv2 frame sent and received.
	Tap   FrameTap
	Neigh NeighConfig
	Clock clock.Clock // default the system clock
	// HopLimit used when a Dest leaves it 0; default 64.
	HopLimit uint8
	// ZeroUDP6Checksum sends IPv6 UDP checksum 0, as kernel rxe does (its
	// tunnel socket accepts 0). By default the checksum is computed, which
	// every receiver accepts.
	ZeroUDP6Checksum bool
	// NetNS (raw mode): the network namespace the interface lives in, for
	// netlink and the UDP 4791 guard sockets. Zero or netns.None(): the
	// caller's.
	NetNS netns.NsHandle
	// MaxGroups bounds the multicast groups joined (JoinGroup); default
	// DefaultMaxGroups, kernel rxe's max_mcast_grp.
	MaxGroups int
	Logger    *slog.Logger
}

// Stack is the L2/L3 layer of one NIC port over a Link.
type Stack struct {
	cfg   Config
	link  link.Link
	mac   [6]byte
	clock clock.Clock
	log   *slog.Logger
	neigh *neighTable
	addrs atomic.Pointer[addrSet]
	ctr   Counters
	kern  *kernel     // raw mode
	down  atomic.Bool // the link is down: Send drops (SetLinkUp)

	impair atomic.Pointer[impairer] // fault injection in force (impair.go)
	mc     *mcast                   // multicast groups (mcast.go)

	txPool sync.Pool // *[][]byte scratch for Send

	closeOnce sync.Once
	done      chan struct{}
}

// addrSet is an immutable snapshot of the NIC's addresses.
type addrSet struct {
	prefixes []netip.Prefix
	list     []netip.Addr // unzoned, link-local first
}

func (s *addrSet) has(a netip.Addr) bool {
	for _, x := range s.list {
		if x == a {
			return true
		}
	}
	return false
}

// source returns the first of our addresses in dst's family to send to dst
// from: for IPv6, one of the same scope (link-local or not) as dst, else
// the first of the other scope.
func (s *addrSet) source(dst netip.Addr) (netip.Addr, bool) {
	var ll netip.Addr
	for _, x := range s.list {
		if x.Is4() != dst.Is4() {
			continue
		}
		if x.Is6() && x.IsLinkLocalUnicast() != dst.IsLinkLocalUnicast() {
			if !ll.IsValid() {
				ll = x
			}
			continue
		}
		return x, true
	}
	return ll, ll.IsValid()
}

// New builds a stack over cfg.Link. In raw mode it also reads the
// interface's addresses and neighbours, subscribes to their changes and
// binds the UDP 4791 guard; those can fail, so errors come from here. The
// link is not read until Run.
func New(cfg Config) (*Stack, error) {
	if cfg.Link == nil {
		return nil, errors.New("netstack: no link")
	}
	if cfg.MAC == nil {
		cfg.MAC = cfg.Link.HardwareAddr()
	}
	if len(cfg.MAC) != 6 || cfg.MAC[0]&1 != 0 {
		return nil, fmt.Errorf("netstack: MAC %v is not a unicast Ethernet address", cfg.MAC)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	if cfg.HopLimit == 0 {
		cfg.HopLimit = 64
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Stack{
		cfg:   cfg,
		link:  cfg.Link,
		clock: cfg.Clock,
		log:   cfg.Logger.With("link", cfg.Link.Name()),
		done:  make(chan struct{}),
		mc:    newMcast(cfg.MaxGroups),
	}
	copy(s.mac[:], cfg.MAC)
	s.neigh = newNeighTable(cfg.Neigh, cfg.Clock, &s.ctr)
	s.neigh.flush = s.flushQueued
	s.txPool.New = func() any { b := make([][]byte, 0, 64); return &b }
	switch cfg.Mode {
	case ModeTAP:
		s.neigh.solicit = s.sendSolicit
		if err := s.SetAddrs(cfg.Addrs); err != nil {
			return nil, err
		}
	case ModeRaw:
		s.neigh.kernel = true
		k, err := openKernel(s, cfg.Link.Name(), cfg.NetNS)
		if err != nil {
			return nil, err
		}
		s.kern = k
		s.neigh.solicit = func(p probe) {
			if !p.unicast {
				// A resolution of ours starts now, whatever the kernel's
				// entry did before (one made while the link was down
				// waits a whole retrans_time for its next ARP).
				k.forgetUnresolved(p.ip)
			}
			k.trigger(p.ip)
		}
		s.neigh.recheck = k.lookup
	default:
		return nil, fmt.Errorf("netstack: unknown mode %d", cfg.Mode)
	}
	return s, nil
}

// SetAddrs replaces the NIC's addresses (TAP mode; raw mode follows the
// kernel). The EUI-64 link-local address is always kept.
func (s *Stack) SetAddrs(prefixes []netip.Prefix) error {
	if s.cfg.Mode == ModeRaw && s.kern != nil {
		return errors.New("netstack: raw mode follows the interface's addresses")
	}
	return s.setAddrs(prefixes)
}

func (s *Stack) setAddrs(prefixes []netip.Prefix) error {
	ll := netip.PrefixFrom(gid.LinkLocal(net.HardwareAddr(s.mac[:])), 64)
	set := &addrSet{prefixes: []netip.Prefix{ll}, list: []netip.Addr{ll.Addr()}}
	for _, p := range prefixes {
		if !p.IsValid() {
			return fmt.Errorf("netstack: invalid address %v", p)
		}
		a := p.Addr().WithZone("").Unmap()
		if a.IsMulticast() || a.IsUnspecified() || a.IsLoopback() {
			return fmt.Errorf("netstack: %v cannot be a NIC address", p)
		}
		if set.has(a) {
			continue
		}
		set.prefixes = append(set.prefixes, netip.PrefixFrom(a, p.Bits()))
		set.list = append(set.list, a)
	}
	old := s.addrs.Swap(set)
	if s.cfg.OnAddrs != nil && (old == nil || !slices.Equal(old.list, set.list)) {
		s.cfg.OnAddrs(slices.Clone(set.list))
	}
	return nil
}

// Addrs returns the current addresses, link-local first.
func (s *Stack) Addrs() []netip.Prefix { return slices.Clone(s.addrs.Load().prefixes) }

// MAC is the stack's Ethernet address.
func (s *Stack) MAC() net.HardwareAddr { return slices.Clone(s.mac[:]) }

// Mode reports the stack's mode.
func (s *Stack) Mode() Mode { return s.cfg.Mode }

// Counters returns the live counters.
func (s *Stack) Counters() *Counters { return &s.ctr }

// Neighbor reports the cached MAC of an on-link address (resolved entries
// only).
func (s *Stack) Neighbor(ip netip.Addr) (net.HardwareAddr, bool) {
	mac, st, ok := s.neigh.get(ip.WithZone("").Unmap())
	if !ok || st == nIncomplete {
		return nil, false
	}
	return slices.Clone(mac[:]), true
}

// Resolve starts resolving ip without sending anything else (e.g. when a
// QP gets its path), so the first packets need not wait.
func (s *Stack) Resolve(ip netip.Addr) {
	ip = ip.WithZone("").Unmap()
	if ip.IsValid() && !ip.IsMulticast() {
		s.neigh.resolve(ip)
	}
}

// Run reads the link until ctx is cancelled or the link is closed, and
// handles every frame: ARP/ND/echo in TAP mode, RoCEv2 to Deliver. On
// cancellation it closes the link to interrupt the blocked read. It returns
// nil on cancellation or link close, else the link's error. Run must be
// called once. A datapath worker that reads the link itself uses RxPoller
// instead.
func (s *Stack) Run(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.link.Close() })
	defer stop()
	if s.cfg.Mode == ModeTAP {
		s.announce()
	}
	r := s.newReceiver()
	for {
		k, err := s.link.Read(r.bufs, r.sizes, 0)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		r.handle(k, s.cfg.Deliver)
	}
}

// receiver holds the buffers of one reader of the link.
type receiver struct {
	s     *Stack
	bufs  [][]byte
	sizes []int
	rx    []RxPacket
}

func (s *Stack) newReceiver() *receiver { return s.newReceiverFor(s.link) }

func (s *Stack) newReceiverFor(l link.Link) *receiver {
	n := l.BatchSize()
	r := &receiver{s: s, bufs: make([][]byte, n), sizes: make([]int, n), rx: make([]RxPacket, 0, n)}
	for i := range r.bufs {
		// Room for a VLAN tag's worth of slack beyond the MTU so an
		// oversized frame shows as oversized, not truncated; and for
		// the largest RoCEv2 packet whatever the MTU is now, since it
		// may grow (the link follows its interface's).
		r.bufs[i] = make([]byte, link.EthernetHeaderLen+max(s.link.MTU(), link.MaxRoCEPacket)+4)
	}
	return r
}

// handle takes k frames just read: control traffic is answered, RoCEv2
// packets go to deliver in one batch, valid until it returns.
func (r *receiver) handle(k int, deliver func([]RxPacket)) {
	r.rx = r.rx[:0]
	for i := range k {
		r.s.ctr.FramesIn.Add(1)
		if pkt, ok := r.s.input(r.bufs[i][:r.sizes[i]]); ok {
			r.rx = append(r.rx, pkt)
			if pkt.dup {
				r.rx = append(r.rx, pkt)
			}
		}
	}
	if len(r.rx) > 0 && deliver != nil {
		deliver(r.rx)
	}
}

// handleFrame is handle for one frame still in the link's receive ring: a
// RoCEv2 packet goes to deliver at once, in place, since the slot goes
// back to the kernel when this returns.
func (r *receiver) handleFrame(f []byte, deliver func([]RxPacket)) {
	r.s.ctr.FramesIn.Add(1)
	if pkt, ok := r.s.input(f); ok && deliver != nil {
		r.rx = append(r.rx[:0], pkt)
		if pkt.dup {
			r.rx = append(r.rx, pkt)
		}
		deliver(r.rx)
	}
}

// RxPoller is the receive side of the stack for a run-to-completion worker
// that owns the link's reads (a link.Poller: raw and TAP links): Poll
// takes what is ready without waiting, Wait sleeps until a frame is ready,
// Wake ends the sleep from any goroutine. One goroutine polls.
type RxPoller struct {
	r    *receiver
	p    link.Poller
	ring link.RingReader // set when the link receives into a ring: no copy out

	deliver func([]RxPacket) // Poll's, for onFrame
	onFrame func([]byte)     // made once: ReadRing's callback
}

func (s *Stack) newRxPoller(l link.Link, p link.Poller) *RxPoller {
	rp := &RxPoller{r: s.newReceiverFor(l), p: p}
	if rr, ok := l.(link.RingReader); ok && rr.HasRing() {
		rp.ring = rr
		rp.onFrame = func(f []byte) { rp.r.handleFrame(f, rp.deliver) }
	}
	return rp
}

// RxPoller returns the stack's poller, or false if its link cannot be
// polled (Run serves it then). In TAP mode it announces the stack's
// addresses first, as Run does when it starts.
func (s *Stack) RxPoller() (*RxPoller, bool) {
	p, ok := s.link.(link.Poller)
	if !ok {
		return nil, false
	}
	if s.cfg.Mode == ModeTAP {
		s.announce()
	}
	return s.newRxPoller(s.link, p), true
}

// RxPollerOn is RxPoller for another socket on the stack's interface (a
// PACKET_FANOUT member, link.OpenRawFanout): a second worker reads it,
// and its frames are handled as the stack's own.
func (s *Stack) RxPollerOn(l link.Link) (*RxPoller, bool) {
	p, ok := l.(link.Poller)
	if !ok {
		return nil, false
	}
	return s.newRxPoller(l, p), true
}

// Poll reads one batch of the frames ready, answers control traffic and
// hands the RoCEv2 packets to deliver (on the caller; valid until it
// returns). It returns the frames read, 0 when none was ready.
func (p *RxPoller) Poll(deliver func([]RxPacket)) (int, error) {
	if p.ring != nil {
		// In the ring's slots: the payload goes from there to the
		// engine (and into the MR) without a copy into a buffer first.
		p.deliver = deliver
		n, err := p.ring.ReadRing(len(p.r.bufs), p.onFrame)
		p.deliver = nil
		return n, err
	}
	k, err := p.p.TryRead(p.r.bufs, p.r.sizes, 0)
	if k > 0 {
		p.r.handle(k, deliver)
	}
	return k, err
}

// Wait sleeps until a frame is ready, timeout passes (negative: no limit)
// or Wake is called.
func (p *RxPoller) Wait(timeout time.Duration) error {
	_, err := p.p.WaitReadable(timeout)
	return err
}

// Wake ends a Wait in progress, or else the next one.
func (p *RxPoller) Wake() { p.p.Wake() }

// PollFD is the link's descriptor, for a link.WaitSet on which a worker
// sleeps on it and its doorbells at once (see link.Poller.PollFD).
func (p *RxPoller) PollFD() (int, error) { return p.p.PollFD() }

// PollError is the error the descriptor's EPOLLERR stands for, nil if
// none is pending.
func (p *RxPoller) PollError() error { return p.p.PollError() }

// Close stops timers and (raw mode) the netlink watchers, guard sockets
// and multicast membership sockets (the kernel leaves the groups; TAP mode
// sends the leaves itself, so close the link after). It does not close
// the link, which belongs to the caller.
func (s *Stack) Close() error {
	s.closeOnce.Do(func() {
		close(s.done)
		s.neigh.stop()
		s.closeMcast()
		if s.kern != nil {
			s.kern.close()
		}
	})
	return nil
}

// write sends control frames (ARP, ND, echo replies). Callers count a
// frame before they write it: whoever sees the frame on the wire then
// finds it counted (TestEcho read EchoReplies one short now and then).
func (s *Stack) write(frames ...[]byte) {
	n, err := s.link.Write(frames, 0)
	s.ctr.FramesOut.Add(uint64(n))
	if err != nil {
		s.ctr.TxErrors.Add(uint64(len(frames) - n))
		s.log.Debug("write failed", "err", err)
	}
}

// SetLinkUp tells the stack its link's state. Down: what Send is given is
// dropped and counted (tx_link_down), and so are frames queued for
// neighbours, which would otherwise leave late, once it is up again. Up:
// neighbours still being resolved are probed at once (raw mode: the
// kernel's unresolved entries are replaced, as by every resolution of
// ours), not on their retry timer, and
// in TAP mode the multicast groups are announced again.
func (s *Stack) SetLinkUp(up bool) {
	wasDown := s.down.Swap(!up)
	if !up {
		s.ctr.TxLinkDown.Add(uint64(s.neigh.dropQueued()))
		return
	}
	s.neigh.reprobe()
	if wasDown {
		s.reannounce()
	}
}
