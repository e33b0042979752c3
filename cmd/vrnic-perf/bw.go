package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/vrnic/vrnicd/cmd/internal/oob"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// bwMain is ib_write_bw's, ib_read_bw's and ib_atomic_bw's main().
func (s *session) bwMain(ctx context.Context) error {
	p := s.p
	if err := s.exchangeAndConnect(ctx); err != nil {
		return err
	}
	s.printLocal()
	if err := s.handshakeAll(ctx, true); err != nil {
		return err
	}
	if err := s.handshake(ctx, 0, 0); err != nil { // after RTR
		return err
	}
	printBWHeader(s.out, p)
	if !p.client() {
		// The server waits for the client's run, then prints its report.
		if err := s.handshake(ctx, 0, runWait); err != nil {
			return err
		}
		rep, err := s.comm.ExchangeBWReports(ctx, oob.BWReport{}, 0)
		if err != nil {
			return fmt.Errorf(" Failed to exchange data between server and clients: %w", err)
		}
		printBWReport(s.out, p, rep)
		if err := s.closeComm(ctx, 0); err != nil {
			return err
		}
		io.WriteString(s.out, resultLine)
		return nil
	}
	if p.events {
		if err := s.scq.ReqNotify(false); err != nil {
			return fmt.Errorf("Couldn't request CQ notification: %w", err)
		}
	}
	var rep oob.BWReport
	for _, size := range s.sizes() {
		p.size = size
		run, err := s.runBW(ctx)
		if err != nil {
			return err
		}
		rep = bwReport(p, run)
		printBWReport(s.out, p, rep)
	}
	io.WriteString(s.out, resultLine)
	if err := s.handshake(ctx, 0, 0); err != nil {
		return err
	}
	if _, err := s.comm.ExchangeBWReports(ctx, rep, 0); err != nil {
		return fmt.Errorf(" Failed to exchange data between server and clients: %w", err)
	}
	if err := s.closeComm(ctx, 0); err != nil {
		return err
	}
	return nil
}

// sendBWMain is ib_send_bw's main().
func (s *session) sendBWMain(ctx context.Context) error {
	p := s.p
	if err := s.exchangeAndConnect(ctx); err != nil {
		return err
	}
	if err := s.handshake(ctx, 0, 0); err != nil {
		return err
	}
	s.printLocal()
	if err := s.handshakeAll(ctx, true); err != nil {
		return err
	}
	if p.events {
		if err := s.scq.ReqNotify(false); err != nil {
			return fmt.Errorf(" Couldn't request CQ notification: %w", err)
		}
		if err := s.rcq.ReqNotify(false); err != nil {
			return fmt.Errorf(" Couldn't request CQ notification: %w", err)
		}
	}
	printBWHeader(s.out, p)
	for _, size := range s.sizes() {
		p.size = size
		var posted []uint64
		if !p.client() {
			var err error
			if posted, err = s.postRecvs(); err != nil {
				return err
			}
		}
		// The client waits for the server's receives.
		if err := s.handshake(ctx, 0, runWait); err != nil {
			return err
		}
		var run *bwRun
		var err error
		if p.client() {
			run, err = s.runBW(ctx)
		} else {
			run, err = s.runBWServer(ctx, posted)
		}
		if err != nil {
			return err
		}
		printBWReport(s.out, p, bwReport(p, run))
		if p.runAll {
			if err := s.handshake(ctx, 0, runWait); err != nil {
				return err
			}
		}
	}
	io.WriteString(s.out, resultLine)
	if err := s.closeComm(ctx, runWait); err != nil {
		return err
	}
	return nil
}

// sendWR is one QP's work request as ctx_set_send_wqes prepares it, with
// the cycle-buffer walk of increase_loc_addr / increase_rem_addr.
type sendWR struct {
	wr              verbs.SendWR
	myAddr, remAddr uint64 // the walk's starts
}

func (s *session) sendWRs() []sendWR {
	p := s.p
	out := make([]sendWR, len(s.qps))
	for i := range s.qps {
		w := &out[i]
		w.myAddr = s.buf.Addr() + uint64(i)*s.bsize
		w.remAddr = s.rem[i].VAddr
		w.wr = verbs.SendWR{ID: uint64(i), SGL: []verbs.SGE{{Addr: w.myAddr, Length: uint32(p.size), LKey: s.mr.LKey()}}}
		switch p.test.verb {
		case verbSend:
			w.wr.Opcode = verbs.WRSend
		case verbWrite:
			w.wr.Opcode = verbs.WRRDMAWrite
		case verbRead:
			w.wr.Opcode = verbs.WRRDMARead
		case verbAtomic:
			w.wr.Opcode = verbs.WRAtomicFetchAdd
			w.wr.CompareAdd = 1 // ATOMIC_ADD_VALUE
			if p.atomic == cmpAndSwap {
				w.wr.Opcode, w.wr.CompareAdd, w.wr.Swap = verbs.WRAtomicCmpAndSwp, 0, 0 // ATOMIC_SWAP_VALUE
			}
		}
		if p.test.verb != verbSend {
			w.wr.RemoteAddr, w.wr.RKey = w.remAddr, s.rem[i].RKey
		}
	}
	return out
}

// advance moves the WR to the next slot of the cycle buffer after the
// cnt-th post (when messages fit twice in it).
func (s *session) advance(w *sendWR, cnt uint64) {
	p := s.p
	if p.size > uint64(s.cycle)/2 {
		return
	}
	step := inc(p.size, s.cacheLine)
	wrap := (cnt+1)%(uint64(s.cycle)/step) == 0
	w.wr.SGL[0].Addr += step
	if wrap {
		w.wr.SGL[0].Addr = w.myAddr
	}
	if p.test.verb != verbSend {
		w.wr.RemoteAddr += step
		if wrap {
			w.wr.RemoteAddr = w.remAddr
		}
	}
}

// runBW is run_iter_bw: keep up to tx_depth WRs in flight per QP, ask for
// a completion every cq_mod WRs (and for the last), record post and
// completion times.
func (s *session) runBW(ctx context.Context) (*bwRun, error) {
	p := s.p
	l := newBWLoop(s)
	l.clock.start(time.Now())
	if !p.isDuration && p.noPeak {
		l.run.tposted[0] = l.ns()
	}
	w := newIdler(ctx, func() string { return fmt.Sprintf("%d of %d WRs completed", l.totC, l.tot) })
	w.spin.Backoff = true // tx_depth WRs in flight: a short sleep starves nothing
	wc := make([]verbs.WC, 16)
	s.progress.start("iterations", l.tot)
	for l.totS < l.tot || l.totC < l.tot || (p.isDuration && !l.clock.ended()) {
		if p.isDuration {
			l.clock.tick(time.Now())
			if l.clock.ended() {
				break
			}
		}
		if err := l.post(); err != nil {
			return nil, err
		}
		if !(l.totC < l.tot || (p.isDuration && l.totC < l.totS)) {
			continue
		}
		got := s.scq.Poll(wc)
		if got == 0 {
			if err := w.await(s.scq, p.events); err != nil {
				return nil, err
			}
			continue
		}
		w.moved()
		if err := l.complete(wc[:got]); err != nil {
			return nil, err
		}
		s.progress.update(l.totC, l.tot)
	}
	l.finish()
	return l.run, nil
}

// bwLoop is runBW's state: each QP's WR and its post and completion
// counts (scnt, ccnt), their totals over the QPs, what the run records.
type bwLoop struct {
	s          *session
	run        *bwRun
	wrs        []sendWR
	scnt, ccnt []uint64
	totS, totC uint64
	tot        uint64 // iterations × QPs
	clock      *durClock
	base       time.Time
}

func newBWLoop(s *session) *bwLoop {
	p := s.p
	n := len(s.qps)
	l := &bwLoop{s: s, run: &bwRun{}, tot: p.iters * uint64(n)}
	if !p.noPeak {
		l.run.tposted, l.run.tcompleted = make([]int64, l.tot), make([]int64, l.tot)
	} else {
		l.run.tposted, l.run.tcompleted = make([]int64, 1), make([]int64, 1)
	}
	l.wrs = s.sendWRs()
	l.scnt, l.ccnt = make([]uint64, n), make([]uint64, n)
	l.clock = newDurClock(p)
	l.base = epoch()
	return l
}

// ns is the time since the run's epoch.
func (l *bwLoop) ns() int64 { return int64(time.Since(l.base)) }

// post tops every QP up to tx_depth WRs in flight, signalling every
// cq_mod-th WR and the last one.
func (l *bwLoop) post() error {
	p := l.s.p
	cqMod := uint64(p.cqMod)
	for i, qp := range l.s.qps {
		for (l.scnt[i] < p.iters || p.isDuration) && l.scnt[i]-l.ccnt[i]+1 <= uint64(p.txDepth) {
			k := l.scnt[i]
			wr := l.wrs[i].wr
			wr.Flags = l.s.sendFlags(k%cqMod == cqMod-1 || (!p.isDuration && k == p.iters-1))
			if !p.noPeak {
				l.run.tposted[l.totS] = l.ns()
			}
			if err := postSend(qp, wr); err != nil {
				return fmt.Errorf("Couldn't post send: qp %d scnt=%d: %w", i, l.scnt[i], err)
			}
			l.s.advance(&l.wrs[i], k)
			l.scnt[i]++
			l.totS++
		}
	}
	return nil
}

// complete counts the completions polled: each stands for cq_mod WRs of
// its QP (the wr_id).
func (l *bwLoop) complete(wcs []verbs.WC) error {
	p := l.s.p
	cqMod := uint64(p.cqMod)
	for _, c := range wcs {
		if c.Status != verbs.WCSuccess {
			return compError("client", c, l.totS, l.totC)
		}
		qi := int(c.WRID)
		if qi < 0 || qi >= len(l.ccnt) {
			return fmt.Errorf("completion for unknown wr_id %d", c.WRID)
		}
		l.ccnt[qi] += cqMod
		l.totC += cqMod
		if !p.noPeak {
			l.run.tcompleted[min(l.totC, l.tot)-1] = l.ns()
		}
		if l.clock.sampling() {
			l.run.iters += cqMod
		}
	}
	return nil
}

// finish records the run's end: the last completion time without peak
// samples, the sample window in duration mode.
func (l *bwLoop) finish() {
	p := l.s.p
	if !p.isDuration && p.noPeak {
		l.run.tcompleted[0] = l.ns()
	}
	if p.isDuration {
		l.run.tposted[0], l.run.tcompleted[0] = l.clock.window(l.base)
	} else {
		l.run.iters = p.iters
	}
}

// compError is NOTIFY_COMP_ERROR_SEND / _RECV.
func compError(side string, c verbs.WC, a, b uint64) error {
	return fmt.Errorf(" Completion with error at %s\n Failed status %d: wr_id %d syndrom 0x%x\n scnt=%d, ccnt=%d", side, c.Status, int(c.WRID), c.VendorErr, a, b)
}

// recvAddr is where QP i's receive WRs land (ctx_set_recv_wqes): the QP's
// receive half of the buffer; nextRecv walks the cycle buffer from there.
func (s *session) recvAddr(i int) uint64 {
	return s.buf.Addr() + uint64(s.p.numQPs+i)*s.sendStride
}

// postRecvs posts rx_depth receives per QP, as ctx_set_recv_wqes, and says
// how many each QP has.
func (s *session) postRecvs() ([]uint64, error) {
	p := s.p
	posted := make([]uint64, len(s.qps))
	for i, qp := range s.qps {
		addr := s.recvAddr(i)
		for j := range p.rxDepth {
			wr := verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{{Addr: addr, Length: uint32(p.size), LKey: s.mr.LKey()}}}
			if err := qp.PostRecv(wr); err != nil {
				return nil, fmt.Errorf("Couldn't post recv Qp = %d: counter=%d: %w", i, j, err)
			}
			addr = s.nextRecv(i, addr, uint64(j))
		}
		posted[i] = uint64(p.rxDepth)
	}
	return posted, nil
}

func (s *session) nextRecv(i int, addr, cnt uint64) uint64 {
	p := s.p
	if p.test.lat || p.size > uint64(s.cycle)/2 {
		return addr
	}
	addr += inc(p.size, s.cacheLine)
	if (cnt+1)%(uint64(s.cycle)/inc(p.size, s.cacheLine)) == 0 {
		addr = s.recvAddr(i)
	}
	return addr
}

// runBWServer is run_iter_bw_server: count the receives, repost while
// more are due, time from the first receive to the last.
func (s *session) runBWServer(ctx context.Context, posted []uint64) (*bwRun, error) {
	p := s.p
	n := len(s.qps)
	tot := p.iters * uint64(n)
	run := &bwRun{tposted: make([]int64, 1), tcompleted: make([]int64, 1)}
	rcnt := make([]uint64, n)
	next := make([]uint64, n)
	for i := range next {
		next[i] = s.recvAddr(i)
		for j := uint64(0); j < posted[i]; j++ {
			next[i] = s.nextRecv(i, next[i], j)
		}
	}
	var tr uint64
	clock := newDurClock(p)
	base := epoch()
	first := true
	w := newIdler(ctx, func() string { return fmt.Sprintf("%d of %d messages received", tr, tot) })
	w.spin.Backoff = true // rx_depth receives posted: a short sleep starves nothing
	wc := make([]verbs.WC, 16)
	s.progress.start("messages", tot)
	for tr < tot || (p.isDuration && !clock.ended()) {
		if p.isDuration && !first {
			clock.tick(time.Now())
			if clock.ended() {
				break
			}
		}
		got := s.rcq.Poll(wc)
		if got == 0 {
			if err := w.await(s.rcq, p.events); err != nil {
				return nil, err
			}
			continue
		}
		w.moved()
		if first { // set_on_first_rx_packet
			first = false
			clock.start(time.Now())
			run.tposted[0] = int64(time.Since(base))
		}
		for _, c := range wc[:got] {
			qi := int(c.WRID)
			if c.Status != verbs.WCSuccess {
				return nil, compError("server", c, tr, tr)
			}
			if qi < 0 || qi >= n {
				return nil, fmt.Errorf("completion for unknown wr_id %d", c.WRID)
			}
			rcnt[qi]++
			tr++
			if clock.sampling() {
				run.iters++
			}
			if p.isDuration || posted[qi]+1 <= p.iters {
				wr := verbs.RecvWR{ID: uint64(qi), SGL: []verbs.SGE{{Addr: next[qi], Length: uint32(p.size), LKey: s.mr.LKey()}}}
				if err := s.qps[qi].PostRecv(wr); err != nil {
					return nil, fmt.Errorf("Couldn't post recv Qp=%d rcnt=%d: %w", qi, rcnt[qi], err)
				}
				next[qi] = s.nextRecv(qi, next[qi], posted[qi])
				posted[qi]++
			}
		}
		s.progress.update(tr, tot)
	}
	if p.isDuration {
		run.tposted[0], run.tcompleted[0] = clock.window(base)
	} else {
		run.tcompleted[0] = int64(time.Since(base))
		run.iters = p.iters
	}
	return run, nil
}
