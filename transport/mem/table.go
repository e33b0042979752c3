package mem

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/vrnic/vrnicd/verbsock/ibv"
)

// PD is a protection domain handle. Handles are never reused while the
// table lives (they count up), so a stale handle cannot name a new PD.
type PD uint32

// State is an MR's or MW's state (IBA 10.6.7 / rxe's rxe_mr_state).
type State uint8

const (
	StateInvalid State = iota // deregistered / deallocated: no object
	StateFree                 // fast-reg MR not registered; type 2B MW not bound
	StateValid                // usable (a type 1 MW is VALID from allocation, even unbound)
)

func (s State) String() string {
	switch s {
	case StateInvalid:
		return "INVALID"
	case StateFree:
		return "FREE"
	case StateValid:
		return "VALID"
	}
	return "state?"
}

// ObjKind is what kind of object a key names.
type ObjKind uint8

const (
	ObjNone   ObjKind = iota
	ObjUserMR         // ibv_reg_mr: fixed translation
	ObjFastMR         // ib_alloc_mr(IB_MR_TYPE_MEM_REG): registered by REG_MR work requests
	ObjMW1            // memory window type 1
	ObjMW2B           // memory window type 2B
)

func (k ObjKind) String() string {
	switch k {
	case ObjUserMR:
		return "user MR"
	case ObjFastMR:
		return "fast-reg MR"
	case ObjMW1:
		return "MW type 1"
	case ObjMW2B:
		return "MW type 2B"
	}
	return "none"
}

// MWType is a memory window type, with ibverbs' values: defined in
// verbsock/ibv, aliased here.
type MWType = ibv.MWType

const (
	MWType1  = ibv.MWType1  // IBV_MW_TYPE_1
	MWType2B = ibv.MWType2B // IBV_MW_TYPE_2 (rxe implements 2B)
)

// Config sizes a Table. Zero fields take the defaults.
type Config struct {
	MaxPD           int // default 1 << 16
	MaxMR           int // live MRs, default 1 << 19 (the whole MR index range)
	MaxMW           int // live MWs, default 1 << 19
	MaxFastRegPages int // largest AllocMR page list, default 4096
	// KeyByte chooses the random key byte of a new MR or MW; nil uses
	// math/rand/v2. Tests set it for reproducible runs.
	KeyByte func() uint8
}

const (
	chunkShift = 10
	chunkSize  = 1 << chunkShift
	chunkMask  = chunkSize - 1

	minPageSize = 8       // an aligned 8-byte atomic target never straddles a page
	maxPageSize = 1 << 30 // bounds the page arithmetic
)

// Table holds one device's PDs, MRs and MWs.
//
// Writers (verbs and the work-request operations) serialise on t.mu and on
// the per-MR entry mutex; lookups take no lock at all. Each index has a
// permanent entry whose registration is an immutable snapshot published with
// an atomic pointer; a lookup loads the snapshot, checks it, and pins it with
// a reference count that keeps its memory mapped until Ref.Release.
type Table struct {
	cfg Config

	// mu guards the PD map, index allocation, the QP→MW map, and orders the
	// verbs and MW operations. Lock order: mu, then an MR entry's mu.
	mu     sync.Mutex
	pds    map[PD]*pdInfo
	nextPD PD
	mrs    directory
	mws    directory
	mrIdx  indexAlloc
	mwIdx  indexAlloc
	qpMWs  map[uint32]map[uint32]struct{} // QPN → type 2B MW indices bound to it
}

type pdInfo struct {
	mrs, mws, holds int
}

// entry is the permanent slot of one index. Its snapshot changes on every
// state change; the entry itself never moves or goes away, so a lookup racing
// with a dereg finds a non-VALID snapshot, never freed memory.
type entry struct {
	snap  atomic.Pointer[snap]
	mu    sync.Mutex // MR entries: FastReg/invalidate against everything else touching this MR
	numMW int32      // MR entries: windows bound to it (guarded by mu)
}

type chunk [chunkSize]entry

// directory maps an index range onto lazily allocated chunks of entries. The
// chunk slice is fixed at construction, so readers need only atomic loads.
type directory struct {
	base   uint32
	n      uint32
	chunks []atomic.Pointer[chunk]
}

func newDirectory(lo, hi uint32) directory {
	n := hi - lo + 1
	return directory{base: lo, n: n, chunks: make([]atomic.Pointer[chunk], (n+chunkMask)>>chunkShift)}
}

// get is the lock-free lookup of an index's entry, nil if out of range or
// never used.
func (d *directory) get(idx uint32) *entry {
	i := idx - d.base // wraps for idx < base, rejected below
	if i >= d.n {
		return nil
	}
	c := d.chunks[i>>chunkShift].Load()
	if c == nil {
		return nil
	}
	return &c[i&chunkMask]
}

// make returns the entry, allocating its chunk. Caller holds Table.mu.
func (d *directory) make(idx uint32) *entry {
	i := idx - d.base
	c := d.chunks[i>>chunkShift].Load()
	if c == nil {
		c = new(chunk)
		d.chunks[i>>chunkShift].Store(c)
	}
	return &c[i&chunkMask]
}

// indexAlloc hands out indices in [lo, hi] cyclically, as rxe's
// xa_alloc_cyclic does, so that a freed index (and with it an old key) comes
// back as late as possible.
type indexAlloc struct {
	lo, hi uint32
	next   uint32
	used   []uint64
	n, max int
}

func newIndexAlloc(lo, hi uint32, max int) indexAlloc {
	return indexAlloc{lo: lo, hi: hi, next: lo, max: max}
}

// alloc finds the next free index from a.next. The bitmap grows only as far
// as indices have been handed out; words past its end are all free.
func (a *indexAlloc) alloc() (uint32, bool) {
	if a.n >= a.max {
		return 0, false
	}
	span := a.hi - a.lo + 1
	i := a.next - a.lo
	for range span {
		w, bit := int(i/64), uint64(1)<<(i%64)
		if w >= len(a.used) {
			a.used = append(a.used, make([]uint64, w+1-len(a.used))...)
		}
		if a.used[w]&bit == 0 {
			a.used[w] |= bit
			a.n++
			a.next = a.lo + (i+1)%span
			return a.lo + i, true
		}
		i = (i + 1) % span
	}
	return 0, false
}

func (a *indexAlloc) free(idx uint32) {
	i := idx - a.lo
	a.used[i/64] &^= uint64(1) << (i % 64)
	a.n--
}

// snap is one immutable registration state of an MR or MW. It is published
// with refs == 1 (the table's reference); each Ref adds one. When it is
// replaced the table drops its reference, and the last release frees what it
// holds: its region (MR) or its bound MR's snapshot (MW).
type snap struct {
	refs   refCount
	ent    *entry
	gen    uint64
	key    uint32
	pd     PD
	state  State
	kind   ObjKind
	access Access
	// MR: the region's IOVA and length. MW: the window's start (in the MR's
	// IOVA space) and length; length 0 is an unbound type 1 window.
	iova, length uint64
	maxPages     uint32 // fast-reg MR
	qpn          uint32 // type 2B MW: the bound QP
	reg          *region
	parent       *snap // bound MW: its MR's snapshot (a reference is held)
}

func (s *snap) isMR() bool { return s.kind == ObjUserMR || s.kind == ObjFastMR }

// tryAcquire pins s unless it has already been retired and drained.
func (s *snap) tryAcquire() bool { return s.refs.tryAcquire() }

func (s *snap) release() {
	if !s.refs.drop("mem: snapshot released more often than acquired") {
		return
	}
	if s.reg != nil {
		s.reg.release()
	}
	if s.parent != nil {
		s.parent.release()
	}
}

// publish installs next as e's state (caller holds whatever lock orders
// writers of e) and retires the previous snapshot.
func publish(e *entry, next *snap) {
	next.ent = e
	next.refs.Store(1)
	prev := e.snap.Swap(next)
	if prev != nil {
		prev.release()
	}
}

// nextGen is the generation for e's next snapshot.
func nextGen(e *entry) uint64 {
	if p := e.snap.Load(); p != nil {
		return p.gen + 1
	}
	return 1
}

// NewTable makes an empty table.
func NewTable(cfg Config) *Table {
	if cfg.MaxPD <= 0 {
		cfg.MaxPD = 1 << 16
	}
	if cfg.MaxMR <= 0 || cfg.MaxMR > int(MRIndexMax-MRIndexMin+1) {
		cfg.MaxMR = int(MRIndexMax - MRIndexMin + 1)
	}
	if cfg.MaxMW <= 0 || cfg.MaxMW > int(MWIndexMax-MWIndexMin+1) {
		cfg.MaxMW = int(MWIndexMax - MWIndexMin + 1)
	}
	if cfg.MaxFastRegPages <= 0 {
		cfg.MaxFastRegPages = 4096
	}
	if cfg.KeyByte == nil {
		cfg.KeyByte = func() uint8 { return uint8(rand.Uint32()) }
	}
	return &Table{
		cfg:   cfg,
		pds:   make(map[PD]*pdInfo),
		mrs:   newDirectory(MRIndexMin, MRIndexMax),
		mws:   newDirectory(MWIndexMin, MWIndexMax),
		mrIdx: newIndexAlloc(MRIndexMin, MRIndexMax, cfg.MaxMR),
		mwIdx: newIndexAlloc(MWIndexMin, MWIndexMax, cfg.MaxMW),
		qpMWs: make(map[uint32]map[uint32]struct{}),
	}
}

// newKey picks the key of a new object at e: a random byte, different from
// the one the index had last, so the previous owner's key stops working.
func (t *Table) newKey(idx uint32, e *entry) uint32 {
	b := t.cfg.KeyByte()
	if p := e.snap.Load(); p != nil {
		for i := 0; b == KeyByte(p.key) && i < 16; i++ {
			b = t.cfg.KeyByte()
		}
		if b == KeyByte(p.key) {
			b++
		}
	}
	return MakeKey(idx, b)
}

// create gives s, a new MR or MW of PD p, the next free index of its key
// range and a fresh key, and publishes it. It reports false, publishing
// nothing, when the range is full. Caller holds t.mu.
func (t *Table) create(p *pdInfo, s *snap) (uint32, bool) {
	dir, ix, count := &t.mrs, &t.mrIdx, &p.mrs
	if !s.isMR() {
		dir, ix, count = &t.mws, &t.mwIdx, &p.mws
	}
	idx, ok := ix.alloc()
	if !ok {
		return 0, false
	}
	e := dir.make(idx)
	e.mu.Lock()
	key := t.newKey(idx, e)
	s.gen, s.key = nextGen(e), key
	publish(e, s)
	e.mu.Unlock()
	*count++
	return key, true
}

// AllocPD makes a protection domain.
func (t *Table) AllocPD() (PD, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.pds) >= t.cfg.MaxPD {
		return 0, mkerr(OpVerb, KindNoSpace)
	}
	for {
		t.nextPD++
		if t.nextPD == 0 {
			continue
		}
		if _, busy := t.pds[t.nextPD]; !busy {
			break
		}
	}
	t.pds[t.nextPD] = &pdInfo{}
	return t.nextPD, nil
}

// DeallocPD frees pd. It fails with EBUSY while MRs, MWs or holds remain.
func (t *Table) DeallocPD(pd PD) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pds[pd]
	if p == nil {
		return mkerr(OpVerb, KindNoObject)
	}
	if p.mrs+p.mws+p.holds > 0 {
		return mkerr(OpVerb, KindBusy)
	}
	delete(t.pds, pd)
	return nil
}

// HoldPD records that another object (a QP, SRQ, AH) uses pd, so that
// DeallocPD fails with EBUSY until ReleasePD.
func (t *Table) HoldPD(pd PD) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pds[pd]
	if p == nil {
		return mkerr(OpVerb, KindNoObject)
	}
	p.holds++
	return nil
}

// ReleasePD drops a HoldPD.
func (t *Table) ReleasePD(pd PD) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pds[pd]
	if p == nil || p.holds == 0 {
		return mkerr(OpVerb, KindNoObject)
	}
	p.holds--
	return nil
}

// Info describes an MR or MW, for queries, logs and tests.
type Info struct {
	Key      uint32
	PD       PD
	State    State
	Kind     ObjKind
	Access   Access
	IOVA     uint64 // MR: region start; MW: window start in the MR's IOVA space
	Length   uint64
	Gen      uint64
	MaxPages int    // fast-reg MR
	BoundMWs int    // MR
	QPN      uint32 // type 2B MW
	MRKey    uint32 // bound MW: its MR's key
}

// Query reports the object named by key's index (the key byte is not
// checked). ok is false if there is no live object.
func (t *Table) Query(key uint32) (Info, bool) {
	var e *entry
	switch {
	case IsMRKey(key):
		e = t.mrs.get(KeyIndex(key))
	case IsMWKey(key):
		e = t.mws.get(KeyIndex(key))
	}
	if e == nil {
		return Info{}, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.snap.Load()
	if s == nil || s.state == StateInvalid {
		return Info{}, false
	}
	in := Info{Key: s.key, PD: s.pd, State: s.state, Kind: s.kind, Access: s.access,
		IOVA: s.iova, Length: s.length, Gen: s.gen, MaxPages: int(s.maxPages), QPN: s.qpn}
	if s.isMR() {
		in.BoundMWs = int(e.numMW)
	}
	if s.parent != nil {
		in.MRKey = s.parent.key
	}
	return in, true
}
