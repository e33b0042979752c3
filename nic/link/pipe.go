package link

import (
	"net"
	"sync"
	"sync/atomic"
)

// Action is a pipe hook's verdict on one frame in flight.
type Action int

const (
	// Deliver passes the frame (possibly modified by the hook) on.
	Deliver Action = iota
	// Drop loses the frame.
	Drop
	// Hold keeps the frame back and delivers it right after the next frame
	// that is delivered, reordering the two.
	Hold
	// Duplicate delivers the frame twice.
	Duplicate
)

// Hook inspects each frame written into a pipe end, before the peer can read
// it. frame is the pipe's own copy: the hook may corrupt it in place, but
// not keep it past the call (the pipe recycles it once read or dropped).
// Hooks run on the writer's goroutine, one at a time per direction.
type Hook func(frame []byte) Action

// PipeConfig configures NewPipe. Zero fields take defaults.
type PipeConfig struct {
	MTU       int                 // default 1500
	Capacity  int                 // frames in flight per direction, default 1024
	MAC       [2]net.HardwareAddr // defaults 02:00:00:00:00:01 and :02
	BatchSize int                 // default 64
}

// PipeEnd is one end of an in-memory Ethernet cable (see Pipe).
type PipeEnd struct {
	name      string
	mac       net.HardwareAddr
	mtu       int
	batch     int
	rx        chan *[]byte // frames for this end to read (frameCopy's)
	peer      *PipeEnd
	closed    chan struct{}
	closeOnce sync.Once

	hookMu sync.Mutex // serialises writers toward the peer, guards hook/held
	hook   Hook
	held   []*[]byte

	sig    pipeSignal // the polling face (pipe_poll_linux.go)
	sigErr error      // why it has none

	// Written counts frames accepted by Write; Lost counts frames a hook
	// dropped or that were discarded because the peer was closed.
	Written, Lost atomic.Uint64
}

// Pipe returns two Links joined back to back by bounded in-memory queues,
// like wireguard-go's tuntest: what one end writes, the other reads. Write
// blocks while the peer's queue is full (backpressure, not loss), until
// either end is closed.
func Pipe(mtu int) (*PipeEnd, *PipeEnd) {
	return NewPipe(PipeConfig{MTU: mtu})
}

// NewPipe is Pipe with every parameter.
func NewPipe(cfg PipeConfig) (*PipeEnd, *PipeEnd) {
	if cfg.MTU <= 0 {
		cfg.MTU = 1500
	}
	if cfg.Capacity <= 0 {
		cfg.Capacity = 1024
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 64
	}
	if cfg.MAC[0] == nil {
		cfg.MAC[0] = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	}
	if cfg.MAC[1] == nil {
		cfg.MAC[1] = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
	}
	mk := func(i int) *PipeEnd {
		p := &PipeEnd{
			name:   [2]string{"pipe0", "pipe1"}[i],
			mac:    append(net.HardwareAddr(nil), cfg.MAC[i]...),
			mtu:    cfg.MTU,
			batch:  cfg.BatchSize,
			rx:     make(chan *[]byte, cfg.Capacity),
			closed: make(chan struct{}),
		}
		p.sigErr = newPipeSignal(&p.sig)
		return p
	}
	a, b := mk(0), mk(1)
	a.peer, b.peer = b, a
	return a, b
}

// SetHook installs h (nil removes it) on frames this end writes.
func (p *PipeEnd) SetHook(h Hook) {
	p.hookMu.Lock()
	p.hook = h
	p.hookMu.Unlock()
}

func (p *PipeEnd) BatchSize() int                 { return p.batch }
func (p *PipeEnd) MTU() int                       { return p.mtu }
func (p *PipeEnd) HardwareAddr() net.HardwareAddr { return p.mac }
func (p *PipeEnd) Name() string                   { return p.name }

// Close closes this end. The peer's writes are then discarded; the peer
// keeps reading what is already queued for it. A poller of this end is
// woken to find it closed.
func (p *PipeEnd) Close() error {
	p.closeOnce.Do(func() {
		close(p.closed)
		p.sig.close()
	})
	return nil
}

func (p *PipeEnd) isClosed() bool {
	select {
	case <-p.closed:
		return true
	default:
		return false
	}
}

// Read implements Link.
func (p *PipeEnd) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if len(bufs) == 0 {
		return 0, nil
	}
	if p.isClosed() {
		return 0, closedError(p.name)
	}
	var f *[]byte
	select {
	case f = <-p.rx:
	case <-p.closed:
		return 0, closedError(p.name)
	}
	n := 0
	for {
		sizes[n] = copy(bufs[n][offset:], *f)
		frames.Put(f)
		n++
		if n == len(bufs) {
			return n, nil
		}
		select {
		case f = <-p.rx:
		default:
			return n, nil
		}
	}
}

// Write implements Link. Each frame is copied.
func (p *PipeEnd) Write(bufs [][]byte, offset int) (int, error) {
	p.hookMu.Lock()
	defer p.hookMu.Unlock()
	for i, b := range bufs {
		if p.isClosed() {
			return i, closedError(p.name)
		}
		f := b[offset:]
		if err := checkFrame(f, p.mtu); err != nil {
			return i, err
		}
		c := frameCopy(f)
		p.Written.Add(1)
		act := Deliver
		if p.hook != nil {
			act = p.hook(*c)
		}
		switch act {
		case Drop:
			p.Lost.Add(1)
			frames.Put(c)
			continue
		case Hold:
			p.held = append(p.held, c)
			continue
		case Duplicate:
			if err := p.push(frameCopy(*c)); err != nil {
				return i, err
			}
		}
		if err := p.push(c); err != nil {
			return i, err
		}
		for len(p.held) > 0 {
			h := p.held[0]
			p.held = p.held[1:]
			if err := p.push(h); err != nil {
				return i + 1, err
			}
		}
	}
	return len(bufs), nil
}

// push queues f for the peer, blocking while its queue is full.
func (p *PipeEnd) push(f *[]byte) error {
	select {
	case p.peer.rx <- f:
		p.peer.sig.signal()
		return nil
	case <-p.closed:
		return closedError(p.name)
	case <-p.peer.closed:
		p.Lost.Add(1)
		return nil
	}
}

var _ Link = (*PipeEnd)(nil)

// frames recycles the pipe's copies of frames between Write and Read, as a
// kernel recycles its packet buffers: without it BenchmarkPipeFrames4K
// measured the garbage collector as much as the pipe.
var frames sync.Pool // *[]byte

// frameCopy returns a copy of f in a recycled buffer.
func frameCopy(f []byte) *[]byte {
	b, _ := frames.Get().(*[]byte)
	if b == nil || cap(*b) < len(f) {
		b = new(make([]byte, 0, max(len(f), pipeFrameCap)))
	}
	*b = append((*b)[:0], f...)
	return b
}

// pipeFrameCap is the least a recycled buffer holds: a 9000 B MTU frame.
const pipeFrameCap = EthernetHeaderLen + 9000
