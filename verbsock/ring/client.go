package ring

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/vrnic/vrnicd/verbsock/ibv"
)

// Producer is the client end of an SQ, RQ or SRQ ring. It is not safe for
// concurrent use (the SDK holds the queue's lock).
type Producer struct {
	m       []byte
	entries uint64
	esize   int
	tail    uint64
	pending uint64 // written, not yet published
}

// NewProducer makes the client end of a ring in m and writes its header.
func NewProducer(m []byte, k Kind, entries uint32, esize, pageSize int) (*Producer, error) {
	if err := checkRing(m, entries, esize, pageSize); err != nil {
		return nil, err
	}
	InitHeader(m, k, entries, esize)
	return &Producer{m: m, entries: uint64(entries), esize: esize}, nil
}

// Room is how many entries can be written now.
func (p *Producer) Room() int {
	used := p.tail + p.pending - loadCons(p.m)
	if used > p.entries {
		return 0
	}
	return int(p.entries - used)
}

// Next returns the next free entry, zeroed, or nil if the ring is full.
// It becomes visible to the consumer at Publish.
func (p *Producer) Next() []byte {
	if p.Room() == 0 {
		return nil
	}
	off := HeaderSize + int((p.tail+p.pending)&(p.entries-1))*p.esize
	e := p.m[off : off+p.esize : off+p.esize]
	clear(e)
	p.pending++
	return e
}

// Cancel takes back the last entry returned by Next (not yet published).
func (p *Producer) Cancel() {
	if p.pending > 0 {
		p.pending--
	}
}

// Publish makes every entry returned by Next visible, and reports whether
// the consumer was idle and must be woken (the caller writes the doorbell).
func (p *Producer) Publish() (ring bool) {
	if p.pending == 0 {
		return false
	}
	p.tail += p.pending
	p.pending = 0
	storeProd(p.m, p.tail)
	return atomic.LoadUint32(u32p(p.m, offArmed)) == 1 && atomic.CompareAndSwapUint32(u32p(p.m, offArmed), 1, 0)
}

// Carry continues a fresh ring after resize_srq, whose reply says the
// daemon carried used WQEs over and published producer index used: the
// next entry written is used's.
func (p *Producer) Carry(used uint32) error {
	if p.tail != 0 || p.pending != 0 || loadProd(p.m) != uint64(used) || uint64(used) > p.entries {
		return fmt.Errorf("ring: carry %d entries into a ring at %d (published %d)", used, p.tail, loadProd(p.m))
	}
	p.tail = uint64(used)
	return nil
}

// Tail is the number of entries published.
func (p *Producer) Tail() uint64 { return p.tail }

// ErrInline means inline data larger than the QP's max_inline_data.
var ErrInline = errors.New("ring: inline data exceeds max_inline_data")

// SQE is a send work request as the client writes it. Handles (AH, Mem)
// are the connection's; keys are the device's.
type SQE struct {
	WRID       uint64
	Flags      ibv.SendFlags
	Opcode     ibv.WROpcode
	SGL        []ibv.SGE
	Inline     []byte // written to the inline area when Flags has SendInline
	ImmData    uint32
	RKey       uint32
	RemoteAddr uint64
	CompareAdd uint64
	Swap       uint64
	AH         uint32
	RemoteQPN  uint32
	RemoteQKey uint32
	FlushType  uint8
	FlushLevel uint8

	// REG_MR.
	RegKey, RegAccess, RegPageSize, RegMem uint32
	RegIOVA, RegLength, RegMemOffset       uint64
	RegPages                               []PageRef // empty: contiguous from RegMem/RegMemOffset

	// BIND_MW.
	BindMWKey, BindAccess, BindMRKey uint32
	BindAddr, BindLength             uint64
}

// PageRef is one REG_MR page: a mapped memory object and an offset in it.
type PageRef struct {
	Mem    uint32
	Offset uint64
}

// PutSQE encodes e into an SQE slot sized for (maxSGE, maxInline).
func PutSQE(b []byte, e *SQE, maxSGE, maxInline uint32) error {
	if len(e.SGL) > int(maxSGE) || len(e.SGL) > 255 {
		return fmt.Errorf("ring: %d SGEs, max_send_sge is %d", len(e.SGL), maxSGE)
	}
	le.PutUint64(b[SQEWRID:], e.WRID)
	le.PutUint32(b[SQEFlags:], uint32(e.Flags))
	b[SQEOpcode] = uint8(e.Opcode)
	le.PutUint32(b[SQEImm:], e.ImmData)
	le.PutUint32(b[SQERKey:], e.RKey)
	le.PutUint64(b[SQERemoteAddr:], e.RemoteAddr)
	le.PutUint64(b[SQECompareAdd:], e.CompareAdd)
	le.PutUint64(b[SQESwap:], e.Swap)
	le.PutUint32(b[SQEAH:], e.AH)
	le.PutUint32(b[SQERemoteQPN:], e.RemoteQPN)
	le.PutUint32(b[SQERemoteQKey:], e.RemoteQKey)
	b[SQEFlushType] = e.FlushType
	b[SQEFlushLevel] = e.FlushLevel
	area := b[SQInlineOff(maxSGE):]
	if e.Flags&ibv.SendInline != 0 {
		if len(e.Inline) > int(maxInline) {
			return ErrInline
		}
		le.PutUint16(b[SQEInlineLen:], uint16(len(e.Inline)))
		copy(area, e.Inline)
	} else {
		b[SQENumSGE] = uint8(len(e.SGL))
		for i, s := range e.SGL {
			o := SQEDescSize + i*SGESize
			le.PutUint64(b[o:], s.Addr)
			le.PutUint32(b[o+8:], s.Length)
			le.PutUint32(b[o+12:], s.LKey)
		}
	}
	o := b[SQEOp:]
	switch e.Opcode {
	case ibv.WRRegMR:
		if len(e.RegPages)*PageEntry > int(maxInline) || len(e.RegPages) > 0xFFFF {
			return fmt.Errorf("ring: %d REG_MR pages do not fit in %d bytes of inline area", len(e.RegPages), maxInline)
		}
		le.PutUint32(o[0:], e.RegKey)
		le.PutUint32(o[4:], e.RegAccess)
		le.PutUint32(o[8:], e.RegPageSize)
		le.PutUint32(o[12:], e.RegMem)
		le.PutUint64(o[16:], e.RegIOVA)
		le.PutUint64(o[24:], e.RegLength)
		le.PutUint64(o[32:], e.RegMemOffset)
		le.PutUint16(b[SQENumPages:], uint16(len(e.RegPages)))
		for i, p := range e.RegPages {
			pe := area[i*PageEntry:]
			le.PutUint32(pe[0:], p.Mem)
			le.PutUint64(pe[8:], p.Offset)
		}
	case ibv.WRBindMW:
		le.PutUint32(o[0:], e.BindMWKey)
		le.PutUint32(o[4:], e.BindAccess)
		le.PutUint32(o[8:], e.BindMRKey)
		le.PutUint64(o[16:], e.BindAddr)
		le.PutUint64(o[24:], e.BindLength)
	}
	return nil
}

// PutRQE encodes a receive work request into an RQE slot.
func PutRQE(b []byte, id uint64, sgl []ibv.SGE, maxSGE uint32) error {
	if len(sgl) > int(maxSGE) {
		return fmt.Errorf("ring: %d SGEs, max_recv_sge is %d", len(sgl), maxSGE)
	}
	le.PutUint64(b[RQEWRID:], id)
	le.PutUint32(b[RQENumSGE:], uint32(len(sgl)))
	for i, s := range sgl {
		o := RQEDescSize + i*SGESize
		le.PutUint64(b[o:], s.Addr)
		le.PutUint32(b[o+8:], s.Length)
		le.PutUint32(b[o+12:], s.LKey)
	}
	return nil
}

// CQReader is the client end of a CQ ring. Not safe for concurrent use.
type CQReader struct {
	m       []byte
	entries uint64
	head    uint64
}

// NewCQReader makes the client end of a CQ ring in m and writes its header.
func NewCQReader(m []byte, entries uint32, pageSize int) (*CQReader, error) {
	if err := checkRing(m, entries, CQESize, pageSize); err != nil {
		return nil, err
	}
	InitHeader(m, KindCQ, entries, CQESize)
	return &CQReader{m: m, entries: uint64(entries)}, nil
}

// Poll takes up to len(out) completions, oldest first (ibv_poll_cq).
func (c *CQReader) Poll(out []ibv.WC) int {
	tail := loadProd(c.m)
	n := 0
	for c.head != tail && n < len(out) {
		off := HeaderSize + int(c.head&(c.entries-1))*CQESize
		GetCQE(c.m[off:off+CQESize], &out[n])
		c.head++
		n++
	}
	if n > 0 {
		storeCons(c.m, c.head)
	}
	return n
}

// Pending is how many completions are waiting.
func (c *CQReader) Pending() int { return int(loadProd(c.m) - c.head) }

// Arm asks for one completion event: for the next completion, or with
// solicitedOnly for the next solicited or unsuccessful one. A request for
// the next completion still pending is not narrowed by a later
// solicited-only one (IBA 11.4.2.2; libibverbs on rxe keeps the wider
// request too): solicitedOnly only arms a CQ that is not armed.
func (c *CQReader) Arm(solicitedOnly bool) { arm(c.m, solicitedOnly) }

// arm is Arm on a ring's notify word, from either end.
func arm(m []byte, solicitedOnly bool) {
	np := u32p(m, offNotify)
	if !solicitedOnly {
		atomic.StoreUint32(np, NotifyNext)
		return
	}
	atomic.CompareAndSwapUint32(np, NotifyNone, NotifySolicited)
}

// Entries is the ring size.
func (c *CQReader) Entries() uint32 { return uint32(c.entries) }
