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
	n := len(s.qps)
	tot := p.iters * uint64(n)
	run := &bwRun{}
	if !p.noPeak {
		run.tposted, run.tcompleted = make([]int64, tot), make([]int64, tot)
	} else {
		run.tposted, run.tcompleted = make([]int64, 1), make([]int64, 1)
	}
	wrs := s.sendWRs()
	scnt, ccnt := make([]uint64, n), make([]uint64, n)
	var totS, totC uint64
	clock := newDurClock(p)
	base := epoch()
	ns := func() int64 { return int64(time.Since(base)) }
	clock.start(time.Now())
	if !p.isDuration && p.noPeak {
		run.tposted[0] = ns()
	}
	w := newIdler(ctx, func() string { return fmt.Sprintf("%d of %d WRs completed", totC, tot) })
	wc := make([]verbs.WC, 16)
	s.progress.start("iterations", tot)
	cqMod := uint64(p.cqMod)
	for totS < tot || totC < tot || (p.isDuration && !clock.ended()) {
		if p.isDuration {
			clock.tick(time.Now())
			if clock.ended() {
				break
			}
		}
		for i := range s.qps {
			for (scnt[i] < p.iters || p.isDuration) && scnt[i]-ccnt[i]+1 <= uint64(p.txDepth) {
				k := scnt[i]
				wr := wrs[i].wr
				wr.Flags = 0
				if k%cqMod == cqMod-1 || (!p.isDuration && k == p.iters-1) {
					wr.Flags = verbs.SendSignaled
				}
				if !p.noPeak {
					run.tposted[totS] = ns()
				}
				if err := s.qps[i].PostSend(wr); err != nil {
					return nil, fmt.Errorf("Couldn't post send: qp %d scnt=%d: %w", i, scnt[i], err)
				}
				s.advance(&wrs[i], k)
				scnt[i]++
				totS++
			}
		}
		if !(totC < tot || (p.isDuration && totC < totS)) {
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
		for _, c := range wc[:got] {
			if c.Status != verbs.WCSuccess {
				return nil, compError("client", c, totS, totC)
			}
			qi := int(c.WRID)
			if qi < 0 || qi >= n {
				return nil, fmt.Errorf("completion for unknown wr_id %d", c.WRID)
			}
			ccnt[qi] += cqMod
			totC += cqMod
			if !p.noPeak {
				if totC > tot {
					run.tcompleted[tot-1] = ns()
				} else {
					run.tcompleted[totC-1] = ns()
				}
			}
			if clock.sampling() {
				run.iters += cqMod
			}
		}
		s.progress.update(totC, tot)
	}
	if !p.isDuration && p.noPeak {
		run.tcompleted[0] = ns()
	}
	if p.isDuration {
		run.tposted[0], run.tcompleted[0] = clock.window(base)
	} else {
		run.iters = p.iters
	}
	return run, nil
}

// compError is NOTIFY_COMP_ERROR_SEND / _RECV.
func compError(side string, c verbs.WC, a, b uint64) error {
	return fmt.Errorf(" Completion with error at %s\n Failed status %d: wr_id %d syndrom 0x%x\n scnt=%d, ccnt=%d", side, c.Status, int(c.WRID), c.VendorErr, a, b)
}

// recvWR is QP i's receive WR (ctx_set_recv_wqes): into the QP's receive
// half, walking the cycle buffer.
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
