package transporttest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/vrnic/vrnicd/header"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/transport/wire"
)

// Faults are the link's misbehaviours, each a probability per frame.
type Faults struct {
	Loss      float64
	Reorder   float64 // the frame overtakes up to ReorderDepth frames queued before it
	Duplicate float64
	Corrupt   float64 // one random bit flips (the receiver's ICRC check drops it)
	// ReorderDepth bounds how far a reordered frame moves (default 8).
	ReorderDepth int
	// Drop, if set, is asked about every frame first; true drops it. Tests
	// use it to drop one chosen packet. The frame is valid only during the
	// call (bufs.go).
	Drop func(f *Frame) bool
}

// Frame is one packet on the simulated wire.
type Frame struct {
	IP   []byte // IPv4 header, UDP header, transport packet with ICRC
	From *Node
	To   *Node
	Pkt  wire.Packet // parsed view of the transport packet, valid in Drop and taps
}

// Stats counts what the link did.
type Stats struct {
	Sent, Delivered, Lost, Reordered, Duplicated, Corrupted, ICRCDropped, NoQP int
}

// Net is a simulated Ethernet segment of nodes, each with its own memory
// table and QPs. Everything runs on the caller's goroutine.
type Net struct {
	Clock   *ManualClock
	Faults  Faults
	Latency time.Duration // the clock advances this much per delivered frame
	Stats   Stats
	// Tap, if set, sees every frame as it is delivered (after faults); the
	// frame is recycled after the call (bufs.go).
	Tap func(f *Frame)

	rng    *rand.Rand
	nodes  []*Node
	byAddr map[[16]byte]*Node
	queue  []*Frame

	freeBufs   [][]byte // bufs.go
	freeFrames []*Frame
}

// NewNet makes an empty segment whose faults draw from seed.
func NewNet(seed uint64) *Net {
	return &Net{
		Clock:  NewManualClock(),
		rng:    rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		byAddr: map[[16]byte]*Node{},
	}
}

// Node is one simulated device.
type Node struct {
	Net      *Net
	Addr     netip.Addr // IPv4
	GID      [16]byte   // ::ffff:Addr
	Mem      *mem.Table
	Env      *transport.Env
	Counters transport.Counters
	QPs      map[uint32]*transport.QP
	nextQPN  uint32
	owners   map[*transport.QP]*owner
}

// owner is what the device's owner of a QP knows: which of its sides were
// woken since they last ran, and when the send side asked to run again.
// RunQPs runs a side only then, as the device does (a doorbell, a packet,
// a deadline, a hook), so an engine that forgets to ask for a wake-up
// stalls here as it would in the daemon.
type owner struct {
	send, recv bool
	next       time.Time // the send side's requested wake-up; zero: none
}

// AddNode adds a device with IPv4 address 192.0.2.<n>.
func (n *Net) AddNode() *Node {
	i := len(n.nodes) + 1
	addr := netip.AddrFrom4([4]byte{192, 0, 2, byte(i)})
	nd := &Node{Net: n, Addr: addr, GID: addr.As16(), Mem: mem.NewTable(mem.Config{KeyByte: func() uint8 { return uint8(n.rng.Uint32()) }}),
		QPs: map[uint32]*transport.QP{}, nextQPN: 0x11, owners: map[*transport.QP]*owner{}}
	nd.Env = &transport.Env{Clock: n.Clock, Memory: nd.Mem, Out: (*output)(nd), Device: &nd.Counters, PortMTU: func() transport.MTU { return transport.MTU1024 }}
	n.nodes = append(n.nodes, nd)
	n.byAddr[nd.GID] = nd
	return nd
}

// NewQP creates a QP on the node with the next QPN (or qpn if non-zero).
func (nd *Node) NewQP(cfg transport.QPConfig) (*transport.QP, error) {
	if cfg.QPN == 0 {
		cfg.QPN = nd.nextQPN
		nd.nextQPN++
	}
	if _, dup := nd.QPs[cfg.QPN]; dup {
		return nil, fmt.Errorf("QPN %#x in use", cfg.QPN)
	}
	o := &owner{}
	cfg.Hooks.WakeSend = chain(cfg.Hooks.WakeSend, func() { o.send = true })
	cfg.Hooks.WakeRecv = chain(cfg.Hooks.WakeRecv, func() { o.recv = true })
	q, err := transport.NewQP(nd.Env, cfg)
	if err != nil {
		return nil, err
	}
	nd.QPs[cfg.QPN] = q
	nd.owners[q] = o
	return q, nil
}

func chain(f, g func()) func() {
	if f == nil {
		return g
	}
	return func() { f(); g() }
}

// Doorbell wakes both sides of q, as the device's doorbell does after a
// client posted to q's rings. A test that posts on the engine directly
// (q.PostSend) rings it; Endpoint.PostSend and PostRecv do it themselves.
func (nd *Node) Doorbell(q *transport.QP) {
	if o := nd.owners[q]; o != nil {
		o.send, o.recv = true, true
	}
}

// AV is an address vector from nd to peer, as rc_pingpong sets it.
func (nd *Node) AV(peer *Node) transport.AddressVector {
	return transport.AddressVector{DGID: peer.GID, SGID: nd.GID, SGIDIndex: 1, HopLimit: 64, Port: 1}
}

// output is a node's transport.Output: it writes IPv4 and UDP headers into
// the headroom, seals the ICRC and puts the frame on the wire.
type output Node

const headroom = header.IPv4HeaderLen + header.UDPHeaderLen

func (o *output) Headroom() int      { return headroom }
func (o *output) Alloc(n int) []byte { return o.Net.alloc(headroom + n) }

func (o *output) Send(pkts []transport.TxPacket) {
	nd := (*Node)(o)
	for i := range pkts {
		p := &pkts[i]
		to := nd.Net.byAddr[p.AV.DGID]
		ip := p.Buf[p.Headroom-headroom:]
		buildIPv4UDP(ip, nd.GID, p.AV.DGID, p.AV.HopLimit, p.AV.TrafficClass, p.SrcPort)
		if err := wire.PutICRC(ip); err != nil {
			panic(err) // the engine built a packet too short for a BTH: a bug
		}
		f := nd.Net.newFrame()
		f.IP, f.From, f.To = ip, nd, to
		nd.Net.put(f)
	}
}

// buildIPv4UDP writes the IPv4 and UDP headers kernel rxe would
// (prepare_ipv4_hdr, prepare_udp_hdr: DF, no UDP checksum) in front of the
// BTH at ip[headroom:].
func buildIPv4UDP(ip []byte, src, dst [16]byte, ttl, tos uint8, sport uint16) {
	n := len(ip)
	header.IPv4(ip).Encode(&header.IPv4Fields{TOS: tos, TotalLen: uint16(n), Flags: header.IPv4DontFragment,
		TTL: ttl, Protocol: header.IPProtoUDP, Src: [4]byte(src[12:]), Dst: [4]byte(dst[12:])})
	header.UDP(ip[header.IPv4HeaderLen:]).Encode(sport, wire.RoCEv2Port, uint16(n-header.IPv4HeaderLen))
}

func (n *Net) put(f *Frame) {
	n.Stats.Sent++
	if f.To == nil {
		n.Stats.NoQP++
		n.release(f)
		return
	}
	if n.Faults.Drop != nil {
		_ = f.Pkt.Parse(f.IP[headroom:])
		if n.Faults.Drop(f) {
			n.Stats.Lost++
			n.release(f)
			return
		}
	}
	if n.chance(n.Faults.Loss) {
		n.Stats.Lost++
		n.release(f)
		return
	}
	if n.chance(n.Faults.Corrupt) {
		n.Stats.Corrupted++
		bit := n.rng.IntN(len(f.IP) * 8)
		f.IP[bit/8] ^= 1 << (bit % 8)
	}
	n.enqueue(f)
	if n.chance(n.Faults.Duplicate) {
		n.Stats.Duplicated++
		d := n.newFrame()
		*d = *f
		d.IP = append(n.alloc(len(f.IP))[:0], f.IP...)
		n.enqueue(d)
	}
}

func (n *Net) enqueue(f *Frame) {
	n.queue = append(n.queue, f)
	if n.chance(n.Faults.Reorder) && len(n.queue) > 1 {
		depth := n.Faults.ReorderDepth
		if depth <= 0 {
			depth = 8
		}
		k := 1 + n.rng.IntN(min(depth, len(n.queue)-1))
		i := len(n.queue) - 1
		copy(n.queue[i-k+1:], n.queue[i-k:i])
		n.queue[i-k] = f
		n.Stats.Reordered++
	}
}

func (n *Net) chance(p float64) bool { return p > 0 && n.rng.Float64() < p }

// Step delivers the oldest frame on the wire. It returns false if the wire
// is empty.
func (n *Net) Step() bool {
	if len(n.queue) == 0 {
		return false
	}
	f := n.queue[0]
	n.queue[0] = nil
	n.queue = n.queue[1:]
	if n.Latency > 0 {
		n.Clock.Advance(n.Latency)
	}
	n.deliver(f)
	n.release(f)
	return true
}

// InFlight is the number of frames on the wire.
func (n *Net) InFlight() int { return len(n.queue) }

func (n *Net) deliver(f *Frame) {
	to := f.To
	if err := wire.VerifyICRC(f.IP); err != nil {
		n.Stats.ICRCDropped++
		to.Counters.Inc(transport.ICRCErrors)
		return
	}
	var rx transport.RxPacket
	if err := rx.Packet.Parse(f.IP[headroom:]); err != nil {
		n.Stats.ICRCDropped++
		return
	}
	f.Pkt = rx.Packet
	if n.Tap != nil {
		n.Tap(f)
	}
	rx.SrcGID = f.From.GID
	rx.DstGID = to.GID
	rx.IPHeader = f.IP[:header.IPv4HeaderLen]
	rx.SrcPort = binary.BigEndian.Uint16(f.IP[20:])
	q := to.QPs[rx.BTH.DestQP()]
	if q == nil {
		n.Stats.NoQP++
		return
	}
	n.Stats.Delivered++
	o := to.owners[q]
	if rx.Op.Flags&wire.FlagRequest != 0 {
		q.HandleRequest(&rx)
		o.recv = true
	} else {
		q.HandleResponse(&rx)
		o.send = true
	}
}

// RunQPs runs the owners that have been woken (by a doorbell, a delivered
// packet, a hook, or a deadline the send side asked for that has come),
// each once, as the device does, and returns the earliest time one of them
// asked to run again (zero: none). A side is never run just because it
// might have something to do: work it leaves without asking to be woken
// is a stall, and Run reports it.
func (n *Net) RunQPs() time.Time {
	now := n.Clock.Now()
	var next time.Time
	for _, nd := range n.nodes {
		for _, q := range nd.QPs {
			o := nd.owners[q]
			if o.recv {
				o.recv = false
				for range 1 << 16 {
					if !q.RunRecv() { // true: more to do now (the device polls again)
						break
					}
				}
			}
			if o.send || (!o.next.IsZero() && !now.Before(o.next)) {
				o.send = false
				o.next = q.RunSend()
			}
			if t := o.next; !t.IsZero() && (next.IsZero() || t.Before(next)) {
				next = t
			}
		}
	}
	return next
}

// pending reports whether some owner was woken and has not run yet.
func (n *Net) pending() bool {
	for _, nd := range n.nodes {
		for _, o := range nd.owners {
			if o.send || o.recv {
				return true
			}
		}
	}
	return false
}

// ErrStalled means nothing is on the wire and no QP waits for a timer, but
// the run's goal was not reached.
var ErrStalled = errors.New("transporttest: stalled: wire empty, no timer pending")

// ErrTooLong means the run took more events than allowed.
var ErrTooLong = errors.New("transporttest: run exceeded its event budget")

// Run drives the network until done returns true: QPs run, frames are
// delivered one by one, and when the wire is empty the clock jumps to the
// next timer. maxEvents bounds the run.
func (n *Net) Run(done func() bool, maxEvents int) error {
	for range maxEvents {
		n.RunQPs()
		if done() {
			return nil
		}
		if n.Step() {
			continue
		}
		next := n.RunQPs()
		if done() {
			return nil
		}
		if n.InFlight() > 0 || n.pending() {
			continue
		}
		if next.IsZero() {
			return ErrStalled
		}
		n.Clock.AdvanceTo(next)
	}
	return ErrTooLong
}
