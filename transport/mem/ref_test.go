package mem

import (
	"encoding/binary"
	"testing"
)

func TestRef_CopiesAreAllOrNothingWithinBounds(t *testing.T) {
	f := newFx(t)
	b := f.backing(64, 0)
	k := f.reg(b, 0, 64, 0x1000, LocalWrite|RemoteWrite|RemoteRead)
	r, err := f.tab.Remote(f.pd, 1, k, 0x1010, 16, RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	before := append([]byte(nil), b.Bytes()...)
	for _, c := range []struct {
		off int64
		n   int
	}{{-1, 1}, {0, 17}, {16, 1}, {17, 0}, {8, 9}, {1 << 62, 1}} {
		if n, err := r.WriteAt(make([]byte, c.n), c.off); err == nil || n != 0 {
			t.Errorf("write %d at %d accepted", c.n, c.off)
		}
		if n, err := r.ReadAt(make([]byte, c.n), c.off); err == nil || n != 0 {
			t.Errorf("read %d at %d accepted", c.n, c.off)
		}
	}
	if string(before) != string(b.Bytes()) {
		t.Fatal("a refused write changed memory")
	}
	if n, err := r.WriteAt([]byte("0123456789abcdef"), 0); n != 16 || err != nil {
		t.Fatal(err)
	}
	if string(b.Bytes()[0x10:0x20]) != "0123456789abcdef" || string(b.Bytes()[:0x10]) != string(before[:0x10]) ||
		string(b.Bytes()[0x20:]) != string(before[0x20:]) {
		t.Fatal("write outside the resolved range")
	}
	got := make([]byte, 4)
	if _, err := r.ReadAt(got, 12); err != nil || string(got) != "cdef" {
		t.Fatalf("%q %v", got, err)
	}
}

func TestAtomic_OpsUseNativeByteOrder(t *testing.T) {
	f := newFx(t)
	b := f.backing(64, 0)
	k := f.reg(b, 0, 64, 0x1000, LocalWrite|RemoteAtomic|RemoteWrite)
	word := func() uint64 { return binary.NativeEndian.Uint64(b.Bytes()[16:]) }
	binary.NativeEndian.PutUint64(b.Bytes()[16:], 100)
	r, err := f.tab.Remote(f.pd, 1, k, 0x1010, 8, RemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	if old, err := r.CompareSwap(0, 99, 5); err != nil || old != 100 || word() != 100 {
		t.Fatalf("failed compare swapped: old %d word %d %v", old, word(), err)
	}
	if old, _ := r.CompareSwap(0, 100, 5); old != 100 || word() != 5 {
		t.Fatalf("compare swap: old %d word %d", old, word())
	}
	if old, _ := r.FetchAdd(0, 1<<63); old != 5 || word() != 5+1<<63 {
		t.Fatalf("fetch add: old %d word %d", old, word())
	}
	if old, _ := r.FetchAdd(0, 1<<63); old != 5+1<<63 || word() != 5 {
		t.Fatal("fetch add must wrap")
	}
	if err := r.AtomicWrite(0, 0xABCDEF); err != nil || word() != 0xABCDEF {
		t.Fatal("atomic write")
	}
	if v, _ := r.AtomicRead(0); v != 0xABCDEF {
		t.Fatal("atomic read")
	}
	if _, err := r.FetchAdd(1, 1); KindOf(err) != KindOutOfRange {
		t.Fatalf("off 1 of an 8-byte Ref: %v", err)
	}
	r.Release()
	// ATOMIC_WRITE resolves with REMOTE_WRITE; alignment is judged by the Ref.
	r, _ = f.tab.Remote(f.pd, 1, k, 0x1004, 12, RemoteWrite)
	err = r.AtomicWrite(0, 1)
	wantKind(t, err, KindMisaligned)
	wantClass(t, err, ClassInvalidRequest)
	if err := r.AtomicWrite(4, 7); err != nil || binary.NativeEndian.Uint64(b.Bytes()[8:]) != 7 {
		t.Fatal(err)
	}
	r.Release()
}

func TestAtomic_UnalignedMemoryBehindAlignedIOVA(t *testing.T) {
	// IOVA 0x2000 maps to an odd address: the IBA alignment rule holds on
	// the IOVA, and the word is still updated in one piece.
	f := newFx(t)
	b := f.backing(64, 0)
	k := f.reg(b, 3, 32, 0x2000, LocalWrite|RemoteAtomic)
	binary.NativeEndian.PutUint64(b.Bytes()[3+8:], 41)
	r, err := f.tab.Remote(f.pd, 1, k, 0x2008, 8, RemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	if old, _ := r.FetchAdd(0, 1); old != 41 || binary.NativeEndian.Uint64(b.Bytes()[11:]) != 42 {
		t.Fatal("unaligned fetch add")
	}
	if old, _ := r.CompareSwap(0, 42, 9); old != 42 || binary.NativeEndian.Uint64(b.Bytes()[11:]) != 9 {
		t.Fatal("unaligned compare swap")
	}
	r.Release()
}

func TestAtomic_OnFastRegPages(t *testing.T) {
	f := newFx(t)
	b := f.backing(1024, 0)
	k := f.fastMR(b, 256, 4, 0x3000, 1024, LocalWrite|RemoteAtomic)
	r, err := f.tab.Remote(f.pd, 1, k, 0x3000+256+8, 8, RemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	r.AtomicWrite(0, 0x1122)
	r.Release()
	if binary.NativeEndian.Uint64(b.Bytes()[264:]) != 0x1122 {
		t.Fatal("atomic on the wrong page")
	}
}

func TestRef_ChangedOnEveryStateChange(t *testing.T) {
	f := newFx(t)
	b := f.backing(4096, 0)
	user := f.reg(b, 0, 4096, 0x10000, LocalWrite|RemoteRead|MWBind)
	fast := f.fastMR(b, 512, 2, 0, 1024, RemoteRead)
	mw1, mw2 := f.mw(MWType1), f.mw(MWType2B)
	f.tab.BindMW(f.pd, mw1, user, 0x10000, 64, RemoteRead)
	f.tab.BindMWWR(f.pd, 7, mw2, user, 0x10000, 64, RemoteRead)

	steps := []struct {
		name   string
		key    uint32
		va     uint64
		qpn    uint32
		change func()
	}{
		{"rebind type 1", mw1, 0x10000, 1, func() { f.tab.BindMW(f.pd, NextKey(mw1), user, 0x10000, 32, RemoteRead) }},
		{"unbind type 1", NextKey(mw1), 0x10000, 1, func() { f.tab.BindMW(f.pd, NextKey(NextKey(mw1)), 0, 0, 0, 0) }},
		{"invalidate 2B", mw2, 0x10000, 7, func() { f.tab.LocalInvalidate(f.pd, 7, mw2) }},
		{"invalidate MR", fast, 0, 1, func() { f.tab.LocalInvalidate(f.pd, 1, fast) }},
		{"rereg MR", user, 0x10000, 1, func() { f.tab.ReregMR(f.pd, user, ReregAccess, Rereg{Access: RemoteRead}) }},
		{"dereg MR", user, 0x10000, 1, func() { f.tab.DeregMR(f.pd, user) }},
	}
	for _, s := range steps {
		r, err := f.tab.Remote(f.pd, s.qpn, s.key, s.va, 8, RemoteRead)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		// Lookups and other objects' changes are not changes.
		r2, _ := f.tab.Remote(f.pd, s.qpn, s.key, s.va, 8, RemoteRead)
		r2.Release()
		if r.Changed() {
			t.Fatalf("%s: Changed before the change", s.name)
		}
		g := r.Gen()
		s.change()
		if !r.Changed() {
			t.Fatalf("%s: Changed missed it", s.name)
		}
		if in, ok := f.tab.Query(s.key); ok && in.Gen <= g {
			t.Fatalf("%s: generation %d did not advance past %d", s.name, in.Gen, g)
		}
		r.Release()
	}
}

func TestRef_WindowRefSeesItsMRGeneration(t *testing.T) {
	f := newFx(t)
	mr, _ := f.bindable(LocalWrite | MWBind)
	mw := f.mw(MWType1)
	f.tab.BindMW(f.pd, mw, mr, 0x10000, 64, RemoteRead)
	r, _ := f.tab.Remote(f.pd, 1, mw, 0x10000, 8, RemoteRead)
	defer r.Release()
	in, _ := f.tab.Query(mr)
	if r.MRKey() != mr || r.MRGen() != in.Gen || r.Key() != mw {
		t.Fatalf("MRKey %#x MRGen %d, want %#x %d", r.MRKey(), r.MRGen(), mr, in.Gen)
	}
}

func TestRef_ReleaseTwiceIsHarmless(t *testing.T) {
	f := newFx(t)
	b := f.backing(64, 0)
	k := f.reg(b, 0, 64, 0, RemoteRead)
	r, _ := f.tab.Remote(f.pd, 1, k, 0, 8, RemoteRead)
	r.Release()
	r.Release()
	f.tab.DeregMR(f.pd, k)
	b.Close()
	if !b.Released() {
		t.Fatal("reference count off")
	}
}
