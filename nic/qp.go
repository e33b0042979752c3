package nic

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/clock"
	"github.com/vrnic/vrnicd/transport/mem"
)

// SendSource is a send queue the client fills (a shared-memory ring). The
// send owner copies the next WR with Peek and takes it with Consume once the
// engine has it. wr.SGL and wr.Inline may alias the source's buffers until
// Consume. A WR that failed validation comes with wr.Fault set. Retire
// tells the source how many taken WRs the engine still holds; the slots of
// the others go back to the client.
type SendSource interface {
	Peek(wr *transport.SendWR) bool
	Consume()
	Retire(queued int)
}

// RecvSource is the same for a receive queue.
type RecvSource interface {
	Peek(wr *transport.RecvWR) bool
	Consume()
	Retire(queued int)
}

// QuietRecvSource is a RecvSource whose producer can be left unarmed:
// PeekQuiet is Peek that, on an empty queue, does not ask for a doorbell.
// The worker drains a QP's receive queue before every request it handles,
// so while the QP can receive, a posted receive needs no wake-up: one
// doorbell (a system call on each side and a daemon wake-up) less per
// message. Only a QP in ERR must act on a post (flush it), so there the
// worker uses Peek.
type QuietRecvSource interface {
	RecvSource
	PeekQuiet(wr *transport.RecvWR) bool
}

// PolledSendSource is a SendSource the worker can poll while it is busy
// and arm only before it sleeps (NAPI-style): while the worker runs, the
// client's posts ring no doorbell (no system call on either side), and
// wake-ups cost only on idle-to-busy transitions. PeekQuiet is Peek that
// leaves an empty ring unarmed; Moved reports a post since the last call;
// Arm makes the next post ring, unless one came since Moved (false).
type PolledSendSource interface {
	SendSource
	PeekQuiet(wr *transport.SendWR) bool
	Moved() bool
	Arm() bool
}

// QPConfig is what Device.CreateQP takes: the engine's transport.QPConfig
// less what the device decides (the QPN, the hooks), plus the client's rings.
type QPConfig struct {
	Type     transport.QPType
	PD       mem.PD
	Cap      transport.QPCap
	SendCQ   transport.CompletionQueue
	RecvCQ   transport.CompletionQueue
	SRQ      *transport.SRQ
	SQSigAll bool
	SQ       SendSource // nil: only PostSend/PostRecv on the QP
	RQ       RecvSource
	Doorbell Doorbell // nil: the rings' producer calls NotifySend/NotifyRecv
	OnEvent  func(transport.Event)
	Owner    int // client pid
	// BlockSelfMcastLB: the QP does not receive the multicast packets it
	// sends itself (IBV_QP_CREATE_BLOCK_SELF_MCAST_LB).
	BlockSelfMcastLB bool
}

// QP is the device's QP (the nic layer): the engine's transport.QP, the
// client's rings it takes WRs from, and the datapath worker that owns it
// (both sides). The SDK's verbs.QP is a client's handle to one. Everything
// below the worker-owned line is touched only on that worker.
type QP struct {
	d     *Device
	tq    *transport.QP
	sq    SendSource
	psq   PolledSendSource // sq, if it can be polled
	rq    RecvSource
	owner int
	onEv  func(transport.Event)
	w     *worker

	blockSelfMcast bool     // QPConfig.BlockSelfMcastLB
	srq            *srqBell // its SRQ's ring, if watched (WatchSRQ before the QP was made)

	// Set by anyone, taken by the worker (worker.markReady).
	wantSend, wantRecv atomic.Bool
	inReady            atomic.Bool
	rxQueued           atomic.Int32 // packets queued for the worker
	mtuWarned          atomic.Bool  // told the log its packets exceed the link's MTU (output.go)

	stopOnce sync.Once

	// Worker-owned.
	bell             Doorbell
	gone             bool       // destroyed: its packets and wake-ups are dropped
	runSend, runRecv bool       // touched this pass
	wake             clock.Slot // in the worker's timer heap
	polled           bool       // psq is in the worker's polled list, unarmed
	stillPasses      int        // passes since psq last moved (while polled)
}

// inQueue bounds the packets waiting for one QP's worker; more are dropped
// like a full NIC ring.
const inQueue = 2048

// CreateQP makes a QP in RESET, owned by the worker its QPN maps to, which
// then also sleeps on the QP's doorbell (if it has one).
func (d *Device) CreateQP(cfg QPConfig) (*QP, error) {
	q, err := d.newQP(cfg)
	if err != nil {
		if cfg.Doorbell != nil {
			_ = cfg.Doorbell.Close()
		}
		return nil, err
	}
	if cfg.Doorbell != nil {
		q.w.run(call{f: func() {
			q.bell = cfg.Doorbell
			err = q.w.addBell(q)
		}})
		if err != nil {
			q.Destroy()
			return nil, fmt.Errorf("nic: QP doorbell: %w", err)
		}
	}
	return q, nil
}

// newQP is CreateQP's QP, checked against the device's limits and in its
// table.
func (d *Device) newQP(cfg QPConfig) (*QP, error) {
	l := d.cfg.Limits
	c := cfg.Cap
	if c.MaxSendWR > l.MaxQPWR || c.MaxRecvWR > l.MaxQPWR || c.MaxSendSGE > l.MaxSGE || c.MaxRecvSGE > l.MaxSGE ||
		c.MaxInlineData > l.MaxInline {
		return nil, fmt.Errorf("%w: QP caps %+v exceed the device's (%d WRs, %d SGEs, %d inline)", transport.ErrInvalid,
			c, l.MaxQPWR, l.MaxSGE, l.MaxInline)
	}
	if cfg.SRQ != nil && cfg.SRQ.PD() != cfg.PD {
		return nil, fmt.Errorf("%w: SRQ of another PD", transport.ErrInvalid)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	if len(d.qps) >= l.MaxQP {
		return nil, fmt.Errorf("%w: %d QPs", ErrLimit, len(d.qps))
	}
	if err := d.mem.HoldPD(cfg.PD); err != nil {
		return nil, err
	}
	qpn := d.allocQPN()
	q := &QP{d: d, sq: cfg.SQ, rq: cfg.RQ, owner: cfg.Owner, onEv: cfg.OnEvent, w: d.workerFor(qpn),
		blockSelfMcast: cfg.BlockSelfMcastLB}
	q.psq, _ = cfg.SQ.(PolledSendSource)
	tq, err := transport.NewQP(&q.w.env, transport.QPConfig{QPN: qpn, Type: cfg.Type, PD: cfg.PD, Cap: c,
		SendCQ: cfg.SendCQ, RecvCQ: cfg.RecvCQ, SRQ: cfg.SRQ, SQSigAll: cfg.SQSigAll,
		Hooks: transport.Hooks{WakeSend: q.NotifySend, WakeRecv: q.NotifyRecv, Event: q.event,
			SendRetired: q.retireSend, RecvRetired: q.retireRecv}})
	if err != nil {
		_ = d.mem.ReleasePD(cfg.PD)
		return nil, err
	}
	q.tq = tq
	if cfg.SRQ != nil {
		q.srq = d.srqs[cfg.SRQ]
	}
	d.qps[qpn] = q
	return q, nil
}

// allocQPN picks the next free QPN; QPNs start at 0x11 as in rxe and wrap
// below 2^24.
// +checklocks:d.mu
func (d *Device) allocQPN() uint32 {
	for {
		n := d.nextQPN
		d.nextQPN++
		if d.nextQPN >= 1<<24-1 {
			d.nextQPN = 0x11
		}
		if _, used := d.qps[n]; used {
			continue
		}
		if l, ok := d.lingering[n]; ok {
			if d.clock.Now().Before(l.until) {
				continue
			}
			delete(d.lingering, n)
		}
		return n
	}
}

// retireSend and retireRecv run on their side's owner, inside the engine,
// before a completion is pushed.
func (q *QP) retireSend() {
	if q.sq != nil {
		q.sq.Retire(q.tq.SendQueued())
	}
}

func (q *QP) retireRecv() {
	if q.rq != nil {
		q.rq.Retire(q.tq.RecvQueued())
	}
}

func (q *QP) event(qpn uint32, ev transport.Event) {
	if q.onEv != nil {
		q.onEv(ev)
	}
}

// QPN is the QP's number.
func (q *QP) QPN() uint32 { return q.tq.QPN() }

// Engine is the transport QP (for tests and tools; its owner-side methods
// must not be called from outside the owners).
func (q *QP) Engine() *transport.QP { return q.tq }

// Info summarises the QP.
func (q *QP) Info() transport.Info { return q.tq.Info() }

// Counters are the QP's counters.
func (q *QP) Counters() *transport.Counters { return q.tq.Counters() }

// Query returns the QP's attributes.
func (q *QP) Query() (transport.QPAttr, transport.QPCap) { return q.tq.Query() }

// Modify changes the QP's attributes; an AV gets its SGID from the GID table.
func (q *QP) Modify(a *transport.QPAttr, mask transport.AttrMask) error {
	if mask&transport.AttrAV != 0 {
		av := a.AV
		if err := q.d.ResolveAH(&av); err != nil {
			return err
		}
		a2 := *a
		a2.AV = av
		a = &a2
	}
	return q.tq.Modify(a, mask)
}

// NotifySend asks the QP's worker to run its send side.
func (q *QP) NotifySend() {
	q.wantSend.Store(true)
	q.w.markReady(q)
}

// NotifyRecv asks the QP's worker to run its receive side.
func (q *QP) NotifyRecv() {
	q.wantRecv.Store(true)
	q.w.markReady(q)
}

// PostSend hands a WR to the QP's worker (for in-process users without a
// ring); the error is ibv_post_send's.
func (q *QP) PostSend(wr *transport.SendWR) error {
	return q.post(true, func() error { return q.tq.PostSend(wr) })
}

// PostRecv hands a receive WR to the QP's worker.
func (q *QP) PostRecv(wr *transport.RecvWR) error {
	return q.post(false, func() error { return q.tq.PostRecv(wr) })
}

// post runs f on the worker, then that side of the QP in the same pass.
func (q *QP) post(send bool, f func() error) error {
	err := ErrClosed
	q.w.run(call{q: q, send: send, recv: !send, f: func() {
		if !q.gone {
			err = f()
		}
	}})
	return err
}

// TakePosted returns once the QP's worker has taken the send WRs posted
// in its ring before the call (and run its send side on them). A call is
// done when it has run, before the QPs it touched run at the end of the
// pass: the second call is taken only by the next pass.
func (q *QP) TakePosted() {
	q.w.run(call{q: q, send: true, f: func() {}})
	q.w.run(call{f: func() {}})
}

// Quiesce returns once the QP's worker has run both its sides and handed
// what that produced to the link. After a move to ERR, the ACK owed for
// what the QP already completed is then on the wire before the caller
// sends anything about the QP itself: the CM agent's DREQ or DREP must not
// overtake it, or the peer flushes a SEND whose receive completed here.
func (q *QP) Quiesce() {
	q.w.run(call{q: q, send: true, recv: true, f: func() {}})
	q.w.run(call{f: func() {}}) // taken after the pass above has flushed
}

// Destroy moves the QP to ERR, lets its worker flush both sides and drop
// it, and removes the QP from the device.
func (q *QP) Destroy() {
	q.stopOnce.Do(func() {
		q.d.detachAll(q)
		if t := q.tq.Type(); t == transport.QPTypeUD || t == transport.QPTypeUC {
			// Sends posted before the destroy leave first, as kernel rxe's
			// post_send runs them at once: a program that posts unsignaled
			// datagrams and exits (mckey's sender) has them delivered.
			q.TakePosted()
		}
		q.tq.Destroy()
		q.w.run(call{f: func() {
			q.tq.RunSend() // ERR: flush what is left
			q.tq.RunRecv()
			q.gone = true
			q.w.timers.Remove(q)
			q.w.dropBell(q)
		}})
		d := q.d
		d.mu.Lock()
		delete(d.qps, q.QPN())
		if c, ok := q.tq.Closed(); ok && !d.closed {
			d.linger(c)
		}
		d.mu.Unlock()
		d.mem.DetachQP(q.QPN())
		_ = d.mem.ReleasePD(q.tq.PD())
	})
}

// drainAndRun moves posted WRs from the client's ring into the engine and
// runs it, again while running freed room for WRs still waiting (UC and UD
// WQEs complete without any packet arriving to wake the owner).
func (q *QP) drainAndRun(wr *transport.SendWR) time.Time {
	for {
		full := false
		if q.sq != nil {
			for q.peekSend(wr) {
				err := q.tq.PostSend(wr)
				if err != nil && !errors.Is(err, transport.ErrFull) && !errors.Is(err, transport.ErrState) {
					wr.Fault = transport.WCLocQPOpErr // a WR ibv_post_send would refuse
					err = q.tq.PostSend(wr)
				}
				if err != nil {
					full = errors.Is(err, transport.ErrFull) // or not yet RTS: it stays in the ring
					break
				}
				q.sq.Consume()
			}
		}
		before := q.tq.SendQueued()
		next := q.tq.RunSend()
		if !full || q.tq.SendQueued() >= before {
			return next
		}
	}
}

// peekSend is the SQ's Peek; a polled ring is not armed by it (the worker
// arms it before it sleeps, see worker.armPolled).
func (q *QP) peekSend(wr *transport.SendWR) bool {
	if q.psq != nil {
		return q.psq.PeekQuiet(wr)
	}
	return q.sq.Peek(wr)
}

// drainRecv moves posted receive WRs from the client's ring into the
// engine, or from its SRQ's ring into the SRQ; the worker runs it before
// every request so a receive posted just before a message arrives is
// there for it, as a post is at once on a NIC (and so counts for the
// SRQ's limit when the request takes a WQE).
func (q *QP) drainRecv(wr *transport.RecvWR) {
	if q.srq != nil {
		q.srq.postBefore()
		return
	}
	if q.rq == nil {
		return
	}
	qs, quiet := q.rq.(QuietRecvSource)
	quiet = quiet && q.tq.State() != transport.StateErr
	for {
		var ok bool
		if quiet {
			ok = qs.PeekQuiet(wr)
		} else {
			ok = q.rq.Peek(wr)
		}
		if !ok {
			return
		}
		if err := q.tq.PostRecv(wr); err != nil {
			if errors.Is(err, transport.ErrInvalid) {
				wr.Fault = transport.WCLocQPOpErr
				err = q.tq.PostRecv(wr)
			}
			if err != nil {
				return
			}
		}
		q.rq.Consume()
	}
}
