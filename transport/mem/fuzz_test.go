package mem

import (
	"testing"
	"unsafe"
)

// fuzzFix is a table with every kind of registration over backings whose
// unregistered bytes are guards: no access may ever touch them.
type fuzzFix struct {
	tab     *Table
	pd, pd2 PD
	keys    []uint32
	where   map[uint32]func(x uint64) (*SliceBacking, uint64) // MR IOVA → memory, per key
	winBase map[uint32]uint64                                 // window key → MR IOVA of window offset 0 (zero-based) or 0
	guards  []guard
}

type guard struct {
	b      *SliceBacking
	lo, hi int
	want   []byte
}

func newFuzzFix(tb testing.TB) *fuzzFix {
	tab := NewTable(Config{})
	pd, _ := tab.AllocPD()
	pd2, _ := tab.AllocPD()
	fx := &fuzzFix{tab: tab, pd: pd, pd2: pd2, where: map[uint32]func(uint64) (*SliceBacking, uint64){}, winBase: map[uint32]uint64{}}
	must := func(k uint32, err error) uint32 {
		if err != nil {
			tb.Fatal(err)
		}
		return k
	}
	guardOutside := func(b *SliceBacking, ranges ...[2]int) {
		at := 0
		for _, r := range ranges {
			if r[0] > at {
				fx.guards = append(fx.guards, guard{b, at, r[0], append([]byte(nil), b.Bytes()[at:r[0]]...)})
			}
			at = r[1]
		}
		if n := len(b.Bytes()); n > at {
			fx.guards = append(fx.guards, guard{b, at, n, append([]byte(nil), b.Bytes()[at:]...)})
		}
	}
	all := LocalWrite | RemoteRead | RemoteWrite | RemoteAtomic

	bA := NewSliceBacking(pattern(2048, 1))
	a := must(tab.RegMR(pd, bA, 64, 1000, 0x10000, all|MWBind))
	fx.where[a] = func(x uint64) (*SliceBacking, uint64) { return bA, 64 + x - 0x10000 }
	guardOutside(bA, [2]int{64, 1064})

	bZ := NewSliceBacking(pattern(1024, 2))
	z := must(tab.RegMR(pd, bZ, 128, 512, 0, all|ZeroBased))
	fx.where[z] = func(x uint64) (*SliceBacking, uint64) { return bZ, 128 + x }
	guardOutside(bZ, [2]int{128, 640})

	bF := NewSliceBacking(pattern(2048, 3))
	f := must(tab.AllocMR(pd, 4))
	f = NextKey(f)
	if err := tab.FastReg(pd, f, []Page{{bF, 5 * 256}, {bF, 2 * 256}, {bF, 7 * 256}}, 256, 0x7000+100, 600, all); err != nil {
		tb.Fatal(err)
	}
	fx.where[f] = func(x uint64) (*SliceBacking, uint64) {
		rel := 100 + x - 0x7064
		return bF, [3]uint64{5, 2, 7}[rel/256]*256 + rel%256
	}
	guardOutside(bF, [2]int{2 * 256, 3 * 256}, [2]int{5*256 + 100, 6 * 256}, [2]int{7 * 256, 7*256 + 188})

	w1 := must(tab.AllocMW(pd, MWType1))
	if err := tab.BindMW(pd, w1, a, 0x10100, 200, RemoteRead|RemoteWrite); err != nil {
		tb.Fatal(err)
	}
	fx.where[w1] = fx.where[a]
	w2 := must(tab.AllocMW(pd, MWType2B))
	if err := tab.BindMWWR(pd, 7, w2, a, 0x10200, 256, RemoteRead|RemoteAtomic|ZeroBased); err != nil {
		tb.Fatal(err)
	}
	fx.where[w2] = fx.where[a]
	fx.winBase[w2] = 0x10200

	g := must(tab.AllocMR(pd, 2))       // FREE
	u := must(tab.AllocMW(pd, MWType1)) // unbound
	bO := NewSliceBacking(pattern(256, 4))
	o := must(tab.RegMR(pd2, bO, 0, 256, 0x10000, all)) // other PD
	fx.where[o] = func(x uint64) (*SliceBacking, uint64) { return bO, x - 0x10000 }
	fx.keys = []uint32{a, z, f, w1, w2, g, u, o}
	return fx
}

func (fx *fuzzFix) checkGuards(t *testing.T) {
	for _, g := range fx.guards {
		if string(g.b.Bytes()[g.lo:g.hi]) != string(g.want) {
			t.Fatalf("bytes [%d,%d) of an unregistered part of a backing changed", g.lo, g.hi)
		}
	}
}

// checkRef walks every byte of r and checks it is exactly the memory the
// registration maps (key, va) to: never a byte outside a registered region.
func (fx *fuzzFix) checkRef(t *testing.T, r *Ref, key uint32, va, length uint64) {
	if r.Len() != length {
		t.Fatalf("Ref length %d, asked %d", r.Len(), length)
	}
	if length > 1<<12 {
		t.Fatalf("a %d-byte access succeeded on small regions", length)
	}
	where := fx.where[key]
	if where == nil {
		t.Fatalf("lookup of %#x succeeded", key)
	}
	x := va
	if b, ok := fx.winBase[key]; ok {
		x = b + va
	}
	for off := uint64(0); off < length; {
		sp := r.reg.span(r.base + off)
		n := min(uint64(len(sp)), length-off)
		for i := range n {
			b, o := where(x + off + i)
			if o >= uint64(len(b.Bytes())) || unsafe.Pointer(&sp[i]) != unsafe.Pointer(&b.Bytes()[o]) {
				t.Fatalf("byte %d of %#x@%#x is not the registered memory", off+i, key, va)
			}
		}
		off += n
	}
}

func FuzzRemoteLookup(f *testing.F) {
	fx := newFuzzFix(f)
	f.Add(uint8(0), uint32(0), uint64(0x10000), uint64(1000), uint32(RemoteRead), uint32(1), false, false)
	f.Add(uint8(0), uint32(0), uint64(0x10000), uint64(1001), uint32(RemoteWrite), uint32(1), false, false)
	f.Add(uint8(1), uint32(0), uint64(8), uint64(8), uint32(RemoteAtomic), uint32(1), false, false)
	f.Add(uint8(2), uint32(0), uint64(0x70F0), uint64(300), uint32(RemoteWrite), uint32(1), false, false)
	f.Add(uint8(3), uint32(0), uint64(0x10100), uint64(200), uint32(RemoteRead), uint32(3), false, false)
	f.Add(uint8(4), uint32(0), uint64(0xF8), uint64(8), uint32(RemoteAtomic), uint32(7), false, false)
	f.Add(uint8(4), uint32(0), uint64(0xF8), uint64(8), uint32(RemoteAtomic), uint32(8), false, false)
	f.Add(uint8(0), uint32(1), uint64(0x10000), uint64(8), uint32(RemoteRead), uint32(1), false, false)
	f.Add(uint8(0), uint32(0), uint64(0x10010), uint64(0xFFFFFFFFFFFFFFF0), uint32(RemoteRead), uint32(1), false, false)
	f.Add(uint8(2), uint32(0), uint64(0x7064), uint64(600), uint32(LocalWrite), uint32(0), true, false)
	f.Add(uint8(7), uint32(0), uint64(0x10000), uint64(8), uint32(RemoteRead), uint32(1), false, true)
	f.Fuzz(func(t *testing.T, sel uint8, keyXor uint32, va, length uint64, access uint32, qpn uint32, local, otherPD bool) {
		key := fx.keys[int(sel)%len(fx.keys)] ^ keyXor
		pd := fx.pd
		if otherPD {
			pd = fx.pd2
		}
		var r Ref
		var err error
		if local {
			r, err = fx.tab.Local(pd, key, va, length, Access(access))
		} else {
			r, err = fx.tab.Remote(pd, qpn, key, va, length, Access(access))
		}
		if err != nil {
			if r.s != nil || r.Len() != 0 {
				t.Fatal("failed lookup returned a live Ref")
			}
			if ClassOf(err) == ClassNone {
				t.Fatalf("error without a class: %v", err)
			}
			return
		}
		defer r.Release()
		if length == 0 { // the empty Ref, or a zero-length FLUSH's pin
			return
		}
		fx.checkRef(t, &r, key, va, length)
		buf := make([]byte, length)
		if _, err := r.ReadAt(buf, 0); err != nil {
			t.Fatal(err)
		}
		if r.Writable() {
			// Write the complement, check the guards, restore.
			inv := make([]byte, length)
			for i := range buf {
				inv[i] = ^buf[i]
			}
			if _, err := r.WriteAt(inv, 0); err != nil {
				t.Fatal(err)
			}
			if length >= 8 {
				if old, err := r.FetchAdd(0, 1); err == nil {
					r.CompareSwap(0, old+1, old)
				}
			}
			fx.checkGuards(t)
			if _, err := r.WriteAt(buf, 0); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := r.ReadAt(buf[:min(length, 1)], int64(length)); length > 0 && err == nil {
			t.Fatal("read past the Ref")
		}
		fx.checkGuards(t)
	})
}
