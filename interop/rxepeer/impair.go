package rxepeer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Impair forwards Ethernet frames between two devices of a namespace in
// user space and drops, duplicates, holds back (reorders) or delays them as
// told: netem's job, for kernels without sch_netem (like the one these
// tests were written on), and deterministic when a Decide hook or a Seed is
// given. Typical use: Options.Impaired puts one between a guest's TAP and
// the bridge (VM.Impair).
//
// One goroutine per direction owns that direction's state; settings change
// atomically with Set.
type Impair struct {
	dirs    [2]*impairDir
	fwd, tx sync.WaitGroup // forward goroutines; delay-line senders
	stop    atomic.Bool
}

// Direction of an Impair: AtoB forwards what device a receives out of b.
type Direction int

const (
	AtoB Direction = iota
	BtoA
)

// Action is what happens to one frame.
type Action int

const (
	Pass      Action = iota
	Drop             // never forwarded
	Duplicate        // forwarded twice
	Hold             // forwarded after the next frame of its direction (or HoldMax later)
)

// Impairment is one direction's setting. The zero value forwards everything.
type Impairment struct {
	// Match selects the frames to impair (nil: all); others pass, in order
	// (IsRoCEv2 impairs RoCEv2 only, leaving ARP and TCP alone).
	Match func(frame []byte) bool
	// Decide, if set, picks the action for the i-th matching frame (from 0)
	// and the probabilities below are not used.
	Decide func(i int, frame []byte) Action
	// Probabilities (0..1) of Drop, Duplicate and Hold for a matching frame.
	Loss, Duplicates, Reorder float64
	// Seed of the random choices (0: a fixed default, so runs repeat).
	Seed uint64
	// Delay is added to every forwarded frame of the direction (order kept).
	Delay time.Duration
	// HoldMax bounds how long a held frame waits for a successor (default
	// 20 ms); then it goes out alone, late.
	HoldMax time.Duration
}

// ImpairStats counts one direction's frames.
type ImpairStats struct {
	Seen, Matched, Dropped, Duplicated, Held, Sent uint64
}

type impairDir struct {
	from, to *PacketConn
	set      atomic.Pointer[Impairment]
	newSet   atomic.Bool
	stats    struct{ seen, matched, dropped, duplicated, held, sent atomic.Uint64 }
	delayQ   chan delayed
	err      atomic.Pointer[error]
}

type delayed struct {
	due   time.Time
	frame []byte
}

// NewImpair starts forwarding between devices a and b (neither should be a
// bridge port with a path of its own between them, or frames loop). Both
// get their own AF_PACKET sockets; Close stops it.
func (n *Netns) NewImpair(a, b string) (*Impair, error) {
	pa, err := n.packetSocket(a, true)
	if err != nil {
		return nil, err
	}
	pb, err := n.packetSocket(b, true)
	if err != nil {
		pa.Close()
		return nil, err
	}
	im := &Impair{}
	im.dirs[AtoB] = &impairDir{from: pa, to: pb, delayQ: make(chan delayed, 4096)}
	im.dirs[BtoA] = &impairDir{from: pb, to: pa, delayQ: make(chan delayed, 4096)}
	for _, d := range im.dirs {
		d.set.Store(&Impairment{})
		im.fwd.Add(1)
		im.tx.Add(1)
		go func() { defer im.fwd.Done(); im.forward(d) }()
		go func() { defer im.tx.Done(); im.sendDelayed(d) }()
	}
	return im, nil
}

// Set replaces one direction's impairment; its counters of matching frames
// (Decide's i) and the random source restart.
func (im *Impair) Set(dir Direction, p Impairment) {
	im.dirs[dir].set.Store(&p)
	im.dirs[dir].newSet.Store(true)
}

// Clear makes both directions forward everything again.
func (im *Impair) Clear() {
	im.Set(AtoB, Impairment{})
	im.Set(BtoA, Impairment{})
}

// Stats returns a direction's counters.
func (im *Impair) Stats(dir Direction) ImpairStats {
	s := &im.dirs[dir].stats
	return ImpairStats{s.seen.Load(), s.matched.Load(), s.dropped.Load(), s.duplicated.Load(), s.held.Load(), s.sent.Load()}
}

// Err returns the first send or receive error of either direction.
func (im *Impair) Err() error {
	for _, d := range im.dirs {
		if e := d.err.Load(); e != nil {
			return *e
		}
	}
	return nil
}

// Close stops forwarding and closes the sockets.
func (im *Impair) Close() error {
	if im.stop.Swap(true) {
		return nil
	}
	im.fwd.Wait() // within one receive timeout (100 ms)
	for _, d := range im.dirs {
		close(d.delayQ) // nobody queues any more
	}
	im.tx.Wait()
	for _, d := range im.dirs {
		d.from.Close()
	}
	return nil
}

func (d *impairDir) fail(err error) {
	d.err.CompareAndSwap(nil, &err)
}

// forward is the direction's owner: it receives, decides and emits.
func (im *Impair) forward(d *impairDir) {
	buf := make([]byte, 65536)
	var (
		p       *Impairment
		rng     *rand.Rand
		matched int
		held    []byte
		heldAt  time.Time
	)
	load := func() {
		p = d.set.Load()
		seed := p.Seed
		if seed == 0 {
			seed = 0x7672_6e69_6364 // "vrnicd"
		}
		rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		matched = 0
	}
	load()
	emit := func(f []byte) {
		if p.Delay > 0 {
			d.delayQ <- delayed{time.Now().Add(p.Delay), f}
			return
		}
		d.send(f)
	}
	holdMax := func() time.Duration {
		if p.HoldMax > 0 {
			return p.HoldMax
		}
		return 20 * time.Millisecond
	}
	for !im.stop.Load() {
		if d.newSet.Swap(false) {
			load()
		}
		wait := 100 * time.Millisecond
		if held != nil {
			wait = max(time.Until(heldAt.Add(holdMax())), time.Millisecond)
		}
		n, outgoing, err := d.from.Recv(buf, wait)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EWOULDBLOCK) {
				if held != nil && time.Since(heldAt) >= holdMax() {
					emit(held)
					held = nil
				}
				continue
			}
			if !im.stop.Load() {
				d.fail(fmt.Errorf("rxepeer: impair: receive: %w", err))
			}
			return
		}
		if outgoing {
			continue // our own transmissions on this device
		}
		// After the receive: a frame sent after Set returned gets the new
		// setting even if the receive began before.
		if d.newSet.Swap(false) {
			load()
		}
		if n < vnetHdrLen+14 {
			continue
		}
		d.stats.seen.Add(1)
		// f is virtio_net_hdr + frame, passed on whole; the hooks see the frame.
		f := append([]byte(nil), buf[:n]...)
		eth := f[vnetHdrLen:]
		act := Pass
		if p.Match == nil || p.Match(eth) {
			d.stats.matched.Add(1)
			switch {
			case p.Decide != nil:
				act = p.Decide(matched, eth)
			default:
				r := rng.Float64()
				switch {
				case r < p.Loss:
					act = Drop
				case r < p.Loss+p.Duplicates:
					act = Duplicate
				case r < p.Loss+p.Duplicates+p.Reorder:
					act = Hold
				}
			}
			matched++
		}
		switch act {
		case Drop:
			d.stats.dropped.Add(1)
		case Duplicate:
			d.stats.duplicated.Add(1)
			emit(f)
			emit(f)
		case Hold:
			d.stats.held.Add(1)
			if held != nil { // one slot: the older one goes now
				emit(held)
			}
			held, heldAt = f, time.Now()
		default:
			emit(f)
		}
		if held != nil && act != Hold {
			emit(held) // the held frame goes out after this one: reordered
			held = nil
		}
	}
}

// sendDelayed emits delayed frames in arrival order when they are due.
func (im *Impair) sendDelayed(d *impairDir) {
	for x := range d.delayQ {
		if im.stop.Load() {
			continue // drain
		}
		if w := time.Until(x.due); w > 0 {
			time.Sleep(w)
		}
		d.send(x.frame)
	}
}

func (d *impairDir) send(f []byte) {
	if err := d.to.Send(f); err != nil {
		d.fail(fmt.Errorf("rxepeer: impair: send: %w", err))
		return
	}
	d.stats.sent.Add(1)
}

// IsRoCEv2 reports an Ethernet frame carrying IPv4 or IPv6 UDP to port 4791.
func IsRoCEv2(f []byte) bool {
	if len(f) < 14 {
		return false
	}
	switch binary.BigEndian.Uint16(f[12:]) {
	case 0x0800:
		ip := f[14:]
		if len(ip) < 20 || ip[0]>>4 != 4 || ip[9] != 17 {
			return false
		}
		hl := int(ip[0]&0x0f) * 4
		return len(ip) >= hl+8 && binary.BigEndian.Uint16(ip[hl+2:]) == 4791
	case 0x86dd:
		ip := f[14:]
		return len(ip) >= 48 && ip[6] == 17 && binary.BigEndian.Uint16(ip[42:]) == 4791
	}
	return false
}
