package ring

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/mem"
)

// consumer is the daemon's end of a client-produced ring.
type consumer struct {
	m       []byte
	entries uint64
	esize   int
	head    uint64 // private: never read back from the mapping
	freed   uint64 // the consumer index published: slots below it are the producer's again
	seen    uint64 // the producer index at the last look (moved)
	corrupt atomic.Bool
}

func checkRing(m []byte, entries uint32, esize, pageSize int) error {
	if entries == 0 || entries&(entries-1) != 0 || entries > MaxEntries {
		return fmt.Errorf("ring: %d entries is not a power of two ≤ %d", entries, MaxEntries)
	}
	if need := Bytes(entries, esize, pageSize); len(m) < need {
		return fmt.Errorf("ring: mapping of %d bytes, ring needs %d", len(m), need)
	}
	return nil
}

func (c *consumer) init(m []byte, entries uint32, esize, pageSize int) error {
	if err := checkRing(m, entries, esize, pageSize); err != nil {
		return err
	}
	c.m, c.entries, c.esize = m, uint64(entries), esize
	// The consumer starts idle: the first entry published must ring.
	atomic.StoreUint32(u32p(m, offArmed), 1)
	return nil
}

// next returns the entry at head, or false if there is none. An empty ring
// arms the doorbell (unless quiet): the consumer sets armed, then looks again, so that a
// producer that published in between either sees armed (and rings) or its
// entry is seen here (Dekker's pattern over two seq-cst atomics). A
// producer index behind head, or more than a ring ahead of the consumer
// index published (freed, not head: an honest producer only writes slots
// handed back), is corrupt: the ring stops for good and reports why. The
// bound on freed keeps what the daemon holds from a ring (an SRQ's WQEs not
// yet taken, an SQ's WQEs not yet completed) plus what waits in it within
// the ring's size, so the SRQ the ring feeds always has room.
func (c *consumer) next(quiet bool) ([]byte, error) {
	if c.corrupt.Load() {
		return nil, nil
	}
	tail := loadProd(c.m)
	if tail == c.head {
		if quiet {
			return nil, nil
		}
		atomic.StoreUint32(u32p(c.m, offArmed), 1)
		if tail = loadProd(c.m); tail == c.head {
			return nil, nil
		}
		atomic.StoreUint32(u32p(c.m, offArmed), 0)
	}
	if d := tail - c.head; d > c.entries || tail-c.freed > c.entries {
		c.corrupt.Store(true)
		return nil, fmt.Errorf("producer index %d is %d entries from consumer index %d (%d handed back) in a ring of %d",
			tail, int64(d), c.head, c.freed, c.entries)
	}
	off := HeaderSize + int(c.head&(c.entries-1))*c.esize
	return c.m[off : off+c.esize : off+c.esize], nil
}

// moved reports whether the producer published since the last call (or
// since the ring was made): a post the consumer has not looked at. It
// arms nothing.
func (c *consumer) moved() bool {
	p := loadProd(c.m)
	if p == c.seen {
		return false
	}
	c.seen = p
	return true
}

// arm asks the producer to ring for its next post, as next does on an
// empty ring, unless it published since the last moved (false: look
// again instead of sleeping). Entries already seen may still wait in the
// ring (an engine that was full takes them when it has room, without a
// doorbell).
func (c *consumer) arm() bool {
	atomic.StoreUint32(u32p(c.m, offArmed), 1)
	if loadProd(c.m) != c.seen {
		atomic.StoreUint32(u32p(c.m, offArmed), 0)
		return false
	}
	return true
}

// consume takes the entry at head. Its slot stays the consumer's until
// Retire hands it back.
func (c *consumer) consume() { c.head++ }

// Retire hands back to the producer the slots of every consumed entry but
// the last queued ones, which the engine still holds: the published
// consumer index is head − queued, and it never moves back. The QP owners
// call it as WQEs complete, so a full ring means max_wr WQEs not yet
// completed, as ibv_post_send and ibv_post_recv count them.
func (c *consumer) Retire(queued int) {
	if queued < 0 || uint64(queued) > c.head {
		return
	}
	if v := c.head - uint64(queued); v > c.freed {
		c.freed = v
		storeCons(c.m, v)
	}
}

// discard drops every entry published and hands every slot back: the
// consumer index jumps to the producer's (modify to RESET; see
// nic.QP.DiscardPosted). A producer index more than a ring away is left
// alone: such a ring is corrupt and stopped anyway.
func (c *consumer) discard() {
	if tail := loadProd(c.m); tail-c.head <= c.entries {
		c.head = tail
	}
	c.freed = c.head
	storeCons(c.m, c.head)
}

// Corrupt reports whether the ring was stopped because its producer index
// was impossible.
func (c *consumer) Corrupt() bool { return c.corrupt.Load() }

// Head is the number of entries consumed.
func (c *consumer) Head() uint64 { return c.head }

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
	consumer
	cfg    SQConfig
	peeked atomic.Uint64 // head+1 while the entry at head is handed out and not consumed
	copyb  []byte        // the private copy of the entry at head
	have   bool          // wr holds the decoded entry at head
	wr     transport.SendWR
	sgl    []transport.SGE
	inline []byte
}

// NewSendQueue makes the daemon end of an SQ ring.
func NewSendQueue(cfg SQConfig) (*SendQueue, error) {
	es := SQEntrySize(cfg.MaxSGE, cfg.MaxInline)
	q := &SendQueue{cfg: cfg, copyb: make([]byte, es),
		sgl: make([]transport.SGE, cfg.MaxSGE), inline: make([]byte, cfg.MaxInline)}
	if err := q.init(cfg.Mem, cfg.Entries, es, cfg.PageSize); err != nil {
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
func (q *SendQueue) Moved() bool { return !q.corrupt.Load() && q.moved() }

// Arm implements nic.PolledSendSource: the client's next post rings the
// doorbell, unless it posted since the last Moved (false).
func (q *SendQueue) Arm() bool { return q.corrupt.Load() || q.arm() }

func (q *SendQueue) peek(wr *transport.SendWR, quiet bool) bool {
	if q.have {
		*wr = q.wr
		return true
	}
	e, err := q.next(quiet)
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
	q.peeked.Store(q.head + 1)
	*wr = q.wr
	return true
}

// Consume implements nic.SendSource.
func (q *SendQueue) Consume() {
	if !q.have {
		return
	}
	q.have = false
	q.peeked.Store(0)
	q.consume()
}

// Discard implements nic.Discarder, on the send owner.
func (q *SendQueue) Discard() {
	q.have = false
	q.peeked.Store(0)
	q.discard()
}

// Stalled reports whether the entry at the head of the ring was handed out
// and is still not consumed, as it was at the previous call (last keeps
// the caller's state between calls). A send owner whose engine refused a
// WR (queue full) and which nothing woke since is stalled; any goroutine
// may ask, periodically.
func (q *SendQueue) Stalled(last *uint64) bool {
	v := q.peeked.Load()
	stalled := v != 0 && v == *last
	*last = v
	return stalled
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
	consumer
	cfg   RQConfig
	copyb []byte
	have  bool
	wr    transport.RecvWR
	sgl   []transport.SGE
}

// NewRecvQueue makes the daemon end of an RQ or SRQ ring.
func NewRecvQueue(cfg RQConfig) (*RecvQueue, error) {
	es := RQEntrySize(cfg.MaxSGE)
	q := &RecvQueue{cfg: cfg, copyb: make([]byte, es), sgl: make([]transport.SGE, max(cfg.MaxSGE, 1))}
	if err := q.init(cfg.Mem, cfg.Entries, es, cfg.PageSize); err != nil {
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
	e, err := q.next(quiet)
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
	if q.head != 0 || q.have || uint64(used) > q.entries {
		return fmt.Errorf("ring: carry %d WQEs into a ring of %d at index %d", used, q.entries, q.head)
	}
	storeCons(q.m, 0)
	storeProd(q.m, uint64(used))
	q.head, q.freed = uint64(used), 0
	return nil
}

// Pending is the number of entries published and not yet consumed (0 on a
// corrupt ring).
func (q *RecvQueue) Pending() int {
	d := loadProd(q.m) - q.head
	if q.corrupt.Load() || d > q.entries {
		return 0
	}
	return int(d)
}

// Consume implements nic.RecvSource.
func (q *RecvQueue) Consume() {
	if !q.have {
		return
	}
	q.have = false
	q.consume()
}

// Discard implements nic.Discarder, on the receive owner (not for an
// SRQ's ring: RESET of a QP leaves its SRQ alone).
func (q *RecvQueue) Discard() {
	q.have = false
	q.discard()
}

// CQ is the daemon end of a CQ ring: a transport.CompletionQueue. Any
// number of QP owners push to it; it locks.
type CQ struct {
	mu       sync.Mutex
	m        []byte
	entries  uint64
	tail     uint64 // private
	closed   bool
	overflow bool
	signal   func() // completion event: wake the CQ's channel (nil: no events)
	onError  func(reason string)
	pushed   atomic.Uint64
}

// CQConfig describes a CQ ring.
type CQConfig struct {
	Mem      []byte
	Entries  uint32
	PageSize int
	// Signal delivers a completion event (the CQ was armed and a matching
	// completion arrived). Called without the CQ's lock.
	Signal func()
	// OnError is called once, without the lock, when the CQ overflows or
	// its consumer index is impossible: the CQ is in error from then on.
	OnError func(reason string)
}

// NewCQ makes the daemon end of a CQ ring.
func NewCQ(cfg CQConfig) (*CQ, error) {
	if err := checkRing(cfg.Mem, cfg.Entries, CQESize, cfg.PageSize); err != nil {
		return nil, err
	}
	return &CQ{m: cfg.Mem, entries: uint64(cfg.Entries), signal: cfg.Signal, onError: cfg.OnError}, nil
}

// Push implements transport.CompletionQueue. false: the CQ overflowed (or
// is in error, or destroyed).
func (c *CQ) Push(wc *transport.WC) bool {
	c.mu.Lock()
	if c.closed || c.overflow {
		c.mu.Unlock()
		return false
	}
	head := loadCons(c.m)
	if used := c.tail - head; used >= c.entries {
		c.overflow = true
		c.mu.Unlock()
		why := "completion queue overflow"
		if used > c.entries {
			why = fmt.Sprintf("consumer index %d impossible against producer index %d", head, c.tail)
		}
		if c.onError != nil {
			c.onError(why)
		}
		return false
	}
	off := HeaderSize + int(c.tail&(c.entries-1))*CQESize
	PutCQE(c.m[off:off+CQESize], wc)
	c.tail++
	storeProd(c.m, c.tail)
	fire := false
	if c.signal != nil {
		// Load after publishing: a consumer that arms after reading an
		// empty ring then polls again, so one of the two sees the other.
		np := u32p(c.m, offNotify)
		switch n := atomic.LoadUint32(np); n {
		case NotifyNext:
			fire = atomic.CompareAndSwapUint32(np, n, NotifyNone)
		case NotifySolicited:
			if solicited(wc) {
				fire = atomic.CompareAndSwapUint32(np, n, NotifyNone)
			}
		}
	}
	c.pushed.Add(1)
	c.mu.Unlock()
	if fire {
		c.signal()
	}
	return true
}

// solicited is the solicited-event rule of ibv_req_notify_cq(solicited_only):
// an unsuccessful completion, or a receive of a message with the
// solicited-event bit.
func solicited(wc *transport.WC) bool {
	return wc.Status != transport.WCSuccess || wc.Solicited
}

// Arm sets the notify word from the daemon side (the socket's
// req_notify_cq; the SDK normally writes the word itself).
// A pending next-completion request is not narrowed (see CQReader.Arm).
func (c *CQ) Arm(solicitedOnly bool) {
	c.mu.Lock()
	if !c.closed {
		arm(c.m, solicitedOnly)
	}
	c.mu.Unlock()
}

// Resize moves the CQ to a new ring: the completions the client has not
// polled are copied to the start of the new ring, in order. It fails
// (changing nothing) if they do not fit or the old ring's consumer index is
// impossible. The caller releases the old mapping once Resize returns.
func (c *CQ) Resize(m []byte, entries uint32, pageSize int) error {
	if err := checkRing(m, entries, CQESize, pageSize); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("ring: CQ destroyed")
	}
	head := loadCons(c.m)
	used := c.tail - head
	if used > c.entries {
		return fmt.Errorf("ring: consumer index %d impossible against producer index %d", head, c.tail)
	}
	if used > uint64(entries) {
		return fmt.Errorf("ring: %d completions waiting do not fit in %d entries", used, uint64(entries))
	}
	for i := range used {
		so := HeaderSize + int((head+i)&(c.entries-1))*CQESize
		do := HeaderSize + int(i)*CQESize
		copy(m[do:do+CQESize], c.m[so:so+CQESize])
	}
	atomic.StoreUint32(u32p(m, offNotify), atomic.LoadUint32(u32p(c.m, offNotify)))
	storeCons(m, 0)
	storeProd(m, used)
	c.m, c.entries, c.tail = m, uint64(entries), used
	c.overflow = false
	return nil
}

// Close stops the CQ: every later Push fails. After Close returns no Push
// touches the mapping, so it may be unmapped.
func (c *CQ) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
}

// Entries is the ring size.
func (c *CQ) Entries() uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return uint32(c.entries)
}

// Pushed counts completions written.
func (c *CQ) Pushed() uint64 { return c.pushed.Load() }

// PutCQE encodes a work completion.
func PutCQE(b []byte, wc *transport.WC) {
	le.PutUint64(b[cqeWRID:], wc.WRID)
	b[cqeStatus] = uint8(wc.Status)
	b[cqeOpcode] = uint8(wc.Opcode)
	le.PutUint16(b[cqePKeyIndex:], wc.PKeyIndex)
	le.PutUint32(b[cqeFlags:], uint32(wc.Flags))
	le.PutUint32(b[cqeByteLen:], wc.ByteLen)
	le.PutUint32(b[cqeImm:], wc.ImmData)
	le.PutUint32(b[cqeQPN:], wc.QPN)
	le.PutUint32(b[cqeSrcQP:], wc.SrcQP)
	le.PutUint32(b[cqeVendorErr:], wc.VendorErr)
}

// GetCQE decodes a work completion.
func GetCQE(b []byte, wc *transport.WC) {
	*wc = transport.WC{
		WRID: le.Uint64(b[cqeWRID:]), Status: transport.WCStatus(b[cqeStatus]), Opcode: transport.WCOpcode(b[cqeOpcode]),
		PKeyIndex: le.Uint16(b[cqePKeyIndex:]), Flags: transport.WCFlags(le.Uint32(b[cqeFlags:])),
		ByteLen: le.Uint32(b[cqeByteLen:]), ImmData: le.Uint32(b[cqeImm:]), QPN: le.Uint32(b[cqeQPN:]),
		SrcQP: le.Uint32(b[cqeSrcQP:]), VendorErr: le.Uint32(b[cqeVendorErr:]),
	}
}
