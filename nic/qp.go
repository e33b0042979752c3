package nic

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/vrnic/vrnicd/transport"
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

// QPConfig is what CreateQP takes.
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
	OnEvent  func(transport.Event)
	Owner    int // client pid
}

// QP is a device QP with its two owner goroutines.
type QP struct {
	d     *Device
	tq    *transport.QP
	sq    SendSource
	rq    RecvSource
	owner int
	onEv  func(transport.Event)

	sendBell chan struct{}
	recvBell chan struct{}
	respIn   chan *rxItem
	reqIn    chan *rxItem
	// calls run on an owner (PostSend/PostRecv by in-process users)
	sendCalls chan postReq
	recvCalls chan postReq

	rwr transport.RecvWR // receive owner's scratch for drainRecv

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

const inQueue = 1024 // packets waiting per QP side; more are dropped like a full NIC ring

// CreateQP makes a QP in RESET and starts its owners.
func (d *Device) CreateQP(cfg QPConfig) (*QP, error) {
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
	q := &QP{d: d, sq: cfg.SQ, rq: cfg.RQ, owner: cfg.Owner, onEv: cfg.OnEvent,
		sendBell: make(chan struct{}, 1), recvBell: make(chan struct{}, 1),
		respIn: make(chan *rxItem, inQueue), reqIn: make(chan *rxItem, inQueue), stop: make(chan struct{}),
		sendCalls: make(chan postReq), recvCalls: make(chan postReq)}
	tq, err := transport.NewQP(&d.env, transport.QPConfig{QPN: qpn, Type: cfg.Type, PD: cfg.PD, Cap: c,
		SendCQ: cfg.SendCQ, RecvCQ: cfg.RecvCQ, SRQ: cfg.SRQ, SQSigAll: cfg.SQSigAll,
		Hooks: transport.Hooks{WakeSend: q.NotifySend, WakeRecv: q.NotifyRecv, Event: q.event,
			SendRetired: q.retireSend, RecvRetired: q.retireRecv}})
	if err != nil {
		_ = d.mem.ReleasePD(cfg.PD)
		return nil, err
	}
	q.tq = tq
	d.qps[qpn] = q
	q.wg.Add(2)
	go q.sendLoop()
	go q.recvLoop()
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

// Linger is how long a destroyed RC QP goes on acknowledging duplicates of
// requests it had taken (transport.ClosedQP): several retransmit timeouts
// of a peer at perftest's and rdma-core's timeout 14 (67 ms), and two at
// timeout 20 (4.3 s).
const Linger = 10 * time.Second

// maxLingering bounds the destroyed QPs kept; past it a destroyed QP goes
// at once, as it would without lingering.
const maxLingering = 4096

type lingerQP struct {
	c     transport.ClosedQP
	until time.Time
}

// linger keeps what a destroyed QP leaves behind.
// +checklocks:d.mu
func (d *Device) linger(c transport.ClosedQP) {
	now := d.clock.Now()
	if len(d.lingering) >= maxLingering {
		for n, l := range d.lingering {
			if !now.Before(l.until) {
				delete(d.lingering, n)
			}
		}
		if len(d.lingering) >= maxLingering {
			return
		}
	}
	d.lingering[c.QPN] = lingerQP{c: c, until: now.Add(Linger)}
}

// answerClosed lets a lingering QP answer a packet to its QPN; false: no
// such QP, or nothing to answer.
func (d *Device) answerClosed(qpn uint32, p *transport.RxPacket) bool {
	d.mu.RLock()
	l, ok := d.lingering[qpn]
	d.mu.RUnlock()
	if !ok || !d.clock.Now().Before(l.until) {
		return false
	}
	if !l.c.Answer(p, &d.out) {
		return false
	}
	d.ctr.Inc(transport.ClosedQPAcks)
	return true
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

// NotifySend rings the send doorbell.
func (q *QP) NotifySend() {
	select {
	case q.sendBell <- struct{}{}:
	default:
	}
}

// NotifyRecv rings the receive doorbell.
func (q *QP) NotifyRecv() {
	select {
	case q.recvBell <- struct{}{}:
	default:
	}
}

// PostSend hands a WR to the send owner (for in-process users without a
// ring); the error is ibv_post_send's.
func (q *QP) PostSend(wr *transport.SendWR) error {
	return q.post(func() error { return q.tq.PostSend(wr) }, q.sendBell)
}

// PostRecv hands a receive WR to the receive owner.
func (q *QP) PostRecv(wr *transport.RecvWR) error {
	return q.post(func() error { return q.tq.PostRecv(wr) }, q.recvBell)
}

// post runs f on the owner goroutine and returns its result.
func (q *QP) post(f func() error, bell chan struct{}) error {
	r := postReq{f: f, done: make(chan error, 1)}
	ch := q.sendCalls
	if bell == q.recvBell {
		ch = q.recvCalls
	}
	select {
	case ch <- r:
	case <-q.stop:
		return ErrClosed
	}
	select {
	case err := <-r.done:
		return err
	case <-q.stop:
		return ErrClosed
	}
}

type postReq struct {
	f    func() error
	done chan error
}

// Destroy moves the QP to ERR, lets both owners flush, stops them and
// removes the QP from the device.
func (q *QP) Destroy() {
	q.stopOnce.Do(func() {
		q.tq.Destroy()
		close(q.stop)
		q.wg.Wait()
		d := q.d
		d.mu.Lock()
		delete(d.qps, q.QPN())
		if c, ok := q.tq.Closed(); ok && !d.closed {
			d.linger(c)
		}
		d.mu.Unlock()
		d.mem.DetachQP(q.QPN())
		_ = d.mem.ReleasePD(q.tq.PD())
		for {
			select {
			case it := <-q.respIn:
				d.putRx(it)
			case it := <-q.reqIn:
				d.putRx(it)
			default:
				return
			}
		}
	})
}

func (q *QP) sendLoop() {
	defer q.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var wr transport.SendWR
	for {
		select {
		case <-q.stop:
			q.tq.RunSend() // ERR: flush what is left
			return
		case <-q.sendBell:
		case r := <-q.sendCalls:
			r.done <- r.f()
		case it := <-q.respIn:
			q.handleResp(it)
		case <-timer.C:
			// select picks among ready cases at random: responses that
			// came in before the deadline are handled before it is
			// checked, so they count as the peer's answer, not silence.
			q.drainResp()
		}
		next := q.drainAndRun(&wr)
		timer.Stop()
		if !next.IsZero() {
			timer.Reset(max(time.Until(next), 0))
		}
	}
}

// drainAndRun moves posted WRs from the client's ring into the engine and
// runs it, again while running freed room for WRs still waiting (UC and UD
// WQEs complete without any packet arriving to wake the owner).
func (q *QP) drainAndRun(wr *transport.SendWR) time.Time {
	for {
		full := false
		if q.sq != nil {
			for q.sq.Peek(wr) {
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

// drainRecv moves posted receive WRs from the client's ring into the
// engine; it runs before every request so a receive posted just before a
// message arrives is there for it.
func (q *QP) drainRecv(wr *transport.RecvWR) {
	if q.rq == nil {
		return
	}
	for q.rq.Peek(wr) {
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

func (q *QP) recvLoop() {
	defer q.wg.Done()
	var wr transport.RecvWR
	busy := false
	for {
		if busy {
			select {
			case <-q.stop:
				q.tq.RunRecv()
				return
			case r := <-q.recvCalls:
				r.done <- r.f()
			case it := <-q.reqIn:
				q.handleReq(it)
			default:
			}
		} else {
			select {
			case <-q.stop:
				q.tq.RunRecv()
				return
			case <-q.recvBell:
			case r := <-q.recvCalls:
				r.done <- r.f()
			case it := <-q.reqIn:
				q.handleReq(it)
			}
		}
		q.drainRecv(&wr)
		busy = q.tq.RunRecv()
	}
}

func (q *QP) handleReq(it *rxItem) {
	q.drainRecv(&q.rwr)
	q.tq.HandleRequest(&it.rx)
	q.d.putRx(it)
	for range 64 {
		select {
		case it := <-q.reqIn:
			q.drainRecv(&q.rwr)
			q.tq.HandleRequest(&it.rx)
			q.d.putRx(it)
		default:
			return
		}
	}
}

func (q *QP) handleResp(it *rxItem) {
	q.tq.HandleResponse(&it.rx)
	q.d.putRx(it)
	q.drainResp()
}

// drainResp handles the responses already queued, a bounded batch.
func (q *QP) drainResp() {
	for range 64 {
		select {
		case it := <-q.respIn:
			q.tq.HandleResponse(&it.rx)
			q.d.putRx(it)
		default:
			return
		}
	}
}
