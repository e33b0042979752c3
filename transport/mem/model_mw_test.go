package mem

// The reference model's memory window, QP detach and access steps:
// alloc/dealloc MW, bind (verb and WR), remote and local accesses.

import (
	"bytes"
	"encoding/binary"
	"math"
	"syscall"
)

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
