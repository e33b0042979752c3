package transport

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/transport/wire"
)

// QPConfig is what an engine QP is created with (nic.QPConfig is the
// device's, which makes one of these: struct ibv_qp_init_attr plus the
// number the device gave it).
type QPConfig struct {
	QPN      uint32
	Type     QPType
	PD       mem.PD
	Cap      QPCap
	SendCQ   CompletionQueue
	RecvCQ   CompletionQueue
	SRQ      *SRQ // nil: the QP has its own receive queue
	SQSigAll bool
	Hooks    Hooks
}

// QP is one queue pair as the protocol engine sees it (the transport layer,
// without I/O; nic.QP runs one in the device, verbs.QP is a client's handle
// to that). Its send side (requester, completer and their
// timers) has one owner, which calls PostSend, HandleResponse and RunSend;
// its receive side (responder) has one owner, which calls PostRecv,
// HandleRequest and RunRecv (the device's datapath worker is both). The two
// never touch each other's state. The control plane (Modify, Query) publishes an immutable snapshot
// of the attributes that each owner picks up the next time it runs.
type QP struct {
	qpn      uint32
	typ      QPType
	pd       mem.PD
	cap      QPCap
	sendCQ   CompletionQueue
	recvCQ   CompletionQueue
	srq      *SRQ
	sigAll   bool
	hooks    Hooks
	env      *Env
	log      *slog.Logger
	counters Counters

	mu   sync.Mutex // serialises control-plane changes to attr
	attr QPAttr     // +checklocks:mu
	gen  uint64     // +checklocks:mu
	// resets counts transitions to RESET, so an owner that missed one
	// between two runs still clears its side.
	resets uint64 // +checklocks:mu
	snap   atomic.Pointer[qpSnap]

	// Published by the owners for Info; approximate by nature.
	pubSendPSN, pubCompPSN, pubRecvPSN atomic.Uint32
	pubOutstanding                     atomic.Int64
	pubWindow                          atomic.Int32
	pubSRTT                            atomic.Int64

	snd sendSide // owned by the send goroutine
	rcv recvSide // owned by the receive goroutine
}

// qpSnap is an immutable view of the attributes at one moment.
type qpSnap struct {
	attr    QPAttr
	gen     uint64
	resets  uint64
	mtu     int    // path MTU in bytes (UD: the port MTU at create time)
	srcPort uint16 // UDP source port of this QP's packets
}

// NewQP creates a QP in RESET.
func NewQP(env *Env, cfg QPConfig) (*QP, error) {
	switch cfg.Type {
	case QPTypeRC, QPTypeUC, QPTypeUD, QPTypeGSI:
	default:
		return nil, fmt.Errorf("%w: QP type %d", ErrInvalid, cfg.Type)
	}
	if cfg.SendCQ == nil || cfg.RecvCQ == nil {
		return nil, fmt.Errorf("%w: QP needs a send CQ and a receive CQ", ErrInvalid)
	}
	if cfg.Cap.MaxSendWR == 0 && cfg.Cap.MaxRecvWR == 0 {
		return nil, fmt.Errorf("%w: QP with no send and no receive queue", ErrInvalid)
	}
	if env.Clock == nil || env.Out == nil || env.Memory == nil {
		return nil, fmt.Errorf("%w: engine environment incomplete", ErrInvalid)
	}
	log := env.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	q := &QP{
		qpn: cfg.QPN, typ: cfg.Type, pd: cfg.PD, cap: cfg.Cap, sendCQ: cfg.SendCQ, recvCQ: cfg.RecvCQ,
		srq: cfg.SRQ, sigAll: cfg.SQSigAll, hooks: cfg.Hooks, env: env,
		log: log.With("qpn", cfg.QPN),
	}
	// Uncontended (q is not shared yet); taken so that publish's
	// +checklocks precondition holds here as everywhere.
	q.mu.Lock()
	q.attr.State = StateReset
	q.attr.PathMTU = MTU1024
	q.publish(udpSourcePortForQPN(cfg.QPN))
	q.mu.Unlock()
	q.snd.init(q)
	q.rcv.init(q)
	return q, nil
}

// QPN is the QP's number.
func (q *QP) QPN() uint32 { return q.qpn }

// Type is the QP's transport service.
func (q *QP) Type() QPType { return q.typ }

// PD is the protection domain the QP belongs to.
func (q *QP) PD() mem.PD { return q.pd }

// Counters are the QP's own counters.
func (q *QP) Counters() *Counters { return &q.counters }

// State is the QP's current state.
func (q *QP) State() QPState { return q.snap.Load().attr.State }

// SRQ is the shared receive queue the QP uses, if any.
func (q *QP) SRQ() *SRQ { return q.srq }

// +checklocks:q.mu
func (q *QP) publish(srcPort uint16) {
	q.gen++
	s := &qpSnap{attr: q.attr, gen: q.gen, resets: q.resets, srcPort: srcPort}
	s.mtu = q.attr.PathMTU.Bytes()
	if isDatagram(q.typ) {
		s.mtu = MTU1024.Bytes()
		if q.env.PortMTU != nil {
			s.mtu = q.env.PortMTU().Bytes()
		}
	}
	q.snap.Store(s)
}

// Modify changes the QP's attributes (ibv_modify_qp). Invalid transitions or
// attributes are ErrInvalid and change nothing.
func (q *QP) Modify(a *QPAttr, mask AttrMask) error {
	q.mu.Lock()
	cur := q.attr.State
	next, err := checkModify(q.typ, cur, a, mask)
	if err != nil {
		q.mu.Unlock()
		return err
	}
	if q.typ == QPTypeGSI && mask&AttrQKey != 0 && a.QKey != wire.GSIQKey {
		q.mu.Unlock()
		return fmt.Errorf("%w: QP1 Q_Key must be %#x", ErrInvalid, wire.GSIQKey)
	}
	n := &q.attr
	if mask&AttrAccessFlags != 0 {
		n.AccessFlags = a.AccessFlags
	}
	if mask&AttrPKeyIndex != 0 {
		n.PKeyIndex = a.PKeyIndex
	}
	if mask&AttrPort != 0 {
		n.Port = a.Port
	}
	if mask&AttrQKey != 0 {
		n.QKey = a.QKey
	}
	if mask&AttrAV != 0 {
		n.AV = a.AV
	}
	if mask&AttrPathMTU != 0 {
		n.PathMTU = a.PathMTU
	}
	if mask&AttrTimeout != 0 {
		n.Timeout = a.Timeout
	}
	if mask&AttrRetryCnt != 0 {
		n.RetryCnt = a.RetryCnt
	}
	if mask&AttrRNRRetry != 0 {
		n.RNRRetry = a.RNRRetry
	}
	if mask&AttrRQPSN != 0 {
		n.RQPSN = a.RQPSN
	}
	if mask&AttrMaxQPRdAtomic != 0 {
		n.MaxRdAtomic = a.MaxRdAtomic
	}
	if mask&AttrMinRNRTimer != 0 {
		n.MinRNRTimer = a.MinRNRTimer
	}
	if mask&AttrSQPSN != 0 {
		n.SQPSN = a.SQPSN
	}
	if mask&AttrMaxDestRdAtomic != 0 {
		n.MaxDestRdAtomic = a.MaxDestRdAtomic
	}
	if mask&AttrDestQPN != 0 {
		n.DestQPN = a.DestQPN
	}
	if mask&AttrEnSQDAsyncNotify != 0 {
		n.SQDrainNotify = a.SQDrainNotify
	}
	if next == StateReset && cur != StateReset {
		q.resets++
	}
	n.State = next
	n.CurState = next
	port := q.snap.Load().srcPort
	if mask&AttrAV != 0 && !isDatagram(q.typ) {
		port = udpSourcePort(n.AV.FlowLabel, q.qpn, n.DestQPN)
	}
	q.publish(port)
	q.mu.Unlock()
	q.log.Debug("modify qp", "from", cur, "to", next, "mask", fmt.Sprintf("%#x", uint32(mask)))
	q.wakeBoth()
	return nil
}

// Query returns the QP's attributes (ibv_query_qp).
func (q *QP) Query() (QPAttr, QPCap) {
	s := q.snap.Load()
	return s.attr, q.cap
}

// Info is what `vrnicctl qp` shows of a QP.
type Info struct {
	QPN         uint32
	Type        QPType
	State       QPState
	DestQPN     uint32
	SendPSN     uint32        // next PSN the requester assigns
	CompPSN     uint32        // oldest unacknowledged PSN
	RecvPSN     uint32        // PSN the responder expects
	Outstanding int64         // send WQEs posted and not yet completed
	Window      int32         // RC: PSNs that may be unacknowledged now (window.go)
	SRTT        time.Duration // RC: the smoothed round trip (0: not measured yet; tlp.go)
}

// Info returns a summary; PSNs are what the owners last published.
func (q *QP) Info() Info {
	s := q.snap.Load()
	return Info{
		QPN: q.qpn, Type: q.typ, State: s.attr.State, DestQPN: s.attr.DestQPN,
		SendPSN: q.pubSendPSN.Load(), CompPSN: q.pubCompPSN.Load(), RecvPSN: q.pubRecvPSN.Load(),
		Outstanding: q.pubOutstanding.Load(), Window: q.pubWindow.Load(), SRTT: time.Duration(q.pubSRTT.Load()),
	}
}

// SendQueued is how many send WQEs the engine holds and has not completed.
// Send owner only: a ring hands a slot back when its WQE leaves this count.
func (q *QP) SendQueued() int { return int(q.snd.tail - q.snd.head) }

// RecvQueued is how many receive WQEs of the QP's own RQ the engine holds
// and has not completed (0 with an SRQ). Receive owner only.
func (q *QP) RecvQueued() int {
	rs := &q.rcv
	n := int(rs.rqTail - rs.rqHead)
	if rs.hasCur && q.srq == nil {
		n++
	}
	return n
}

func (q *QP) retiredSend() {
	if q.hooks.SendRetired != nil {
		q.hooks.SendRetired()
	}
}

func (q *QP) retiredRecv() {
	if q.hooks.RecvRetired != nil {
		q.hooks.RecvRetired()
	}
}

// Destroy moves the QP to ERR so that both owners flush their queues; the
// caller stops the owners after their last run.
func (q *QP) Destroy() {
	q.mu.Lock()
	if q.attr.State != StateErr {
		q.attr.State = StateErr
		q.publish(q.snap.Load().srcPort)
	}
	q.mu.Unlock()
	q.wakeBoth()
}

// fatal moves the QP to ERR after an error one of its owners found, and
// tells the other side and the consumer.
func (q *QP) fatal(ev Event, why string) {
	q.mu.Lock()
	was := q.attr.State
	if was != StateErr && was != StateReset {
		q.attr.State = StateErr
		q.publish(q.snap.Load().srcPort)
	}
	q.mu.Unlock()
	if was != StateErr && was != StateReset {
		q.log.Warn("QP moved to error", "reason", why)
		if q.hooks.Event != nil {
			q.hooks.Event(q.qpn, ev)
		}
		q.wakeBoth()
	}
}

// sendQueueError moves a UC/UD QP to SQE: its send queue stops, its
// receive queue goes on (IBA 10.3.1.7).
func (q *QP) sendQueueError(why string) {
	q.mu.Lock()
	was := q.attr.State
	if was == StateRTS || was == StateSQD {
		q.attr.State = StateSQE
		q.publish(q.snap.Load().srcPort)
	}
	q.mu.Unlock()
	if was == StateRTS || was == StateSQD {
		q.log.Warn("QP send queue error", "reason", why)
		if q.hooks.Event != nil {
			q.hooks.Event(q.qpn, EventQPReqErr)
		}
		q.wakeBoth()
	}
}

func (q *QP) wakeBoth() {
	if q.hooks.WakeSend != nil {
		q.hooks.WakeSend()
	}
	if q.hooks.WakeRecv != nil {
		q.hooks.WakeRecv()
	}
}

func (q *QP) event(ev Event) {
	if q.hooks.Event != nil {
		q.hooks.Event(q.qpn, ev)
	}
}

func (q *QP) inc(c Counter) {
	q.counters.Inc(c)
	if q.env.Device != nil {
		q.env.Device.Inc(c)
	}
}

// udpSourcePortForQPN is the source port rxe gives a QP at create time:
// 0xC000 + hash_32(qpn, 14), hash_32 being the golden-ratio multiplicative
// hash.
func udpSourcePortForQPN(qpn uint32) uint16 {
	return 0xC000 + uint16((qpn*0x61C88647)>>(32-14))
}

// udpSourcePort is rdma_get_udp_sport(): the port follows the flow label,
// which is derived from both QPNs when the address vector has none.
func udpSourcePort(flowLabel, lqpn, rqpn uint32) uint16 {
	fl := flowLabel & 0xFFFFF
	if fl == 0 {
		v := uint64(lqpn) * uint64(rqpn)
		v ^= v >> 20
		v ^= v >> 40
		fl = uint32(v & 0xFFFFF)
	}
	return 0xC000 | uint16((fl&0x3FFF)^((fl&0xFC000)>>14))
}
