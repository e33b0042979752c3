package nic

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/vrnic/vrnicd/nic/gid"
	"github.com/vrnic/vrnicd/nic/link"
	"github.com/vrnic/vrnicd/nic/netstack"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/clock"
)

// worker is a datapath worker: it owns a set of QPs outright (both sides:
// requester, completer, responder and their timers) and runs them to
// completion in one loop, so that no packet or WR crosses goroutines
// between the engine's steps. One pass takes everything queued for it —
// received packets, doorbells, in-process calls — runs the engine on
// them, runs the QPs they touched and those whose deadline came, and hands
// every frame the pass produced to the link in one batch, so that the
// ACKs of a whole receive batch leave in one write. Idle, it sleeps until
// something is queued or its next timer; wake-ups cost only on the
// idle-to-busy transition (a queue that is already signalled is not
// signalled again).
type worker struct {
	d    *Device
	env  transport.Env // the device's, with out as the Output
	out  batchOutput
	stop chan struct{}
	done chan struct{}

	// ws is the worker's one sleep: the link it reads itself, if any
	// (attachPoller), and the doorbells of the QPs and SRQs it owns. Anyone who
	// queues work while the worker sleeps there wakes it (signal).
	ws       *link.WaitSet
	sleeping atomic.Bool

	mu       sync.Mutex
	inbox    []*rxItem  // +checklocks:mu
	ready    []*QP      // +checklocks:mu
	calls    []call     // +checklocks:mu
	srqReady []*srqBell // +checklocks:mu

	// Owned by the worker goroutine.
	rcv        *netstack.RxPoller        // the link it reads, nil: none
	deliverFn  func([]netstack.RxPacket) // w.deliver, bound once: a method value per Poll allocated
	linkFD     int                       // rcv's descriptor in ws, -1: none
	onErr      func(error)               // the link failed
	bells      map[int]*QP               // doorbell descriptor -> its QP
	srqBells   map[int]*srqBell          // doorbell descriptor -> its SRQ's (srq.go)
	srqRdy     []*srqBell                // SRQs whose ring this pass drains (srq.go)
	stopped    bool                      // the loop has ended (read after done)
	rx         []*rxItem
	rdy        []*QP
	polled     []*QP // QPs whose send ring the worker polls (worker_poll.go)
	ran        bool  // the last pass ran calls: their callers are ready on this P
	bellsAt    int64 // nanotime of the last doorbell poll
	stillSince int64 // nanotime of the first look that found nothing, 0: the last one found work
	schedAt    int64 // nanotime of spin's last Gosched
	cl         []call
	dirty      []*QP
	timers     clock.Heap[*QP] // the owned QPs whose send side asked to run at a time
	swr        transport.SendWR
	rwr        transport.RecvWR
}

// call is work run on the worker (a post by an in-process user, a QP's
// last flush); q, if set, has its sides run in the same pass.
type call struct {
	q          *QP
	send, recv bool
	f          func()
	done       chan struct{}
}

func newWorker(d *Device) (*worker, error) {
	ws, err := link.NewWaitSet()
	if err != nil {
		return nil, err
	}
	w := &worker{d: d, ws: ws, linkFD: -1, bells: map[int]*QP{}, srqBells: map[int]*srqBell{}, stop: make(chan struct{}), done: make(chan struct{}),
		timers: clock.NewHeap(func(q *QP) *clock.Slot { return &q.wake })}
	w.deliverFn = w.deliver
	w.env = d.env
	w.env.Out = &w.out
	w.out.d = d
	liveWorkers.Add(1)
	go w.loop()
	return w, nil
}

// enqueue queues a received packet for its QP's owner.
func (w *worker) enqueue(it *rxItem) {
	w.mu.Lock()
	w.inbox = append(w.inbox, it)
	w.mu.Unlock()
	w.signal()
}

// markReady queues q to have the sides its want flags name run.
func (w *worker) markReady(q *QP) {
	if !q.inReady.CompareAndSwap(false, true) {
		return
	}
	w.mu.Lock()
	w.ready = append(w.ready, q)
	w.mu.Unlock()
	w.signal()
}

// run runs f on the worker and waits for it; with q set, q's sides named
// run afterwards in the same pass. Once the worker has stopped, f runs on
// the caller: nothing else owns the QPs any more.
func (w *worker) run(c call) {
	c.done = make(chan struct{})
	select {
	case <-w.done:
		c.f()
		return
	default:
	}
	w.mu.Lock()
	w.calls = append(w.calls, c)
	w.mu.Unlock()
	w.signal()
	select {
	case <-c.done:
	case <-w.done:
		<-c.done // the worker finishes the pass it took c in
	}
}

// close stops the worker after the pass it is in.
func (w *worker) close() {
	close(w.stop)
	w.ws.Wake()
	<-w.done
}

// loop: busy, it runs a pass for whatever one look found; when a look
// finds nothing it busy-polls for the device's BusyPoll (spin), then arms
// the rings it polled and sleeps on its wait set (idle).
func (w *worker) loop() {
	defer close(w.done)
	defer liveWorkers.Add(-1)
	defer w.closeWaitSet()
	for {
		if w.look() {
			w.stillSince = 0
			w.pass()
			w.yieldToCallers()
			continue
		}
		if w.spin() {
			continue
		}
		if !w.idle() {
			w.drainCallsAtStop()
			return
		}
	}
}

// yieldToCallers lets the goroutines a pass's calls readied (their
// callers, woken on this P) run now. Without it they wait for this P
// until the worker sleeps: through a whole busy-poll (spin yields the
// thread's core, not the P), a control call of a verbsock client or an
// in-process post took the busy-poll's 100 us.
func (w *worker) yieldToCallers() {
	if w.ran {
		w.ran = false
		runtime.Gosched()
	}
}

// look gathers one round's work without waiting: what is queued for the
// worker, due timers, the link's ready frames (given to the engine at
// once), posts on the rings it polls and, at most every bellInterval, the
// doorbells of the others (QPs' and SRQs'). It reports whether there is
// anything to run.
func (w *worker) look() bool {
	took := w.take()
	if w.pollLink() > 0 {
		took = true
	}
	if w.pollRings() {
		took = true
	}
	if w.bellsDue(nanotime()) {
		w.pollBells()
	}
	return took || len(w.dirty) > 0
}

// attachPoller makes the worker read the link itself, asleep on it in its
// wait set; onErr learns once that the link failed (the worker then stops
// reading it). An error is one of putting the link in the set.
func (w *worker) attachPoller(p *netstack.RxPoller, onErr func(error)) error {
	var err error
	w.run(call{f: func() {
		var fd int
		if fd, err = p.PollFD(); err != nil {
			return
		}
		// Level-triggered: the worker sleeps only after a look found
		// the link empty, and a frame that came since ends the sleep.
		if err = w.ws.Add(fd, false); err != nil {
			return
		}
		w.onErr, w.rcv, w.linkFD = onErr, p, fd
	}})
	return err
}

// pollLink reads one batch of ready frames and gives each RoCEv2 packet to
// the engine at once, in the link's buffer, for the QPs this worker owns
// (receive copies the others' to their worker). It returns the frames read.
func (w *worker) pollLink() int {
	r := w.rcv
	if r == nil {
		return 0
	}
	n, err := r.Poll(w.deliverFn)
	if err != nil {
		w.linkFailed(err)
	}
	return n
}

// deliver is the poller's Deliver: the device's receive, on this worker.
func (w *worker) deliver(pkts []netstack.RxPacket) {
	for i := range pkts {
		p := &pkts[i]
		w.d.receive(w, p.Transport, p.IPHeader, gid.FromAddr(p.Src), gid.FromAddr(p.Dst), p.SrcPort)
	}
}

// handle runs the engine on a packet of a QP this worker owns (from its
// inbox, or still in the link's buffer): a request goes to the receive
// side, with the receives the client posted up to now; a response to the
// send side.
func (w *worker) handle(q *QP, rx *transport.RxPacket, request bool) {
	if q.gone {
		return
	}
	if request {
		q.drainRecv(&w.rwr)
		q.tq.HandleRequest(rx)
		w.touch(q, false, true)
		return
	}
	q.tq.HandleResponse(rx)
	w.touch(q, true, false)
}

func (w *worker) linkFailed(err error) {
	if w.linkFD >= 0 {
		_ = w.ws.Remove(w.linkFD)
	}
	w.rcv, w.linkFD = nil, -1
	if w.onErr != nil {
		w.onErr(err)
		w.onErr = nil
	}
}

// queued reports whether anything waits for the worker.
func (w *worker) queued() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.inbox)+len(w.ready)+len(w.calls)+len(w.srqReady) > 0
}

// take swaps the queues for the worker's own buffers; false: nothing queued
// and no timer due.
func (w *worker) take() bool {
	w.mu.Lock()
	w.rx, w.inbox = w.inbox, w.rx[:0]
	w.rdy, w.ready = w.ready, w.rdy[:0]
	w.cl, w.calls = w.calls, w.cl[:0]
	w.srqRdy, w.srqReady = w.srqReady, w.srqRdy[:0]
	w.mu.Unlock()
	return len(w.rx)+len(w.rdy)+len(w.cl)+len(w.srqRdy) > 0 || w.timers.Due(w.d.clock.Now())
}

// sync returns once the worker has finished every pass that took what was
// queued before the call: the first call may share a pass with earlier
// packets, the second is taken only after that pass has flushed.
func (w *worker) sync() {
	w.run(call{f: func() {}})
	w.run(call{f: func() {}})
}

// pass runs one round: calls, SRQ rings whose doorbell rang (before the
// received packets that may need their receives), received packets,
// doorbells, due timers, the QPs all of them touched, then one batch of
// frames to the link.
func (w *worker) pass() {
	for _, c := range w.cl {
		c.f()
		if c.q != nil && !c.q.gone {
			w.touch(c.q, c.send, c.recv)
		}
		close(c.done)
		w.ran = true
	}
	clear(w.cl)
	w.postSRQs()
	w.handleRx()
	for _, q := range w.rdy {
		q.inReady.Store(false) // before the flags: a later notify queues q again
		send, recv := q.wantSend.Swap(false), q.wantRecv.Swap(false)
		if !q.gone {
			w.touch(q, send, recv)
			if send {
				w.poll(q)
			}
		}
	}
	clear(w.rdy)
	now := w.d.clock.Now()
	for {
		q, ok := w.timers.PopDue(now)
		if !ok {
			break
		}
		if !q.gone {
			w.touch(q, true, false)
		}
	}
	for _, q := range w.dirty {
		w.runQP(q)
	}
	clear(w.dirty)
	w.dirty = w.dirty[:0]
	w.out.flush()
}

// handleRx gives each packet of the inbox to its QP's engine (handle).
func (w *worker) handleRx() {
	for _, it := range w.rx {
		it.q.rxQueued.Add(-1)
		w.handle(it.q, &it.rx, it.request)
		w.d.putRx(it)
	}
	clear(w.rx)
}

// touch marks q's sides to run at the end of this pass.
func (w *worker) touch(q *QP, send, recv bool) {
	if !q.runSend && !q.runRecv && (send || recv) {
		w.dirty = append(w.dirty, q)
	}
	q.runSend = q.runSend || send
	q.runRecv = q.runRecv || recv
}

// maxRecvRuns bounds the receive side's turns in one pass; a side that
// still has work queues itself for the next pass, after the others.
const maxRecvRuns = 64

// runQP runs the sides of q this pass touched, and keeps its timer.
func (w *worker) runQP(q *QP) {
	send, recv := q.runSend, q.runRecv
	q.runSend, q.runRecv = false, false
	if q.gone {
		return
	}
	if recv {
		q.drainRecv(&w.rwr)
		busy := true
		for i := 0; busy && i < maxRecvRuns; i++ {
			busy = q.tq.RunRecv()
		}
		if busy {
			q.wantRecv.Store(true)
			w.markReady(q)
		}
	}
	if send {
		w.timers.Set(q, q.drainAndRun(&w.swr))
	}
}

// drainCallsAtStop completes calls queued after the last pass.
func (w *worker) drainCallsAtStop() {
	w.mu.Lock()
	cl := w.calls
	w.calls = nil
	w.mu.Unlock()
	for _, c := range cl {
		c.f()
		close(c.done)
	}
}

// batchOutput is a worker's transport.Output: what its QPs send during a
// pass is handed to the device's output (and so to the link) at the end of
// the pass, in one batch.
type batchOutput struct {
	d       *Device
	pending []transport.TxPacket
	free    [][]byte // buffers of bufSize the last flushes sent, for Alloc
}

// maxPending flushes a pass's frames early, bounding what it holds.
const maxPending = 256

func (o *batchOutput) Headroom() int { return o.d.out.Headroom() }

// maxFree bounds the buffers a worker keeps for itself (batchOutput.free);
// past it they go back to the device's pool.
const maxFree = 2 * maxPending

// Alloc takes a buffer the worker sent before, if one fits: the device's
// sync.Pool cost an allocation per Put (its *[]byte).
func (o *batchOutput) Alloc(n int) []byte {
	if k := len(o.free); k > 0 && n+netstack.Headroom <= bufSize {
		b := o.free[k-1]
		o.free[k-1] = nil
		o.free = o.free[:k-1]
		return b[:netstack.Headroom+n]
	}
	return o.d.out.Alloc(n)
}

func (o *batchOutput) Send(pkts []transport.TxPacket) {
	o.pending = append(o.pending, pkts...)
	if len(o.pending) >= maxPending {
		o.flush()
	}
}

func (o *batchOutput) flush() {
	if len(o.pending) == 0 {
		return
	}
	o.d.out.send(o.pending)
	for i := range o.pending {
		b := o.pending[i].Buf
		if cap(b) == bufSize && len(o.free) < maxFree {
			o.free = append(o.free, b[:0])
		} else {
			o.d.out.free(b)
		}
	}
	clear(o.pending)
	o.pending = o.pending[:0]
}
