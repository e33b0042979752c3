package mem

import (
	"bytes"
	"encoding/binary"
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

func (mt *mtest) opAllocPD() {
	pd, err := mt.tab.AllocPD()
	want := syscall.Errno(0)
	n := 0
	for _, ok := range mt.m.pds {
		if ok {
			n++
		}
	}
	if n >= mMaxPD {
		want = syscall.ENOMEM
	}
	mt.logf("AllocPD -> %d %v", pd, err)
	mt.checkVerb("AllocPD", err, want)
	if err == nil {
		if _, seen := mt.m.pds[pd]; seen || pd == 0 {
			mt.fail("PD %d handed out twice", pd)
		}
		mt.m.pds[pd] = true
	}
}

func (mt *mtest) opDeallocPD() {
	pd := mt.pd()
	err := mt.tab.DeallocPD(pd)
	mt.logf("DeallocPD(%d) -> %v", pd, err)
	want := syscall.Errno(0)
	switch {
	case !mt.m.pds[pd]:
		want = syscall.EINVAL
	case mt.m.pdObjs[pd] > 0:
		want = syscall.EBUSY
	}
	mt.checkVerb("DeallocPD", err, want)
	if err == nil {
		mt.m.pds[pd] = false
	}
}

func (mt *mtest) newObj(key uint32, o *mObj) {
	idx := KeyIndex(key)
	if prev := mt.m.objs[idx]; prev != nil {
		if prev.live {
			mt.fail("index %d handed out while live", idx)
		}
		if KeyByte(prev.key) == KeyByte(key) {
			mt.fail("reused index %d got its previous key byte", idx)
		}
		o.gen = prev.gen + 1
	} else {
		o.gen = 1
	}
	o.live, o.key = true, key
	mt.m.objs[idx] = o
	mt.m.pdObjs[o.pd]++
}

func (mt *mtest) opRegMR() {
	pd, b := mt.pd(), mt.backing()
	off := mt.pick(0, 1, 8, 100, 4000, 4096, 5000)
	length := mt.pick(0, 1, 8, 64, 96, 512, 4096, math.MaxUint64)
	iova := mt.pick(0, 0x1000, 0x1003, math.MaxUint64-63, math.MaxUint64-10)
	a := mt.access(mrAccessMask)
	if mt.valid() {
		length = 8 + mt.r.Uint64N(mBackSize-8)
		off = mt.r.Uint64N(mBackSize - length + 1)
		a = mt.goodAccess()
		if a&ZeroBased != 0 {
			iova = 0
		} else {
			iova = mt.pick(0x1000, 0x1003, 0x10000, math.MaxUint64-length+1)
		}
	}
	key, err := mt.tab.RegMR(pd, b, off, length, iova, a)
	mt.logf("RegMR(pd %d, off %d, len %d, iova %#x, %v) -> %#x %v", pd, off, length, iova, a, key, err)
	want := mt.m.errAccess(a)
	if want == 0 {
		switch {
		case !translationOK(length, iova, a):
			want = syscall.EINVAL
		case !mt.m.pds[pd]:
			want = syscall.EINVAL
		case off > mBackSize || length > mBackSize-off:
			want = syscall.EINVAL
		case mt.m.nMR >= mMaxMR:
			want = syscall.ENOMEM
		}
	}
	mt.checkVerb("RegMR", err, want)
	if err == nil {
		if !IsMRKey(key) {
			mt.fail("MR key %#x outside the MR range", key)
		}
		mt.newObj(key, &mObj{pd: pd, kind: ObjUserMR, state: StateValid, access: cleanAccess(a),
			iova: iova, length: length, b: b, off: off})
		mt.m.nMR++
	}
}

func (mt *mtest) opDeregMR() {
	pd, key := mt.pd(), mt.objKey(0)
	err := mt.tab.DeregMR(pd, key)
	mt.logf("DeregMR(pd %d, %#x) -> %v", pd, key, err)
	o := mt.m.live(key)
	want := syscall.Errno(0)
	switch {
	case o == nil || !IsMRKey(key):
		want = syscall.EINVAL
	case o.pd != pd:
		want = syscall.EINVAL
	case o.numMW > 0:
		want = syscall.EBUSY
	}
	mt.checkVerb("DeregMR", err, want)
	if err == nil {
		o.live = false
		o.gen++
		mt.m.pdObjs[pd]--
		mt.m.nMR--
	}
}

func (mt *mtest) opReregMR() {
	pd, key := mt.pd(), mt.objKey(0)
	flags := ReregFlags(mt.r.IntN(9))
	nw := Rereg{PD: mt.pd(), Backing: mt.backing(), Offset: mt.pick(0, 8, 4000), Length: mt.pick(0, 8, 96, 4096),
		IOVA: mt.pick(0, 0x1000, math.MaxUint64-7), Access: mt.access(mrAccessMask)}
	if o := mt.some(func(o *mObj) bool { return o.kind == ObjUserMR }); o != nil && mt.valid() {
		pd, key, flags = o.pd, o.key, ReregFlags(1+mt.r.IntN(7))
		mt.validRereg(o, flags, &nw)
	}
	err := mt.tab.ReregMR(pd, key, flags, nw)
	mt.logf("ReregMR(pd %d, %#x, flags %d, %+v) -> %v", pd, key, flags, nw, err)
	o := mt.m.live(key)
	want, na := mt.reregVerdict(o, pd, key, flags, nw)
	mt.checkVerb("ReregMR", err, want)
	if err == nil {
		o.gen++
		o.access = na
		if flags&ReregPD != 0 {
			mt.m.pdObjs[o.pd]--
			o.pd = nw.PD
			mt.m.pdObjs[o.pd]++
		}
		if flags&ReregTranslation != 0 {
			o.b, o.off, o.iova, o.length = nw.Backing.(*SliceBacking), nw.Offset, nw.IOVA, nw.Length
		}
	}
}

// validRereg makes nw a re-registration of user MR o that should succeed
// with flags.
func (mt *mtest) validRereg(o *mObj, flags ReregFlags, nw *Rereg) {
	nw.Access = mt.goodAccess()
	nw.Length = 1 + mt.r.Uint64N(mBackSize)
	nw.Offset = mt.r.Uint64N(mBackSize - nw.Length + 1)
	if nw.Access&ZeroBased != 0 {
		nw.IOVA = 0
	}
	if flags&ReregTranslation == 0 && o.iova != 0 {
		nw.Access &^= ZeroBased
	}
	if flags&ReregTranslation != 0 && flags&ReregAccess == 0 && o.access&ZeroBased != 0 {
		nw.IOVA = 0
	}
}

// reregVerdict is the model's errno for a ReregMR of o (live under key, or
// nil) and the MR's access after it.
func (mt *mtest) reregVerdict(o *mObj, pd PD, key uint32, flags ReregFlags, nw Rereg) (syscall.Errno, Access) {
	want := syscall.Errno(0)
	na := Access(0)
	niova, nlen := uint64(0), uint64(0)
	if o != nil {
		na, niova, nlen = o.access, o.iova, o.length
	}
	if flags&ReregTranslation != 0 {
		niova, nlen = nw.IOVA, nw.Length
	}
	switch {
	case flags == 0 || flags > 7:
		want = syscall.EINVAL
	case o == nil || !IsMRKey(key) || o.pd != pd || o.kind != ObjUserMR:
		want = syscall.EINVAL
	case o.numMW > 0:
		want = syscall.EBUSY
	case flags&ReregAccess != 0 && mt.m.errAccess(nw.Access) != 0:
		want = mt.m.errAccess(nw.Access)
	case flags&ReregPD != 0 && !mt.m.pds[nw.PD]:
		want = syscall.EINVAL
	default:
		if flags&ReregAccess != 0 {
			na = cleanAccess(nw.Access)
		}
		if !translationOK(nlen, niova, na) ||
			flags&ReregTranslation != 0 && (nw.Offset > mBackSize || nw.Length > mBackSize-nw.Offset) {
			want = syscall.EINVAL
		}
	}
	return want, na
}

func (mt *mtest) opAllocMR() {
	pd, n := mt.pd(), mt.r.IntN(mMaxPages+2)
	key, err := mt.tab.AllocMR(pd, n)
	mt.logf("AllocMR(pd %d, %d) -> %#x %v", pd, n, key, err)
	want := syscall.Errno(0)
	switch {
	case n < 1 || n > mMaxPages || !mt.m.pds[pd]:
		want = syscall.EINVAL
	case mt.m.nMR >= mMaxMR:
		want = syscall.ENOMEM
	}
	mt.checkVerb("AllocMR", err, want)
	if err == nil {
		mt.newObj(key, &mObj{pd: pd, kind: ObjFastMR, state: StateFree, maxPages: n})
		mt.m.nMR++
	}
}

// fastRegOp is one REG_MR WR's arguments; span is the bytes its pages
// cover from iova.
type fastRegOp struct {
	pd                 PD
	key                uint32
	ps                 uint64
	pages              []Page
	iova, length, span uint64
	a                  Access
}

func (mt *mtest) opFastReg() {
	f := mt.fastRegArgs()
	err := mt.tab.FastReg(f.pd, f.key, f.pages, uint32(f.ps), f.iova, f.length, f.a)
	mt.logf("FastReg(pd %d, %#x, %d pages %v, ps %d, iova %#x, len %d, %v) -> %v", f.pd, f.key, len(f.pages), f.pages, f.ps, f.iova, f.length, f.a, err)
	ok, o := mt.fastRegVerdict(f)
	mt.checkWR("FastReg", err, ok, ClassLocalQPOperation)
	if err == nil {
		o.gen++
		o.key, o.state, o.access, o.iova, o.length, o.ps = f.key, StateValid, cleanAccess(f.a), f.iova, f.length, f.ps
		o.pages = slices.Clone(f.pages)
	}
}

// fastRegArgs draws a REG_MR's arguments: random ones, or (when a FREE
// fast-reg MR exists) a valid registration of it, perhaps mutated.
func (mt *mtest) fastRegArgs() fastRegOp {
	f := fastRegOp{pd: mt.pd(), key: mt.objKey(0)}
	if mt.r.IntN(2) == 0 {
		f.key = NextKey(f.key)
	}
	f.ps = mt.pick(8, 64, 256, 512, 1000)
	f.pages = make([]Page, mt.r.IntN(mMaxPages+2))
	for i := range f.pages {
		f.pages[i] = Page{mt.backing(), mt.pick(0, f.ps, 2*f.ps, mBackSize-f.ps, mBackSize-f.ps+1, 3*f.ps)}
		if mt.r.IntN(30) == 0 {
			f.pages[i].Backing = nil
		}
	}
	f.iova = mt.pick(0, 0x2000, 0x2000+13, 0x2000+f.ps-8, math.MaxUint64-f.ps+1)
	f.span = uint64(len(f.pages))*f.ps - f.iova%f.ps
	f.length = mt.pick(0, 1, 8, f.ps, f.span, f.span+1)
	f.a = mt.access(mrAccessMask)
	if o := mt.some(func(o *mObj) bool { return o.kind == ObjFastMR && o.state == StateFree }); o != nil && mt.valid() {
		mt.validFastReg(&f, o)
	}
	return f
}

// validFastReg makes f a registration of FREE fast-reg MR o that should
// succeed, then perhaps mutates one argument.
func (mt *mtest) validFastReg(f *fastRegOp, o *mObj) {
	f.pd, f.key = o.pd, WithKeyByte(o.key, uint8(mt.r.Uint32()))
	ps := pow2s()[mt.r.IntN(4)]
	f.pages = make([]Page, 1+mt.r.IntN(o.maxPages))
	for i := range f.pages {
		f.pages[i] = Page{mt.backing(), uint64(mt.r.IntN(int(mBackSize/ps))) * ps}
		if i > 0 && mt.r.IntN(2) == 0 {
			f.pages[i].Backing = f.pages[i-1].Backing
		}
	}
	f.iova = mt.pick(0, 0x2000, 0x2000+ps/2, 0x2000+ps-8, math.MaxUint64-uint64(len(f.pages))*ps+1)
	f.span = uint64(len(f.pages))*ps - f.iova%ps
	f.length = 1 + mt.r.Uint64N(f.span)
	f.a = mt.goodAccess()
	if mt.mutate() {
		switch mt.r.IntN(6) {
		case 0:
			f.pd++
		case 1:
			f.key ^= 1 << (8 + mt.r.IntN(24))
		case 2:
			f.length = f.span + 1
		case 3:
			f.pages[mt.r.IntN(len(f.pages))].Offset += 1 + mt.r.Uint64N(ps)*uint64(mt.r.IntN(2))
		case 4:
			f.a = RemoteWrite
		case 5:
			ps++
		}
	}
	f.ps = ps
}

// fastRegVerdict is the model's verdict on f and the MR it names.
func (mt *mtest) fastRegVerdict(f fastRegOp) (bool, *mObj) {
	ps := f.ps
	ok := mt.m.errAccess(f.a) == 0 && ps&(ps-1) == 0 && len(f.pages) >= 1 && len(f.pages) <= mMaxPages &&
		translationOK(f.length, f.iova, f.a) && f.length <= f.span
	for _, p := range f.pages {
		ok = ok && p.Backing != nil && p.Offset+ps <= mBackSize
	}
	o := mt.m.live(f.key)
	ok = ok && IsMRKey(f.key) && o != nil && o.kind == ObjFastMR && o.pd == f.pd && o.state == StateFree && len(f.pages) <= o.maxPages
	return ok, o
}

func (mt *mtest) opInvalidate(remote bool) {
	pd, qpn := mt.pd(), uint32(1+mt.r.IntN(3))
	key := mt.objKey(-1)
	if o := mt.some(func(o *mObj) bool { return o.state == StateValid && (o.kind == ObjFastMR || o.kind == ObjMW2B) }); o != nil && mt.valid() {
		pd, key = o.pd, o.key
		if o.kind == ObjMW2B {
			qpn = o.qpn
		}
	}
	var err error
	if remote {
		err = mt.tab.RemoteInvalidate(pd, qpn, key)
	} else {
		err = mt.tab.LocalInvalidate(pd, qpn, key)
	}
	mt.logf("Invalidate(remote %v, pd %d, qp %d, %#x) -> %v", remote, pd, qpn, key, err)
	o := mt.m.live(key)
	ok := o != nil && o.key == key && o.pd == pd
	if ok && IsMRKey(key) {
		ok = o.kind == ObjFastMR && o.numMW == 0
	} else if ok {
		ok = o.kind == ObjMW2B && o.state == StateValid && o.qpn == qpn
	}
	class := ClassLocalQPOperation
	if remote {
		class = ClassInvalidateRKey
	}
	mt.checkWR("Invalidate", err, ok, class)
	if err == nil && o.state == StateValid {
		o.gen++
		if IsMWKey(key) {
			mt.unbind(o)
		} else {
			o.access, o.iova, o.length = 0, 0, 0
		}
		o.state = StateFree
	}
}

func (mt *mtest) opAllocMW() {
	pd, typ := mt.pd(), MWType(mt.r.IntN(4))
	key, err := mt.tab.AllocMW(pd, typ)
	mt.logf("AllocMW(pd %d, type %d) -> %#x %v", pd, typ, key, err)
	want := syscall.Errno(0)
	switch {
	case (typ != MWType1 && typ != MWType2B) || !mt.m.pds[pd]:
		want = syscall.EINVAL
	case mt.m.nMW >= mMaxMW:
		want = syscall.ENOMEM
	}
	mt.checkVerb("AllocMW", err, want)
	if err == nil {
		if !IsMWKey(key) {
			mt.fail("MW key %#x outside the MW range", key)
		}
		o := &mObj{pd: pd, kind: ObjMW1, state: StateValid}
		if typ == MWType2B {
			o.kind, o.state = ObjMW2B, StateFree
		}
		mt.newObj(key, o)
		mt.m.nMW++
	}
}

func (mt *mtest) unbind(o *mObj) {
	if o.length > 0 && o.state == StateValid {
		mt.m.objs[o.mr].numMW--
	}
	o.length, o.access, o.iova = 0, 0, 0
}

func (mt *mtest) opDeallocMW() {
	pd, key := mt.pd(), mt.objKey(1)
	err := mt.tab.DeallocMW(pd, key)
	mt.logf("DeallocMW(pd %d, %#x) -> %v", pd, key, err)
	o := mt.m.live(key)
	want := syscall.Errno(0)
	if o == nil || !IsMWKey(key) || o.pd != pd {
		want = syscall.EINVAL
	}
	mt.checkVerb("DeallocMW", err, want)
	if err == nil {
		mt.unbind(o)
		o.live = false
		o.gen++
		mt.m.pdObjs[pd]--
		mt.m.nMW--
	}
}

// bindOp is one BindMW or BIND_MW WR's arguments.
type bindOp struct {
	pd              PD
	qpn, key, mrKey uint32
	addr, length    uint64
	a               Access
}

func (mt *mtest) opBind(wr bool) {
	b := mt.bindArgs(wr)
	var err error
	if wr {
		err = mt.tab.BindMWWR(b.pd, b.qpn, b.key, b.mrKey, b.addr, b.length, b.a)
	} else {
		err = mt.tab.BindMW(b.pd, b.key, b.mrKey, b.addr, b.length, b.a)
	}
	mt.logf("Bind(wr %v, pd %d, qp %d, %#x, mr %#x, addr %#x, len %d, %v) -> %v", wr, b.pd, b.qpn, b.key, b.mrKey, b.addr, b.length, b.a, err)

	ca := b.a &^ OptionalAccess
	o := mt.m.live(b.key)
	ok, mo := mt.bindVerdict(b, wr, ca, o)
	mt.checkWR("Bind", err, ok, ClassMWBind)
	if err == nil {
		mt.unbind(o)
		o.gen++
		o.key, o.state, o.access, o.iova, o.length, o.qpn = b.key, StateValid, ca, b.addr, b.length, b.qpn
		if b.length > 0 {
			o.mr = KeyIndex(b.mrKey)
			mo.numMW++
		} else {
			o.access, o.iova = 0, 0
		}
	}
}

// bindArgs draws a bind's arguments: random ones, or (when a window and an
// MR that allow it exist) a valid bind, perhaps mutated.
func (mt *mtest) bindArgs(wr bool) bindOp {
	b := bindOp{pd: mt.pd(), qpn: uint32(1 + mt.r.IntN(3)), key: mt.objKey(1)}
	if mt.r.IntN(2) == 0 {
		b.key = NextKey(b.key)
	}
	b.mrKey = mt.objKey(0)
	var base, mlen uint64 = 0x1000, 96
	if mo := mt.m.live(b.mrKey); mo != nil {
		base, mlen = mo.iova, mo.length
	}
	b.addr = base + mt.pick(0, 8, 16, mlen-8, mlen, math.MaxUint64)
	b.length = mt.pick(0, 8, 64, mlen, mlen-8, math.MaxUint64)
	b.a = mt.access(mwAccessMask) &^ LocalWrite
	if mt.r.IntN(8) == 0 {
		b.a |= LocalWrite
	}
	if o := mt.some(func(o *mObj) bool { return o.kind == ObjMW1 || o.kind == ObjMW2B && o.state == StateFree && wr }); o != nil && mt.valid() {
		if mo := mt.some(func(m *mObj) bool {
			return m.pd == o.pd && m.state == StateValid && m.access&MWBind != 0 && m.access&ZeroBased == 0 && (m.kind == ObjUserMR || m.kind == ObjFastMR)
		}); mo != nil {
			mt.validBind(&b, o, mo)
		}
	}
	return b
}

// validBind makes b a bind of window o to MR mo that should succeed, then
// perhaps mutates one argument.
func (mt *mtest) validBind(b *bindOp, o, mo *mObj) {
	b.pd, b.key, b.mrKey = o.pd, NextKey(o.key), mo.key
	b.addr = mo.iova + mt.r.Uint64N(mo.length)
	b.length = 1 + mt.r.Uint64N(mo.length-(b.addr-mo.iova))
	b.a = mt.access(RemoteRead|RemoteWrite|RemoteAtomic) & (RemoteRead | RemoteWrite | RemoteAtomic)
	if mo.access&LocalWrite == 0 {
		b.a &^= RemoteWrite | RemoteAtomic
	}
	if o.kind == ObjMW2B && mt.r.IntN(2) == 0 {
		b.a |= ZeroBased
	}
	if o.kind == ObjMW1 && mt.r.IntN(8) == 0 {
		b.length = 0
	}
	if mt.mutate() {
		switch mt.r.IntN(5) {
		case 0:
			b.addr--
		case 1:
			b.length = mo.length + 1
		case 2:
			b.mrKey = NextKey(b.mrKey)
		case 3:
			b.a |= LocalWrite
		case 4:
			b.pd++
		}
	}
}

// bindVerdict is the model's verdict on b (ca its access without the
// optional bits, o the live window it names) and, for a bind of length,
// the MR it lies in.
func (mt *mtest) bindVerdict(b bindOp, wr bool, ca Access, o *mObj) (bool, *mObj) {
	ok := ca&^(RemoteRead|RemoteWrite|RemoteAtomic|ZeroBased|FlushGlobal|FlushPersistent) == 0 &&
		IsMWKey(b.key) && o != nil && o.pd == b.pd
	if ok && o.kind == ObjMW1 {
		ok = ca&ZeroBased == 0
	} else if ok {
		ok = wr && o.state == StateFree && b.length > 0
	}
	if !ok || b.length == 0 {
		return ok, nil
	}
	mo := mt.m.live(b.mrKey)
	ok = IsMRKey(b.mrKey) && mo != nil && mo.key == b.mrKey && mo.state == StateValid && mo.pd == b.pd &&
		mo.access&ZeroBased == 0 && mo.access&MWBind != 0 &&
		(ca&(RemoteWrite|RemoteAtomic) == 0 || mo.access&LocalWrite != 0) &&
		ca&(FlushGlobal|FlushPersistent)&^mo.access == 0 &&
		b.addr >= mo.iova && b.length <= mo.length && b.addr-mo.iova <= mo.length-b.length
	return ok, mo
}

func (mt *mtest) opDetachQP() {
	qpn := uint32(1 + mt.r.IntN(3))
	n := mt.tab.DetachQP(qpn)
	mt.logf("DetachQP(%d) -> %d", qpn, n)
	want := 0
	for _, o := range mt.m.objs {
		if o.live && o.kind == ObjMW2B && o.state == StateValid && o.qpn == qpn {
			want++
			mt.unbind(o)
			o.state = StateFree
			o.gen++
		}
	}
	if n != want {
		mt.fail("DetachQP unbound %d, model %d", n, want)
	}
}

// expectRemote is the model's verdict on a responder access; mrObj/mrIova
// say where the bytes are on success.
func (mt *mtest) expectRemote(pd PD, qpn, key uint32, va, length uint64, a Access) (ok bool, class Class, mr *mObj, mrIova uint64) {
	if length == 0 && (a == RemoteRead || a == RemoteWrite) {
		return true, 0, nil, 0
	}
	remote := RemoteRead | RemoteWrite | RemoteAtomic | FlushGlobal | FlushPersistent
	if a == 0 || a&^remote != 0 || a&RemoteAtomic != 0 && length != 8 {
		return false, ClassInvalidRequest, nil, 0
	}
	o := mt.m.live(key)
	if o == nil || o.key != key || o.state != StateValid || o.pd != pd || o.access&a != a {
		return false, ClassRemoteAccess, nil, 0
	}
	skipRange := length == 0 && a&(FlushGlobal|FlushPersistent) != 0
	if IsMRKey(key) {
		if !skipRange && (va < o.iova || length > o.length || va-o.iova > o.length-length) {
			return false, ClassRemoteAccess, nil, 0
		}
		mr, mrIova = o, va
	} else {
		if o.length == 0 || o.kind == ObjMW2B && o.qpn != qpn {
			return false, ClassRemoteAccess, nil, 0
		}
		lo := o.iova
		if o.access&ZeroBased != 0 {
			lo = 0
		}
		if !skipRange && (va < lo || length > o.length || va-lo > o.length-length) {
			return false, ClassRemoteAccess, nil, 0
		}
		mr, mrIova = mt.m.objs[o.mr], o.iova+(va-lo)
		if skipRange {
			mrIova = o.iova
		}
	}
	if a&RemoteAtomic != 0 && mrIova%8 != 0 {
		return false, ClassInvalidRequest, nil, 0
	}
	return true, 0, mr, mrIova
}

func (mt *mtest) opRemote() {
	pd, qpn, key := mt.pd(), uint32(1+mt.r.IntN(3)), mt.objKey(-1)
	var base, olen uint64 = 0x1000, 64
	if o := mt.m.live(key); o != nil {
		base, olen = o.iova, o.length
		if o.access&ZeroBased != 0 {
			base = 0
		}
	}
	va := base + mt.pick(0, 1, 8, olen-8, olen, olen+8, math.MaxUint64-3)
	length := mt.pick(0, 1, 8, 8, 16, olen, olen-va%8, math.MaxUint64)
	a := []Access{RemoteRead, RemoteWrite, RemoteAtomic, RemoteAtomic, FlushGlobal, FlushPersistent, 0, LocalWrite}[mt.r.IntN(8)]
	if o := mt.some(func(o *mObj) bool { return o.state == StateValid && o.access&RemoteAccess != 0 && o.length > 0 }); o != nil && mt.valid() {
		pd, key, qpn = o.pd, o.key, o.qpn
		if qpn == 0 {
			qpn = uint32(1 + mt.r.IntN(3))
		}
		var rights []Access
		for _, x := range []Access{RemoteRead, RemoteWrite, RemoteAtomic, FlushGlobal} {
			if o.access&x != 0 {
				rights = append(rights, x)
			}
		}
		a = rights[mt.r.IntN(len(rights))]
		lo := o.iova
		if o.access&ZeroBased != 0 {
			lo = 0
		}
		va = lo + mt.r.Uint64N(o.length)
		length = 1 + mt.r.Uint64N(o.length-(va-lo))
		if a == RemoteAtomic {
			va, length = lo+(o.length/8)*8-8, 8
			if o.length < 8 {
				va = lo
			}
			if IsMWKey(key) && mt.r.IntN(2) == 0 {
				va -= (o.iova + va - lo) % 8 // align the MR address, not the window offset
			}
		}
		if mt.mutate() {
			switch mt.r.IntN(5) {
			case 0:
				va++
			case 1:
				length += o.length
			case 2:
				qpn++
			case 3:
				key = NextKey(key)
			case 4:
				pd++
			}
		}
	}
	ref, err := mt.tab.Remote(pd, qpn, key, va, length, a)
	mt.logf("Remote(pd %d, qp %d, %#x, va %#x, len %d, %v) -> %v", pd, qpn, key, va, length, a, err)
	ok, class, mr, mrIova := mt.expectRemote(pd, qpn, key, va, length, a)
	mt.checkWR("Remote", err, ok, class)
	if err == nil {
		mt.exercise(&ref, mr, mrIova, length, key, a&(RemoteWrite|RemoteAtomic) != 0, a == RemoteAtomic)
	}
}

func (mt *mtest) opLocal() {
	pd, key := mt.pd(), mt.objKey(0)
	var base, olen uint64 = 0x1000, 64
	if o := mt.m.live(key); o != nil {
		base, olen = o.iova, o.length
	}
	va := base + mt.pick(0, 1, olen-8, olen, math.MaxUint64)
	length := mt.pick(0, 1, 8, olen, math.MaxUint64)
	a := []Access{0, LocalWrite, RemoteRead}[mt.r.IntN(3)]
	if o := mt.some(func(o *mObj) bool { return o.state == StateValid && IsMRKey(o.key) && o.length > 0 }); o != nil && mt.valid() {
		pd, key, a = o.pd, o.key, o.access&LocalWrite
		va = o.iova + mt.r.Uint64N(o.length)
		length = 1 + mt.r.Uint64N(o.length-(va-o.iova))
	}
	ref, err := mt.tab.Local(pd, key, va, length, a)
	mt.logf("Local(pd %d, %#x, va %#x, len %d, %v) -> %v", pd, key, va, length, a, err)
	o := mt.m.live(key)
	ok := length == 0 || a&^LocalWrite == 0 && IsMRKey(key) && o != nil && o.key == key && o.state == StateValid &&
		o.pd == pd && o.access&a == a && va >= o.iova && length <= o.length && va-o.iova <= o.length-length
	mt.checkWR("Local", err, ok, ClassLocalProtection)
	if err == nil {
		if length == 0 {
			o = nil
		}
		mt.exercise(&ref, o, va, length, key, a == LocalWrite, false)
	}
}

// exercise reads (and maybe writes or updates atomically) through ref and
// checks the model's idea of where the bytes are; then keeps or releases it.
func (mt *mtest) exercise(ref *Ref, mr *mObj, mrIova, length uint64, key uint32, writable, atomic bool) {
	if mr == nil || length == 0 {
		if ref.Len() != 0 {
			mt.fail("empty access gave a %d-byte Ref", ref.Len())
		}
		if mr == nil {
			ref.Release()
			return
		}
	}
	n := min(length, 600)
	got := make([]byte, n)
	if _, err := ref.ReadAt(got, 0); err != nil {
		mt.fail("ReadAt: %v", err)
	}
	want := make([]byte, n)
	for i := range want {
		b, off := mr.byteAt(mrIova + uint64(i))
		want[i] = b.Bytes()[off]
	}
	if !bytes.Equal(got, want) {
		mt.fail("bytes through %#x differ from the model's mapping", key)
	}
	if writable && n > 0 {
		if atomic {
			old, err := ref.FetchAdd(0, 3)
			if err != nil {
				mt.fail("FetchAdd: %v", err)
			}
			var w [8]byte
			for i := range 8 {
				b, off := mr.byteAt(mrIova + uint64(i))
				w[i] = b.Bytes()[off]
			}
			if binary.NativeEndian.Uint64(w[:]) != old+3 || binary.NativeEndian.Uint64(want[:8]) != old {
				mt.fail("FetchAdd landed elsewhere")
			}
		} else {
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(mt.r.Uint32())
			}
			ref.WriteAt(p, 0)
			// Pages of a REG_MR list may alias each other: the last write
			// to an address wins.
			mt.stamp++
			for i := range p {
				b, off := mr.byteAt(mrIova + uint64(i))
				j := mt.bkIndex(b)*mBackSize + int(off)
				mt.shadow[j], mt.shadowAt[j] = p[i], mt.stamp
			}
			for i := range p {
				b, off := mr.byteAt(mrIova + uint64(i))
				j := mt.bkIndex(b)*mBackSize + int(off)
				if mt.shadowAt[j] == mt.stamp && b.Bytes()[off] != mt.shadow[j] {
					mt.fail("WriteAt byte %d landed elsewhere", i)
				}
			}
		}
	} else if _, err := ref.WriteAt(got[:min(n, 1)], 0); err == nil && n > 0 {
		mt.fail("read-only access wrote")
	}
	if len(mt.held) < 4 && mt.r.IntN(3) == 0 {
		h := heldRef{ref: *ref, idx: KeyIndex(key), gen: mt.m.objs[KeyIndex(key)].gen, desc: mt.log[len(mt.log)-1].String()}
		if IsMWKey(key) {
			h.hasMR, h.mrIdx, h.mrGen = true, KeyIndex(mr.key), mr.gen
		}
		mt.held = append(mt.held, h)
		*ref = Ref{}
		return
	}
	ref.Release()
}

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
