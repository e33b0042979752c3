package main

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// latMain is the latency tests' main()s.
func (s *session) latMain(ctx context.Context) error {
	p := s.p
	if err := s.latConnect(ctx); err != nil {
		return err
	}
	oneSided := p.test.verb == verbRead || p.test.verb == verbAtomic
	if oneSided && !p.client() {
		// Only the client posts reads: the server waits in the close.
		if err := s.closeComm(ctx, runWait); err != nil {
			return err
		}
		io.WriteString(s.out, resultLine)
		return nil
	}
	if p.events {
		for _, cq := range []*verbs.CQ{s.scq, s.rcq} {
			if err := cq.ReqNotify(false); err != nil {
				return fmt.Errorf("Couldn't request CQ notification: %w", err)
			}
		}
	}
	printLatHeader(s.out, p)
	for _, size := range s.sizes() {
		p.size = size
		if err := s.latSize(ctx); err != nil {
			return err
		}
	}
	return s.latEnd(ctx)
}

// latConnect is the latency mains' exchanges up to RTR: ib_send_lat
// connects before its first barrier, the others after it and then meet
// once more.
func (s *session) latConnect(ctx context.Context) error {
	send := s.p.test.verb == verbSend
	if !send {
		if err := s.handshake(ctx, 0, 0); err != nil {
			return err
		}
	}
	if err := s.exchangeAndConnect(ctx); err != nil {
		return err
	}
	if send {
		if err := s.handshake(ctx, 0, 0); err != nil {
			return err
		}
	}
	s.printLocal()
	if err := s.handshakeAll(ctx, true); err != nil {
		return err
	}
	if !send {
		if err := s.handshake(ctx, 0, 0); err != nil { // after RTR
			return err
		}
	}
	return nil
}

// latSize runs the latency loop at one message size and prints its line.
func (s *session) latSize(ctx context.Context) error {
	p := s.p
	var r latRun
	var err error
	switch p.test.verb {
	case verbWrite:
		r, err = s.runLatWrite(ctx)
	case verbSend:
		if _, err = s.postRecvs(); err != nil {
			return err
		}
		if err = s.handshake(ctx, 0, runWait); err != nil {
			return err
		}
		r, err = s.runLatSend(ctx)
	default:
		r, err = s.runLat(ctx)
	}
	if err != nil {
		return err
	}
	if p.isDuration {
		lat, tps := latDurReport(p, r.window, r.iters)
		printLatDurReport(s.out, p.size, r.iters, lat, tps)
	} else {
		printLatReport(s.out, latReport(p, r.tposted))
	}
	return nil
}

// latEnd is the mains' end: the closing exchange (none for ib_write_lat)
// and the result line.
func (s *session) latEnd(ctx context.Context) error {
	p := s.p
	if p.isDuration && (p.test.verb == verbWrite || p.test.verb == verbSend) {
		// The peer's clock ends on its own: its last message may still
		// be coming. Keep the QP a moment so the device acknowledges it —
		// kernel rxe retransmits to a QP that is gone without ever
		// counting the retries out, and perftest spins on that completion.
		select {
		case <-time.After(durationLinger):
		case <-ctx.Done():
		}
	}
	switch p.test.verb {
	case verbWrite:
		io.WriteString(s.out, resultLine)
		return nil // ib_write_lat ends without a closing exchange
	case verbSend:
		io.WriteString(s.out, resultLine)
		if err := s.closeComm(ctx, runWait); err != nil {
			return err
		}
		return nil
	}
	if err := s.closeComm(ctx, 0); err != nil {
		return err
	}
	io.WriteString(s.out, resultLine)
	return nil
}

// latRun is what a latency loop records.
type latRun struct {
	tposted []int64 // per iteration
	window  int64   // duration mode: the sample window
	iters   uint64
}

// loadByte reads a byte of the shared buffer that the device writes, with
// an atomic load so the poll loop sees each new value (b is page aligned,
// so its 4-byte words are; amd64 and arm64 are little-endian).
func loadByte(b []byte, off int) byte {
	word := (*uint32)(unsafe.Pointer(&b[off&^3]))
	return byte(atomic.LoadUint32(word) >> (8 * (off & 3)))
}

// runLatWrite is run_iter_lat_write: each side writes its counter into
// the last byte of the message and waits for the peer's to arrive in its
// own buffer before writing again; the client starts.
func (s *session) runLatWrite(ctx context.Context) (latRun, error) {
	p := s.p
	wrs := s.sendWRs()
	wr := wrs[0].wr
	wr.Flags = s.sendFlags(true)
	data := s.buf.Bytes()
	post := int(p.size) - 1
	poll := p.numQPs*int(s.bsize) + int(p.size) - 1
	var scnt, ccnt, rcnt uint64
	r := latRun{}
	if !p.isDuration {
		r.tposted = make([]int64, p.iters)
	}
	clock := newDurClock(p)
	clock.start(time.Now())
	base := epoch()
	w := newIdler(ctx, func() string { return fmt.Sprintf("iteration %d: waiting for the peer's write", rcnt) })
	for scnt < p.iters || ccnt < p.iters || rcnt < p.iters || (p.isDuration && !clock.ended()) {
		clock.tick(time.Now())
		if (rcnt < p.iters || p.isDuration) && !(scnt < 1 && !p.client()) {
			rcnt++
			for loadByte(data, poll) != byte(rcnt) && !clock.ended() {
				if err := w.idle(); err != nil {
					return r, err
				}
				clock.tick(time.Now())
			}
			w.moved()
		}
		if scnt < p.iters || p.isDuration {
			if !p.isDuration {
				r.tposted[scnt] = int64(time.Since(base))
			}
			scnt++
			data[post] = byte(scnt)
			if err := postSend(s.qps[0], wr); err != nil {
				return r, fmt.Errorf("Couldn't post send: scnt=%d: %w", scnt, err)
			}
		}
		if clock.ended() {
			break
		}
		if ccnt < p.iters || p.isDuration {
			// A duration run stops at its end even with a write unacked:
			// the peer may have ended first and gone.
			c, err := s.pollOneUntil(s.scq, w, clock)
			if err != nil {
				return r, err
			}
			if clock.ended() {
				break
			}
			if c.Status != verbs.WCSuccess {
				return r, compError("client", c, scnt, ccnt)
			}
			ccnt++
			if clock.sampling() {
				r.iters++
			}
		}
	}
	return s.latDone(r, clock), nil
}

func (s *session) latDone(r latRun, clock *durClock) latRun {
	if s.p.isDuration {
		r.window = int64(clock.t1.Sub(clock.t0))
	} else {
		r.iters = s.p.iters
	}
	return r
}

// runLat is run_iter_lat (read, atomic): post one, wait for it, again.
func (s *session) runLat(ctx context.Context) (latRun, error) {
	p := s.p
	wr := s.sendWRs()[0].wr
	wr.Flags = verbs.SendSignaled
	var scnt uint64
	r := latRun{}
	if !p.isDuration {
		r.tposted = make([]int64, p.iters)
	}
	clock := newDurClock(p)
	clock.start(time.Now())
	base := epoch()
	w := newIdler(ctx, func() string { return fmt.Sprintf("iteration %d: waiting for the response", scnt) })
	for scnt < p.iters || (p.isDuration && !clock.ended()) {
		clock.tick(time.Now())
		if !p.isDuration {
			r.tposted[scnt] = int64(time.Since(base))
		}
		scnt++
		if err := postSend(s.qps[0], wr); err != nil {
			return r, fmt.Errorf("Couldn't post send: scnt=%d: %w", scnt, err)
		}
		if clock.ended() {
			break
		}
		c, err := s.pollOneUntil(s.scq, w, clock)
		if err != nil {
			return r, err
		}
		if clock.ended() {
			break
		}
		if c.Status != verbs.WCSuccess {
			return r, compError("client", c, scnt, scnt)
		}
		if clock.sampling() {
			r.iters++
		}
	}
	return s.latDone(r, clock), nil
}

// runLatSend is run_iter_lat_send: the server receives then sends, the
// client sends then receives; receives are reposted while more are due.
func (s *session) runLatSend(ctx context.Context) (latRun, error) {
	p := s.p
	l := &latSendLoop{s: s, wr: s.sendWRs()[0].wr, clock: newDurClock(p), base: epoch()}
	if !p.isDuration {
		l.r.tposted = make([]int64, p.iters)
	}
	l.w = newIdler(ctx, func() string { return fmt.Sprintf("iteration %d: waiting for the peer's message", l.rcnt) })
	if p.client() {
		l.clock.start(time.Now())
		l.started = true
	}
	l.recvAddr = s.recvAddr(0)
	for l.scnt < p.iters || l.rcnt < p.iters || (p.isDuration && !l.clock.ended()) {
		if l.started {
			l.clock.tick(time.Now())
		}
		if (l.rcnt < p.iters || p.isDuration) && !(l.scnt < 1 && p.client()) {
			if ended, err := l.recv(); err != nil {
				return l.r, err
			} else if ended {
				break
			}
		}
		if l.scnt < p.iters || (p.isDuration && !l.clock.ended()) {
			if ended, err := l.send(); err != nil {
				return l.r, err
			} else if ended {
				break
			}
		}
	}
	return s.latDone(l.r, l.clock), nil
}

// latSendLoop is runLatSend's state: the sends and receives counted
// (scnt, rcnt), the duration clock, which the server starts at its
// first receive.
type latSendLoop struct {
	s          *session
	w          *idler
	clock      *durClock
	r          latRun
	wr         verbs.SendWR
	scnt, rcnt uint64
	started    bool
	base       time.Time
	recvAddr   uint64
}

// recv waits for the peer's message and reposts its receive while more
// are due; ended says the duration clock ran out while it waited.
func (l *latSendLoop) recv() (ended bool, err error) {
	s, p := l.s, l.s.p
	c, err := s.pollOneUntil(s.rcq, l.w, l.clock)
	if err != nil {
		return false, err
	}
	if l.clock.ended() {
		return true, nil
	}
	if !l.started {
		l.clock.start(time.Now())
		l.started = true
	}
	if c.Status != verbs.WCSuccess {
		return false, compError("server", c, l.rcnt, l.rcnt)
	}
	l.rcnt++
	if l.clock.sampling() {
		l.r.iters++
	}
	if p.isDuration || l.rcnt+uint64(p.rxDepth) <= p.iters {
		rw := verbs.RecvWR{ID: c.WRID, SGL: []verbs.SGE{{Addr: l.recvAddr, Length: uint32(p.size), LKey: s.mr.LKey()}}}
		if err := s.qps[0].PostRecv(rw); err != nil {
			return false, fmt.Errorf("Couldn't post recv: rcnt=%d: %w", l.rcnt, err)
		}
	}
	return false, nil
}

// send posts the next message, signalled every cq_mod-th and the last,
// and waits for a signalled one's completion; ended as for recv.
func (l *latSendLoop) send() (ended bool, err error) {
	s, p := l.s, l.s.p
	if !p.isDuration {
		l.r.tposted[l.scnt] = int64(time.Since(l.base))
	}
	l.scnt++
	signal := l.scnt%uint64(p.cqMod) == 0 || (!p.isDuration && l.scnt == p.iters)
	l.wr.Flags = s.sendFlags(signal)
	if err := postSend(s.qps[0], l.wr); err != nil {
		return false, fmt.Errorf("Couldn't post send: scnt=%d: %w", l.scnt, err)
	}
	if !signal {
		return false, nil
	}
	c, err := s.pollOneUntil(s.scq, l.w, l.clock)
	if err != nil {
		return false, err
	}
	if l.clock.ended() {
		return true, nil
	}
	if c.Status != verbs.WCSuccess {
		return false, compError("client", c, l.scnt, l.scnt)
	}
	return false, nil
}

// pollOneUntil waits for one completion on cq, or for the duration
// clock to end (then it returns a zero WC).
func (s *session) pollOneUntil(cq *verbs.CQ, w *idler, clock *durClock) (verbs.WC, error) {
	var wc [1]verbs.WC
	for cq.Poll(wc[:]) == 0 {
		clock.tick(time.Now())
		if clock.ended() {
			return verbs.WC{}, nil
		}
		if err := w.await(cq, s.p.events); err != nil {
			return verbs.WC{}, err
		}
	}
	w.moved()
	return wc[0], nil
}
