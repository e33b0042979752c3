package mem

// The reference model's PD and memory region steps: alloc/dealloc PD,
// reg/dereg/rereg MR, fast registration and invalidation.

import (
	"math"
	"slices"
	"syscall"
)

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
