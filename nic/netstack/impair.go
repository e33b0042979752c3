package netstack

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/vrnic/vrnicd/header"
	"github.com/vrnic/vrnicd/nic/link"
	"github.com/vrnic/vrnicd/transport/wire"
)

// Fault injection on RoCEv2 frames (vrnicctl impair): what netem would do,
// for kernels without it and for one QP at a time. Received frames are
// impaired before their checks (a corrupted one fails its ICRC as a
// corrupted frame from the wire would), sent ones after their ICRC is
// computed. Loss, duplication and corruption apply either way; reordering
// and delay hold frames back, which only the sending side can do without
// stalling the receive ring, so they apply to sent frames. Off by default,
// never saved: a restart ends it.

// Direction says which frames an Impairment touches.
type Direction uint8

const (
	DirBoth Direction = iota
	DirIn
	DirOut
)

func (d Direction) String() string {
	switch d {
	case DirIn:
		return "in"
	case DirOut:
		return "out"
	}
	return "both"
}

// Impairment is what is done to RoCEv2 frames, each a probability per
// frame (0 to 1).
type Impairment struct {
	Loss, Dup, Reorder, Corrupt float64
	Delay                       time.Duration // every sent frame held back this long
	QPN                         uint32        // 0: every QP; else received frames to it and frames it sends
	Dir                         Direction
}

// Bounds of an impairment: the delay, and the frames it may hold at once
// (beyond: dropped and counted, as a full queue drops).
const (
	MaxImpairDelay  = 10 * time.Second
	MaxImpairHeld   = 65536
	maxImpairHeldMB = 256
)

// Validate says whether im can be applied.
func (im *Impairment) Validate() error {
	for _, p := range []struct {
		n string
		v float64
	}{{"loss", im.Loss}, {"dup", im.Dup}, {"reorder", im.Reorder}, {"corrupt", im.Corrupt}} {
		if !(p.v >= 0 && p.v <= 1) {
			return fmt.Errorf("impairment: %s %v is not a probability (0 to 1)", p.n, p.v)
		}
	}
	if im.Delay < 0 || im.Delay > MaxImpairDelay {
		return fmt.Errorf("impairment: delay %v (0 to %v)", im.Delay, MaxImpairDelay)
	}
	if im.Dir > DirOut {
		return fmt.Errorf("impairment: direction %d", im.Dir)
	}
	if im.Dir == DirIn && (im.Delay > 0 || im.Reorder > 0) {
		return errors.New("impairment: delay and reordering hold frames back, which only sent frames can be: use direction out or both")
	}
	return nil
}

func (im *Impairment) in() bool  { return im.Dir != DirOut }
func (im *Impairment) out() bool { return im.Dir != DirIn }

// impairer is an active Impairment and its held frames.
type impairer struct {
	cfg Impairment
	s   *Stack

	mu      sync.Mutex
	held    []heldFrame // delayed frames in release order (constant delay: FIFO)
	bytes   int
	timer   *time.Timer
	stopped bool
}

type heldFrame struct {
	f  []byte
	at time.Time
}

// SetImpairment applies im to the RoCEv2 frames from now on; nil ends it
// (frames held for a delay still leave).
func (s *Stack) SetImpairment(im *Impairment) error {
	if im == nil {
		if old := s.impair.Swap(nil); old != nil {
			old.stop()
		}
		return nil
	}
	if err := im.Validate(); err != nil {
		return err
	}
	if old := s.impair.Swap(&impairer{cfg: *im, s: s}); old != nil {
		old.stop()
	}
	return nil
}

// Impairment is the impairment in force, if any.
func (s *Stack) Impairment() (Impairment, bool) {
	if im := s.impair.Load(); im != nil {
		return im.cfg, true
	}
	return Impairment{}, false
}

// matches says whether a frame's transport packet tp belongs to the QP
// the impairment is for: received frames by their destination QP, sent
// ones by the sending QP.
func (im *impairer) matches(qpn uint32) bool { return im.cfg.QPN == 0 || im.cfg.QPN == qpn }

func chance(p float64) bool { return p > 0 && rand.Float64() < p }

// flip inverts one random bit of b.
func flip(b []byte) {
	if len(b) > 0 {
		i := rand.IntN(len(b) * 8)
		b[i/8] ^= 1 << (i % 8)
	}
}

// corrupt flips one bit of a RoCEv2 packet (tp: BTH through ICRC) past
// its BTH: there every bit is covered by the ICRC, so the receiver's check
// always catches it (a flip in the BTH's reserved byte, masked out of the
// ICRC, would pass; one in the QPN would miss the impaired QP's filter).
func corrupt(tp []byte) {
	if len(tp) > wire.BTHLen {
		flip(tp[wire.BTHLen:])
	}
}

// corruptFrame is corrupt on an Ethernet frame carrying RoCEv2 over IPv4
// or IPv6.
func corruptFrame(f []byte) {
	ip := f[link.EthernetHeaderLen:]
	n := header.IPv4HeaderLen
	if len(ip) > 0 && ip[0]>>4 == 6 {
		n = header.IPv6HeaderLen
	} else if len(ip) > 0 {
		n = header.IPv4(ip).HeaderLen()
	}
	if len(ip) > n+header.UDPHeaderLen {
		corrupt(ip[n+header.UDPHeaderLen:])
	}
}

// rxVerdict decides about a received RoCEv2 packet (tp: BTH through ICRC):
// drop it, or deliver it once or twice (corrupted in place first, maybe).
func (s *Stack) rxVerdict(tp []byte) (drop, dup bool) {
	im := s.impair.Load()
	if im == nil || !im.cfg.in() || len(tp) < wire.BTHLen || !im.matches(wire.BTH(tp).DestQP()) {
		return false, false
	}
	if chance(im.cfg.Loss) {
		s.ctr.ImpairDropped.Add(1)
		return true, false
	}
	if chance(im.cfg.Corrupt) {
		s.ctr.ImpairCorrupted.Add(1)
		corrupt(tp)
	}
	if chance(im.cfg.Dup) {
		s.ctr.ImpairDuplicated.Add(1)
		return false, true
	}
	return false, false
}

// txImpair is Send's impairment of one batch: each frame of frames (with
// the QPN that sends it) is dropped, corrupted, duplicated, swapped with
// the next, or held for the delay, into out.
type txImpair struct {
	im      *impairer
	out     [][]byte
	swapped []byte // a frame waiting to go after the next one
}

func (s *Stack) txImpairer() *txImpair {
	im := s.impair.Load()
	if im == nil || !im.cfg.out() {
		return nil
	}
	return &txImpair{im: im}
}

func (t *txImpair) add(f []byte, qpn uint32) {
	im, ctr := t.im, &t.im.s.ctr
	if !im.matches(qpn) {
		t.emit(f)
		return
	}
	if chance(im.cfg.Loss) {
		ctr.ImpairDropped.Add(1)
		return
	}
	if chance(im.cfg.Corrupt) {
		ctr.ImpairCorrupted.Add(1)
		corruptFrame(f) // a frame that still reaches the peer, and fails its ICRC there
	}
	if chance(im.cfg.Reorder) && t.swapped == nil {
		ctr.ImpairReordered.Add(1)
		t.swapped = f
		return
	}
	t.emit(f)
	if chance(im.cfg.Dup) {
		ctr.ImpairDuplicated.Add(1)
		t.emit(f)
	}
}

// emit sends f now, or holds it for the delay; a swapped frame follows it.
func (t *txImpair) emit(f []byte) {
	if d := t.im.cfg.Delay; d > 0 {
		t.im.hold(f, d)
	} else {
		t.out = append(t.out, f)
	}
	if g := t.swapped; g != nil {
		t.swapped = nil
		t.emit(g)
	}
}

// done ends the batch: a frame still waiting for one to overtake it goes.
func (t *txImpair) done() [][]byte {
	if g := t.swapped; g != nil {
		t.swapped = nil
		t.emit(g)
	}
	return t.out
}

// hold copies f into the delay line; it leaves d from now.
func (im *impairer) hold(f []byte, d time.Duration) {
	im.mu.Lock()
	defer im.mu.Unlock()
	if im.stopped || len(im.held) >= MaxImpairHeld || im.bytes+len(f) > maxImpairHeldMB<<20 {
		im.s.ctr.ImpairDropped.Add(1)
		return
	}
	im.s.ctr.ImpairDelayed.Add(1)
	im.held = append(im.held, heldFrame{f: append([]byte(nil), f...), at: time.Now().Add(d)})
	im.bytes += len(f)
	if im.timer == nil {
		im.timer = time.AfterFunc(d, im.release)
	}
}

// release writes the held frames whose time has come, and waits for the
// next.
func (im *impairer) release() {
	im.mu.Lock()
	now := time.Now()
	n := 0
	for n < len(im.held) && !im.held[n].at.After(now) {
		n++
	}
	due := make([][]byte, n)
	for i := range n {
		due[i] = im.held[i].f
		im.bytes -= len(due[i])
	}
	im.held = append(im.held[:0], im.held[n:]...)
	im.timer = nil
	if len(im.held) > 0 {
		im.timer = time.AfterFunc(im.held[0].at.Sub(now), im.release)
	}
	im.mu.Unlock()
	if len(due) > 0 && !im.s.down.Load() {
		_ = im.s.writeRoCE(due)
	}
}

// stop ends the impairment: held frames leave at once.
func (im *impairer) stop() {
	im.mu.Lock()
	im.stopped = true
	if im.timer != nil {
		im.timer.Stop()
		im.timer = nil
	}
	due := make([][]byte, len(im.held))
	for i := range im.held {
		due[i] = im.held[i].f
	}
	im.held, im.bytes = nil, 0
	im.mu.Unlock()
	if len(due) > 0 && !im.s.down.Load() {
		_ = im.s.writeRoCE(due)
	}
}
