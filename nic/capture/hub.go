// Package capture fans the RoCEv2 frames a device sends and receives out to
// live subscribers (vrnicctl capture). Hub is a netstack.FrameTap: the
// datapath calls WriteFrame, which for each subscriber copies the frame into
// that subscriber's bounded queue or, when the queue is full, drops it and
// counts the drop. It never blocks and never waits for a reader; with no
// subscriber it costs one atomic load.
package capture

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds of a subscription.
const (
	DefaultDepth    = 4096     // frames queued for a subscriber
	MaxDepth        = 65536    // the most a subscriber may ask for
	DefaultMaxSubs  = 8        // concurrent subscribers
	DefaultMaxBytes = 32 << 20 // bytes of frames queued for a subscriber
)

// ErrTooMany is Subscribe's error when MaxSubs subscribers are active.
var ErrTooMany = errors.New("capture: too many live captures")

// Frame is one captured frame and when it passed the tap.
type Frame struct {
	Time time.Time
	Data []byte
	Len  int // the frame's length on the wire (Data may be cut to the snap length)
}

// Hub is the fan-out; the zero value has no subscribers and refuses none
// up to DefaultMaxSubs.
type Hub struct {
	MaxSubs  int // 0: DefaultMaxSubs
	MaxBytes int // per subscriber; 0: DefaultMaxBytes

	subs atomic.Pointer[[]*Sub] // copy on write, read by WriteFrame
	mu   sync.Mutex             // orders the writers of subs

	frames  atomic.Uint64 // frames queued for subscribers, over all
	dropped atomic.Uint64 // frames dropped for full queues, over all
}

// Sub is one subscriber. Its queue is never closed, so the datapath sends
// without a lock; Done tells the reader the subscription is over.
type Sub struct {
	h       *Hub
	ch      chan Frame
	filter  func(frame []byte) bool
	snaplen int
	limit   int64        // bytes
	queued  atomic.Int64 // bytes in ch

	closed atomic.Bool
	done   chan struct{}
	once   sync.Once

	frames  atomic.Uint64
	dropped atomic.Uint64
}

// Subscribe adds a subscriber with a queue of depth frames (0:
// DefaultDepth, at most MaxDepth); filter, if set, picks the frames it
// sees; frames longer than snaplen (0: no limit) are cut.
func (h *Hub) Subscribe(depth, snaplen int, filter func(frame []byte) bool) (*Sub, error) {
	if depth <= 0 {
		depth = DefaultDepth
	}
	depth = min(depth, MaxDepth)
	limit := h.MaxSubs
	if limit <= 0 {
		limit = DefaultMaxSubs
	}
	s := &Sub{h: h, ch: make(chan Frame, depth), filter: filter, snaplen: snaplen, done: make(chan struct{}),
		limit: int64(h.MaxBytes)}
	if s.limit <= 0 {
		s.limit = DefaultMaxBytes
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var cur []*Sub
	if p := h.subs.Load(); p != nil {
		cur = *p
	}
	if len(cur) >= limit {
		return nil, ErrTooMany
	}
	next := append(append(make([]*Sub, 0, len(cur)+1), cur...), s)
	h.subs.Store(&next)
	return s, nil
}

// WriteFrame implements netstack.FrameTap.
func (h *Hub) WriteFrame(frame []byte) error {
	p := h.subs.Load()
	if p == nil || len(*p) == 0 {
		return nil
	}
	now := time.Now()
	for _, s := range *p {
		s.offer(now, frame)
	}
	return nil
}

// offer queues a copy of frame, or counts it dropped; it never blocks.
func (s *Sub) offer(now time.Time, frame []byte) {
	if s.closed.Load() || s.filter != nil && !s.filter(frame) {
		return
	}
	data := frame
	if s.snaplen > 0 && len(data) > s.snaplen {
		data = data[:s.snaplen]
	}
	n := int64(len(data))
	if len(s.ch) == cap(s.ch) || s.queued.Load()+n > s.limit { // full: do not even copy
		s.drop()
		return
	}
	s.queued.Add(n)
	f := Frame{Time: now, Data: append([]byte(nil), data...), Len: len(frame)}
	select {
	case s.ch <- f:
		s.frames.Add(1)
		s.h.frames.Add(1)
	default: // another sender filled it meanwhile
		s.queued.Add(-n)
		s.drop()
	}
}

// Next returns the next queued frame, waiting for one; false once the
// subscription is closed (frames still queued then are dropped with it).
func (s *Sub) Next() (Frame, bool) {
	select {
	case <-s.done:
		return Frame{}, false
	default:
	}
	select {
	case f := <-s.ch:
		s.queued.Add(-int64(len(f.Data)))
		return f, true
	case <-s.done:
		return Frame{}, false
	}
}

// Queued is the number of frames waiting for the reader.
func (s *Sub) Queued() int { return len(s.ch) }

func (s *Sub) drop() {
	s.dropped.Add(1)
	s.h.dropped.Add(1)
}

// Done is closed by Close.
func (s *Sub) Done() <-chan struct{} { return s.done }

// Close unsubscribes; Next returns false from then on. Close may be
// called more than once, from any goroutine. A WriteFrame that loaded the
// subscriber list before Close may still queue a frame or two after it.
func (s *Sub) Close() {
	h := s.h
	h.mu.Lock()
	if p := h.subs.Load(); p != nil {
		next := make([]*Sub, 0, len(*p))
		for _, x := range *p {
			if x != s {
				next = append(next, x)
			}
		}
		h.subs.Store(&next)
	}
	h.mu.Unlock()
	s.closed.Store(true)
	s.once.Do(func() { close(s.done) })
}

// Stats are one subscriber's counts: frames queued for it and frames
// dropped because its queue was full.
func (s *Sub) Stats() (frames, dropped uint64) { return s.frames.Load(), s.dropped.Load() }

// Each calls yield with the hub's counters, totals over every subscriber
// it ever had (for metrics and vrnicctl stat).
func (h *Hub) Each(yield func(name string, v uint64)) {
	yield("capture_frames", h.frames.Load())
	yield("capture_dropped_frames", h.dropped.Load())
}

// Active is the number of subscribers.
func (h *Hub) Active() int {
	if p := h.subs.Load(); p != nil {
		return len(*p)
	}
	return 0
}
