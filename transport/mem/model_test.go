package mem

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// The model test runs random sequences of every operation against the Table
// and against a reference model written from the rules (not from the
// implementation), and compares: success or failure, the errno of verbs, the
// IBA class of lookup failures, the bytes a lookup reaches, Query state and
// generation, Ref.Changed, and finally every backing's reference count.

const (
	mMaxPD    = 3
	mMaxMR    = 10
	mMaxMW    = 6
	mMaxPages = 4
	mBackSize = 4096
)

type mObj struct {
	live     bool
	key      uint32
	gen      uint64
	pd       PD
	kind     ObjKind
	state    State
	access   Access
	iova     uint64 // MR: region start; MW: window start in the MR's IOVA space
	length   uint64
	b        *SliceBacking // user MR
	off      uint64
	maxPages int
	pages    []Page // fast MR
	ps       uint64
	numMW    int
	mr       uint32 // bound MW: the MR's index
	qpn      uint32
}

type model struct {
	pds      map[PD]bool
	pdObjs   map[PD]int
	objs     map[uint32]*mObj
	nMR, nMW int
}

func (m *model) live(key uint32) *mObj {
	o := m.objs[KeyIndex(key)]
	if o == nil || !o.live {
		return nil
	}
	return o
}

// byteAt is where an MR's IOVA x lives.
func (o *mObj) byteAt(x uint64) (*SliceBacking, uint64) {
	if o.kind == ObjUserMR {
		return o.b, o.off + (x - o.iova)
	}
	rel := o.iova%o.ps + (x - o.iova)
	pg := o.pages[rel/o.ps]
	return pg.Backing.(*SliceBacking), pg.Offset + rel%o.ps
}

func (m *model) errAccess(a Access) syscall.Errno {
	a &^= OptionalAccess
	known := LocalWrite | RemoteWrite | RemoteRead | RemoteAtomic | MWBind | ZeroBased | OnDemand | HugeTLB | FlushGlobal | FlushPersistent
	switch {
	case a&^known != 0:
		return syscall.EINVAL
	case a&(RemoteWrite|RemoteAtomic) != 0 && a&LocalWrite == 0:
		return syscall.EINVAL
	case a&OnDemand != 0:
		return syscall.EOPNOTSUPP
	}
	return 0
}

func cleanAccess(a Access) Access { return a &^ (OptionalAccess | HugeTLB) }

// translationOK: a non-empty IOVA range that fits below 2^64, zero-based
// ones starting at 0, no persistent flushing (no test memory is pmem).
func translationOK(length, iova uint64, a Access) bool {
	if length == 0 || iova > math.MaxUint64-(length-1) {
		return false
	}
	return (a&ZeroBased == 0 || iova == 0) && a&FlushPersistent == 0
}

type mtest struct {
	t    *testing.T
	r    *rand.Rand
	tab  *Table
	m    *model
	bk   []*SliceBacking
	log  []logEntry
	held []heldRef
	seed uint64
	// shadow memory for checking writes, indexed by backing*mBackSize+offset
	shadow   []byte
	shadowAt []uint32
	stamp    uint32
}

func (mt *mtest) bkIndex(b *SliceBacking) int {
	for i, x := range mt.bk {
		if x == b {
			return i
		}
	}
	panic("unknown backing")
}

// logEntry is formatted only when a failure prints it.
type logEntry struct {
	f string
	a []any
}

func (l logEntry) String() string { return fmt.Sprintf(l.f, l.a...) }

type heldRef struct {
	ref        Ref
	idx, mrIdx uint32
	gen, mrGen uint64
	hasMR      bool
	desc       string
}

func (mt *mtest) fail(format string, args ...any) {
	mt.t.Helper()
	n := len(mt.log)
	from := max(0, n-25)
	var lines []string
	for _, l := range mt.log[from:] {
		lines = append(lines, l.String())
	}
	mt.t.Fatalf("seed %d, step %d: %s\nlast operations:\n  %s", mt.seed, n, fmt.Sprintf(format, args...), strings.Join(lines, "\n  "))
}

func (mt *mtest) logf(format string, args ...any) { mt.log = append(mt.log, logEntry{format, args}) }

func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	if e, ok := err.(*Error); ok {
		return e.Errno()
	}
	return syscall.EIO
}

func (mt *mtest) checkVerb(what string, err error, want syscall.Errno) {
	mt.t.Helper()
	if got := errnoOf(err); got != want {
		mt.fail("%s: got %v (%v), model says errno %v", what, got, err, want)
	}
}

func (mt *mtest) checkWR(what string, err error, ok bool, class Class) {
	mt.t.Helper()
	if (err == nil) != ok {
		mt.fail("%s: got %v, model says ok=%v", what, err, ok)
	}
	if err != nil && ClassOf(err) != class {
		mt.fail("%s: class %v, want %v", what, ClassOf(err), class)
	}
}

// --- random choices ---

func (mt *mtest) pick(xs ...uint64) uint64 { return xs[mt.r.IntN(len(xs))] }

func (mt *mtest) pd() PD {
	if mt.r.IntN(8) == 0 {
		return PD(mt.r.IntN(6))
	}
	var live []PD
	for pd, ok := range mt.m.pds {
		if ok {
			live = append(live, pd)
		}
	}
	if len(live) == 0 {
		return 1
	}
	slices.Sort(live)
	return live[mt.r.IntN(len(live))]
}

func (mt *mtest) objKey(wantMW int) uint32 {
	var ks []uint32
	for idx, o := range mt.m.objs {
		if wantMW < 0 || (wantMW == 1) == IsMWKey(o.key) {
			ks = append(ks, idx)
		}
	}
	if len(ks) == 0 || mt.r.IntN(10) == 0 {
		switch mt.r.IntN(3) {
		case 0:
			return mt.r.Uint32()
		case 1:
			return MakeKey(uint32(1+mt.r.IntN(20)), uint8(mt.r.Uint32()))
		default:
			return MakeKey(MWIndexMin+uint32(mt.r.IntN(20)), uint8(mt.r.Uint32()))
		}
	}
	slices.Sort(ks)
	k := mt.m.objs[ks[mt.r.IntN(len(ks))]].key
	if mt.r.IntN(6) == 0 {
		k ^= 1 << mt.r.IntN(32)
	}
	return k
}

func (mt *mtest) access(mask Access) Access {
	var a Access
	for bit := 0; bit < 10; bit++ {
		if Access(1)<<bit&mask != 0 && mt.r.IntN(3) == 0 {
			a |= 1 << bit
		}
	}
	if mt.r.IntN(20) == 0 {
		a |= 1 << (10 + mt.r.IntN(20))
	}
	if mt.r.IntN(4) != 0 && a&(RemoteWrite|RemoteAtomic) != 0 {
		a |= LocalWrite // keep most registrations valid
	}
	return a &^ (OnDemand * Access(mt.r.IntN(2)))
}

func (mt *mtest) backing() *SliceBacking { return mt.bk[mt.r.IntN(len(mt.bk))] }

// some picks a live model object satisfying ok, nil if none.
func (mt *mtest) some(ok func(*mObj) bool) *mObj {
	var idx []uint32
	for i, o := range mt.m.objs {
		if o.live && ok(o) {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	slices.Sort(idx)
	return mt.m.objs[idx[mt.r.IntN(len(idx))]]
}

// valid is true for most operations: the generator then builds a request
// the model accepts, and sometimes breaks one thing in it.
func (mt *mtest) valid() bool  { return mt.r.IntN(10) < 7 }
func (mt *mtest) mutate() bool { return mt.r.IntN(4) == 0 }

func pow2s() []uint64 { return []uint64{8, 64, 256, 512} }

// goodAccess is a random valid MR access set.
func (mt *mtest) goodAccess() Access {
	a := mt.access(LocalWrite | RemoteRead | RemoteWrite | RemoteAtomic | MWBind | FlushGlobal)
	if mt.r.IntN(2) == 0 {
		a |= MWBind
	}
	if a&(RemoteWrite|RemoteAtomic) != 0 {
		a |= LocalWrite
	}
	return a &^ OnDemand &^ (1<<30 - 1<<10)
}

// --- operations ---

// checkAll compares every object's Query with the model, and the held Refs'
// Changed with the model's generations.
func (mt *mtest) checkAll() {
	for idx, o := range mt.m.objs {
		in, ok := mt.tab.Query(MakeKey(idx, 0))
		if ok != o.live {
			mt.fail("index %d: Query live=%v, model %v", idx, ok, o.live)
		}
		if !ok {
			continue
		}
		want := Info{Key: o.key, PD: o.pd, State: o.state, Kind: o.kind, Access: o.access, IOVA: o.iova,
			Length: o.length, Gen: o.gen}
		if o.kind == ObjFastMR {
			want.MaxPages = o.maxPages
			if o.state != StateValid {
				want.Access, want.IOVA, want.Length = 0, 0, 0
			}
		}
		if IsMRKey(o.key) {
			want.BoundMWs = o.numMW
		}
		if IsMWKey(o.key) && o.state == StateValid && o.length > 0 {
			want.MRKey = mt.m.objs[o.mr].key
			if o.kind == ObjMW2B {
				want.QPN = o.qpn
			}
		}
		if in != want {
			mt.fail("index %d: Query %+v, model %+v", idx, in, want)
		}
	}
	for _, h := range mt.held {
		changed := mt.m.objs[h.idx].gen != h.gen || h.hasMR && mt.m.objs[h.mrIdx].gen != h.mrGen
		if h.ref.Changed() != changed {
			mt.fail("Ref from %q: Changed=%v, model %v", h.desc, h.ref.Changed(), changed)
		}
	}
}

// checkRefs releases everything and compares backing reference counts with
// what the live registrations should hold.
func (mt *mtest) checkRefs() {
	for i := range mt.held {
		mt.held[i].ref.Release()
	}
	mt.held = nil
	want := map[*SliceBacking]int64{}
	for _, b := range mt.bk {
		want[b] = 1
	}
	for _, o := range mt.m.objs {
		switch {
		case !o.live:
		case o.kind == ObjUserMR:
			want[o.b]++
		case o.kind == ObjFastMR && o.state == StateValid:
			for i, p := range o.pages {
				if i == 0 || p.Backing != o.pages[i-1].Backing {
					want[p.Backing.(*SliceBacking)]++
				}
			}
		}
	}
	for i, b := range mt.bk {
		if b.Refs() != want[b] {
			mt.fail("backing %d holds %d references, model %d", i, b.Refs(), want[b])
		}
	}
}

func runModel(t *testing.T, seed uint64, steps int) {
	r := rand.New(rand.NewPCG(seed, 0x6d656d))
	mt := &mtest{t: t, r: r, seed: seed,
		tab: NewTable(Config{MaxPD: mMaxPD, MaxMR: mMaxMR, MaxMW: mMaxMW, MaxFastRegPages: mMaxPages,
			KeyByte: func() uint8 { return uint8(r.Uint32()) }}),
		m: &model{pds: map[PD]bool{}, pdObjs: map[PD]int{}, objs: map[uint32]*mObj{}}}
	for i := range 3 {
		mt.bk = append(mt.bk, NewSliceBacking(pattern(mBackSize, byte(i*85))))
	}
	mt.shadow, mt.shadowAt = make([]byte, 3*mBackSize), make([]uint32, 3*mBackSize)
	ops := []struct {
		w  int
		fn func()
	}{
		{3, mt.opAllocPD}, {1, mt.opDeallocPD}, {6, mt.opRegMR}, {2, mt.opDeregMR}, {2, mt.opReregMR},
		{4, mt.opAllocMR}, {8, mt.opFastReg}, {4, func() { mt.opInvalidate(false) }},
		{2, func() { mt.opInvalidate(true) }}, {3, mt.opAllocMW}, {1, mt.opDeallocMW},
		{6, func() { mt.opBind(true) }}, {4, func() { mt.opBind(false) }}, {1, mt.opDetachQP},
		{16, mt.opRemote}, {6, mt.opLocal},
	}
	total := 0
	for _, o := range ops {
		total += o.w
	}
	mt.opAllocPD()
	for range steps {
		x := r.IntN(total)
		for _, o := range ops {
			if x < o.w {
				o.fn()
				break
			}
			x -= o.w
		}
		mt.checkAll()
	}
	mt.checkRefs()
}

var modelSeqs = flag.Int("mem.model-seqs", 0, "sequences for TestModel_RandomSequencesMatchReferenceModel (0: 3000, 500 under -race, 300 with -short)")

func TestModel_RandomSequencesMatchReferenceModel(t *testing.T) {
	seqs := 3000
	switch {
	case *modelSeqs > 0:
		seqs = *modelSeqs
	case testing.Short():
		seqs = 300
	case raceEnabled:
		seqs = 500
	}
	for seed := range uint64(seqs) {
		runModel(t, seed, 80)
	}
}
