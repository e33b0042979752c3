// Package wq is the daemon's end of the work queue rings a client
// produces (SQ, RQ and SRQ rings, laid out by package ring): it decodes
// and validates each entry into the engine's work request
// (transport.SendWR, transport.RecvWR). It is the one part of the ring
// protocol that links the engine; package ring, which the client SDK
// uses, does not.
package wq

import (
	"fmt"

	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/verbsock/ring"
)

// Resolver turns handles found in SQEs into daemon objects. It is called
// from the QP's send owner, concurrently with the control plane.
type Resolver interface {
	// AH returns the address vector of an address handle (immutable once
	// created) and its PD.
	AH(handle uint32) (*transport.AddressVector, mem.PD, bool)
	// Mem returns a mapped client memory object.
	Mem(handle uint32) (mem.Backing, bool)
}

// SQConfig describes a send queue ring.
type SQConfig struct {
	Mem       []byte // the mapping
	Entries   uint32
	MaxSGE    uint32
	MaxInline uint32
	MaxPages  int // largest REG_MR page list
	PageSize  int
	PD        mem.PD // the QP's
	Resolver  Resolver
	// OnCorrupt is called once, from the consumer, when the ring's indices
	// are impossible; the ring yields nothing after that.
	OnCorrupt func(reason string)
}

// SendQueue is the daemon end of an SQ ring: a nic.SendSource. Peek and
// Consume belong to the QP's send owner.
type SendQueue struct {
	c      ring.Consumer
	cfg    SQConfig
	copyb  []byte // the private copy of the entry at head
	have   bool   // wr holds the decoded entry at head
	wr     transport.SendWR
	sgl    []transport.SGE
	inline []byte
}

// NewSendQueue makes the daemon end of an SQ ring.
func NewSendQueue(cfg SQConfig) (*SendQueue, error) {
	es := ring.SQEntrySize(cfg.MaxSGE, cfg.MaxInline)
	q := &SendQueue{cfg: cfg, copyb: make([]byte, es),
		sgl: make([]transport.SGE, cfg.MaxSGE), inline: make([]byte, cfg.MaxInline)}
	if err := q.c.Init(cfg.Mem, cfg.Entries, es, cfg.PageSize); err != nil {
		return nil, err
	}
	return q, nil
}

// Peek implements nic.SendSource: it copies the next WR into wr. The WR's
// SGL and Inline alias the queue's buffers until Consume; its AH, RegMR
// and Bind are fresh objects the engine may keep.
func (q *SendQueue) Peek(wr *transport.SendWR) bool { return q.peek(wr, false) }

// PeekQuiet implements nic.PolledSendSource: Peek that leaves an empty
// ring unarmed, for a worker that polls the ring (Moved) while it is busy
// and arms it (Arm) only before it sleeps.
func (q *SendQueue) PeekQuiet(wr *transport.SendWR) bool { return q.peek(wr, true) }

// Moved implements nic.PolledSendSource: the client posted since the last
// call.
func (q *SendQueue) Moved() bool { return q.c.Moved() }

// Arm implements nic.PolledSendSource: the client's next post rings the
// doorbell, unless it posted since the last Moved (false).
func (q *SendQueue) Arm() bool { return q.c.Arm() }

func (q *SendQueue) peek(wr *transport.SendWR, quiet bool) bool {
	if q.have {
		*wr = q.wr
		return true
	}
	e, err := q.c.Next(quiet)
	if err != nil {
		if q.cfg.OnCorrupt != nil {
			q.cfg.OnCorrupt("send queue: " + err.Error())
		}
		return false
	}
	if e == nil {
		return false
	}
	copy(q.copyb, e) // the only read of the client's entry
	q.decode()
	q.have = true
	*wr = q.wr
	return true
}

// Consume implements nic.SendSource.
func (q *SendQueue) Consume() {
	if !q.have {
		return
	}
	q.have = false
	q.c.Consume()
}

// Discard implements nic.Discarder, on the send owner.
func (q *SendQueue) Discard() {
	q.have = false
	q.c.Discard()
}

func (q *SendQueue) decode() {
	q.wr = transport.SendWR{}
	st := DecodeSQE(q.copyb, &q.wr, q.sgl, q.inline, &q.cfg)
	q.wr.Fault = st
}

// RQConfig describes a receive queue or SRQ ring.
type RQConfig struct {
	Mem       []byte
	Entries   uint32
	MaxSGE    uint32
	PageSize  int
	OnCorrupt func(reason string)
}

// RecvQueue is the daemon end of an RQ or SRQ ring: a nic.RecvSource.
type RecvQueue struct {
	c     ring.Consumer
	cfg   RQConfig
	copyb []byte
	have  bool
	wr    transport.RecvWR
	sgl   []transport.SGE
}

// NewRecvQueue makes the daemon end of an RQ or SRQ ring.
func NewRecvQueue(cfg RQConfig) (*RecvQueue, error) {
	es := ring.RQEntrySize(cfg.MaxSGE)
	q := &RecvQueue{cfg: cfg, copyb: make([]byte, es), sgl: make([]transport.SGE, max(cfg.MaxSGE, 1))}
	if err := q.c.Init(cfg.Mem, cfg.Entries, es, cfg.PageSize); err != nil {
		return nil, err
	}
	return q, nil
}

// Peek implements nic.RecvSource.
func (q *RecvQueue) Peek(wr *transport.RecvWR) bool { return q.peek(wr, false) }

// PeekQuiet implements nic.QuietRecvSource: Peek that leaves an empty ring
// unarmed, so the client's next post does not ring.
func (q *RecvQueue) PeekQuiet(wr *transport.RecvWR) bool { return q.peek(wr, true) }

func (q *RecvQueue) peek(wr *transport.RecvWR, quiet bool) bool {
	if q.have {
		*wr = q.wr
		return true
	}
	e, err := q.c.Next(quiet)
	if err != nil {
		if q.cfg.OnCorrupt != nil {
			q.cfg.OnCorrupt("receive queue: " + err.Error())
		}
		return false
	}
	if e == nil {
		return false
	}
	copy(q.copyb, e)
	DecodeRQE(q.copyb, &q.wr, q.sgl, q.cfg.MaxSGE)
	q.have = true
	*wr = q.wr
	return true
}

// Carry starts a fresh SRQ ring (resize_srq) with used WQEs carried over
// from the ring it replaces, still in the SRQ and so still holding slots:
// it publishes producer index used and consumer index 0, the one time
// the daemon writes the producer's index, while the client waits for the
// reply and does not post. Retire(queued) then frees a slot per WQE taken.
func (q *RecvQueue) Carry(used uint32) error {
	if q.have {
		return fmt.Errorf("ring: carry %d WQEs into a ring with a WQE handed out", used)
	}
	return q.c.Carry(used)
}

// Pending is the number of entries published and not yet consumed (0 on a
// corrupt ring).
func (q *RecvQueue) Pending() int { return q.c.Pending() }

// Consume implements nic.RecvSource.
func (q *RecvQueue) Consume() {
	if !q.have {
		return
	}
	q.have = false
	q.c.Consume()
}

// Discard implements nic.Discarder, on the receive owner (not for an
// SRQ's ring: RESET of a QP leaves its SRQ alone).
func (q *RecvQueue) Discard() {
	q.have = false
	q.c.Discard()
}

// Retire hands back to the client the slots of every consumed entry but
// the last queued ones, which the engine still holds (ring.Consumer.Retire).
func (q *SendQueue) Retire(queued int) { q.c.Retire(queued) }

// Corrupt reports whether the ring was stopped because its producer index
// was impossible.
func (q *SendQueue) Corrupt() bool { return q.c.Corrupt() }

// Head is the number of entries consumed.
func (q *SendQueue) Head() uint64 { return q.c.Head() }

// Retire hands back to the client the slots of every consumed entry but
// the last queued ones, which the engine or the SRQ still holds
// (ring.Consumer.Retire).
func (q *RecvQueue) Retire(queued int) { q.c.Retire(queued) }

// Corrupt reports whether the ring was stopped because its producer index
// was impossible.
func (q *RecvQueue) Corrupt() bool { return q.c.Corrupt() }

// Head is the number of entries consumed.
func (q *RecvQueue) Head() uint64 { return q.c.Head() }
