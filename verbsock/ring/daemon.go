package ring

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/vrnic/vrnicd/verbsock/ibv"
)

// Consumer is the daemon's end of a client-produced ring (an SQ, RQ or SRQ
// ring), the part that knows the ring's indices and doorbell, not its
// entries: package wq decodes those, into the engine's work requests.
type Consumer struct {
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

// Init attaches c to a mapped ring of entries entries of esize bytes.
func (c *Consumer) Init(m []byte, entries uint32, esize, pageSize int) error {
	if err := checkRing(m, entries, esize, pageSize); err != nil {
		return err
	}
	c.m, c.entries, c.esize = m, uint64(entries), esize
	// The consumer starts idle: the first entry published must ring.
	atomic.StoreUint32(u32p(m, offArmed), 1)
	return nil
}

// Next returns the entry at head, or false if there is none. An empty ring
// arms the doorbell (unless quiet): the consumer sets armed, then looks again, so that a
// producer that published in between either sees armed (and rings) or its
// entry is seen here (Dekker's pattern over two seq-cst atomics). A
// producer index behind head, or more than a ring ahead of the consumer
// index published (freed, not head: an honest producer only writes slots
// handed back), is corrupt: the ring stops for good and reports why. The
// bound on freed keeps what the daemon holds from a ring (an SRQ's WQEs not
// yet taken, an SQ's WQEs not yet completed) plus what waits in it within
// the ring's size, so the SRQ the ring feeds always has room.
func (c *Consumer) Next(quiet bool) ([]byte, error) {
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

// Moved reports whether the producer published since the last call (or
// since the ring was made): a post the consumer has not looked at. It
// arms nothing, and is false on a corrupt ring.
func (c *Consumer) Moved() bool {
	if c.corrupt.Load() {
		return false
	}
	p := loadProd(c.m)
	if p == c.seen {
		return false
	}
	c.seen = p
	return true
}

// Arm asks the producer to ring for its next post, as Next does on an
// empty ring, unless it published since the last Moved (false: look
// again instead of sleeping). Entries already seen may still wait in the
// ring (an engine that was full takes them when it has room, without a
// doorbell). A corrupt ring counts as armed: nothing will come of it.
func (c *Consumer) Arm() bool {
	if c.corrupt.Load() {
		return true
	}
	atomic.StoreUint32(u32p(c.m, offArmed), 1)
	if loadProd(c.m) != c.seen {
		atomic.StoreUint32(u32p(c.m, offArmed), 0)
		return false
	}
	return true
}

// Consume takes the entry at head. Its slot stays the consumer's until
// Retire hands it back.
func (c *Consumer) Consume() { c.head++ }

// Retire hands back to the producer the slots of every consumed entry but
// the last queued ones, which the engine still holds: the published
// consumer index is head − queued, and it never moves back. The QP owners
// call it as WQEs complete, so a full ring means max_wr WQEs not yet
// completed, as ibv_post_send and ibv_post_recv count them.
func (c *Consumer) Retire(queued int) {
	if queued < 0 || uint64(queued) > c.head {
		return
	}
	if v := c.head - uint64(queued); v > c.freed {
		c.freed = v
		storeCons(c.m, v)
	}
}

// Discard drops every entry published and hands every slot back: the
// consumer index jumps to the producer's (modify to RESET; see
// nic.QP.DiscardPosted). A producer index more than a ring away is left
// alone: such a ring is corrupt and stopped anyway.
func (c *Consumer) Discard() {
	if tail := loadProd(c.m); tail-c.head <= c.entries {
		c.head = tail
	}
	c.freed = c.head
	storeCons(c.m, c.head)
}

// Corrupt reports whether the ring was stopped because its producer index
// was impossible.
func (c *Consumer) Corrupt() bool { return c.corrupt.Load() }

// Head is the number of entries consumed.
func (c *Consumer) Head() uint64 { return c.head }

// Carry starts a fresh ring with used entries carried over from the ring
// it replaces (an SRQ's resize): it publishes producer index used and
// consumer index 0, the one time the daemon writes the producer's index,
// while the client waits for the reply and does not post.
func (c *Consumer) Carry(used uint32) error {
	if c.head != 0 || uint64(used) > c.entries {
		return fmt.Errorf("ring: carry %d WQEs into a ring of %d at index %d", used, c.entries, c.head)
	}
	storeCons(c.m, 0)
	storeProd(c.m, uint64(used))
	c.head, c.freed = uint64(used), 0
	return nil
}

// Pending is the number of entries published and not yet consumed (0 on a
// corrupt ring).
func (c *Consumer) Pending() int {
	d := loadProd(c.m) - c.head
	if c.corrupt.Load() || d > c.entries {
		return 0
	}
	return int(d)
}

// CQ is the daemon end of a CQ ring: a ibv.CompletionQueue. Any
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

// Push implements ibv.CompletionQueue. false: the CQ overflowed (or
// is in error, or destroyed).
func (c *CQ) Push(wc *ibv.WC) bool {
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
func solicited(wc *ibv.WC) bool {
	return wc.Status != ibv.WCSuccess || wc.Solicited
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
func PutCQE(b []byte, wc *ibv.WC) {
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
func GetCQE(b []byte, wc *ibv.WC) {
	*wc = ibv.WC{
		WRID: le.Uint64(b[cqeWRID:]), Status: ibv.WCStatus(b[cqeStatus]), Opcode: ibv.WCOpcode(b[cqeOpcode]),
		PKeyIndex: le.Uint16(b[cqePKeyIndex:]), Flags: ibv.WCFlags(le.Uint32(b[cqeFlags:])),
		ByteLen: le.Uint32(b[cqeByteLen:]), ImmData: le.Uint32(b[cqeImm:]), QPN: le.Uint32(b[cqeQPN:]),
		SrcQP: le.Uint32(b[cqeSrcQP:]), VendorErr: le.Uint32(b[cqeVendorErr:]),
	}
}
