package mem

import (
	"math"
	"testing"
)

func TestRemote_KeyMustMatchAll32Bits(t *testing.T) {
	f := newFx(t)
	mr := f.reg(f.backing(64, 0), 0, 64, 0, RemoteRead)
	mw := f.mw(MWType1)
	mr2 := f.reg(f.backing(64, 0), 0, 64, 0, LocalWrite|MWBind)
	f.tab.BindMW(f.pd, mw, mr2, 0, 64, RemoteRead)
	for _, k := range []uint32{mr, mw} {
		for bit := range 32 {
			err := f.remote(1, k^1<<bit, 0, 8, RemoteRead)
			if err == nil {
				t.Fatalf("key %#x with bit %d flipped accepted", k, bit)
			}
			wantClass(t, err, ClassRemoteAccess)
		}
		if err := f.remote(1, k, 0, 8, RemoteRead); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRemote_UnknownOrOutOfRangeIndexIsRemoteAccessError(t *testing.T) {
	f := newFx(t)
	for _, k := range []uint32{0, 0xFF, MakeKey(1000, 0), MakeKey(MWIndexMin+5, 1), MakeKey(MWIndexMax+1, 0), math.MaxUint32} {
		err := f.remote(1, k, 0, 8, RemoteRead)
		wantKind(t, err, KindNoObject)
		wantClass(t, err, ClassRemoteAccess)
		if n, _ := ClassOf(err).NAK(); n != 0x62 {
			t.Fatalf("NAK %#x", n)
		}
	}
}

func TestRemote_PDMustMatchTheQPs(t *testing.T) {
	f := newFx(t)
	mr := f.reg(f.backing(64, 0), 0, 64, 0, RemoteRead)
	_, err := f.tab.Remote(f.newPD(), 1, mr, 0, 8, RemoteRead)
	wantKind(t, err, KindWrongPD)
}

func TestRemote_StateMustBeValid(t *testing.T) {
	f := newFx(t)
	k := f.fastMR(f.backing(512, 0), 512, 1, 0, 512, RemoteRead)
	f.tab.LocalInvalidate(f.pd, 1, k)
	wantKind(t, f.remote(1, k, 0, 8, RemoteRead), KindWrongState)
}

func TestRemote_AccessFlagsMustAllowTheOperation(t *testing.T) {
	f := newFx(t)
	ops := []Access{RemoteRead, RemoteWrite, RemoteAtomic, FlushGlobal}
	for _, mrAcc := range []Access{0, LocalWrite, RemoteRead, LocalWrite | RemoteWrite, LocalWrite | RemoteAtomic,
		LocalWrite | RemoteRead | RemoteWrite | RemoteAtomic, RemoteRead | FlushGlobal} {
		k := f.reg(f.backing(64, 0), 0, 64, 0, mrAcc)
		for _, op := range ops {
			err := f.remote(1, k, 0, 8, op)
			if ok := mrAcc&op != 0; ok != (err == nil) {
				t.Errorf("MR %v, op %v: err %v", mrAcc, op, err)
			}
			if err != nil {
				wantKind(t, err, KindAccessDenied)
			}
		}
	}
}

func TestRemote_AccessArgumentMustBeOneRemoteRight(t *testing.T) {
	f := newFx(t)
	k := f.reg(f.backing(64, 0), 0, 64, 0, LocalWrite|RemoteRead)
	for _, a := range []Access{0, LocalWrite, MWBind, RemoteRead | LocalWrite} {
		err := f.remote(1, k, 0, 8, a)
		wantKind(t, err, KindInvalidArg)
	}
}

func TestRemote_RangeEdges(t *testing.T) {
	f := newFx(t)
	k := f.reg(f.backing(0x100, 0), 0, 0x100, 0x1000, RemoteRead)
	for _, c := range []struct {
		va, n uint64
		ok    bool
	}{
		{0x1000, 0x100, true}, {0x10FF, 1, true}, {0x1000, 0x101, false}, {0xFFF, 1, false},
		{0x1100, 1, false}, {0x10FF, 2, false}, {0, 0x2000, false},
	} {
		err := f.remote(1, k, c.va, c.n, RemoteRead)
		if c.ok != (err == nil) {
			t.Errorf("va %#x len %#x: %v", c.va, c.n, err)
		}
		if err != nil {
			wantKind(t, err, KindOutOfRange)
		}
	}
}

func TestRemote_IovaLengthOverflowRejected(t *testing.T) {
	f := newFx(t)
	k := f.reg(f.backing(0x100, 0), 0, 0x100, 0x1000, RemoteRead)
	for _, c := range []struct{ va, n uint64 }{
		{0x1080, math.MaxUint64},           // va + length wraps to below the region end
		{0x1080, math.MaxUint64 - 0x1000},  // still wraps
		{math.MaxUint64, 2},                // va + length wraps past 0
		{math.MaxUint64 - 0x7F, 0x1000080}, // lands the sum inside the region
	} {
		wantKind(t, f.remote(1, k, c.va, c.n, RemoteRead), KindOutOfRange)
	}
	// The same through a window.
	mr := f.reg(f.backing(0x100, 0), 0, 0x100, 0x1000, LocalWrite|MWBind)
	mw := f.mw(MWType1)
	f.tab.BindMW(f.pd, mw, mr, 0x1000, 0x100, RemoteRead)
	wantKind(t, f.remote(1, mw, 0x1080, math.MaxUint64, RemoteRead), KindOutOfRange)
	wantKind(t, f.remote(1, mw, math.MaxUint64, 2, RemoteRead), KindOutOfRange)
}

func TestRemote_ZeroBasedMRAddressedFromZero(t *testing.T) {
	f := newFx(t)
	_, err := f.tab.RegMR(f.pd, f.backing(64, 0), 0, 64, 0x1000, RemoteRead|ZeroBased)
	wantKind(t, err, KindInvalidArg)
	b := f.backing(128, 4)
	k := f.reg(b, 64, 64, 0, RemoteRead|ZeroBased)
	r, err := f.tab.Remote(f.pd, 1, k, 8, 8, RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	var got [8]byte
	r.ReadAt(got[:], 0)
	r.Release()
	if string(got[:]) != string(b.Bytes()[72:80]) {
		t.Fatal("zero-based MR offset wrong")
	}
	wantKind(t, f.remote(1, k, 60, 8, RemoteRead), KindOutOfRange)
}

func TestAtomic_Requires8ByteAlignment(t *testing.T) {
	f := newFx(t)
	k := f.reg(f.backing(64, 0), 0, 64, 0x1000, LocalWrite|RemoteAtomic)
	for off := uint64(1); off < 8; off++ {
		err := f.remote(1, k, 0x1000+off, 8, RemoteAtomic)
		wantKind(t, err, KindMisaligned)
		wantClass(t, err, ClassInvalidRequest)
		if n, _ := ClassOf(err).NAK(); n != 0x61 {
			t.Fatalf("NAK %#x", n)
		}
	}
	if err := f.remote(1, k, 0x1038, 8, RemoteAtomic); err != nil {
		t.Fatal(err)
	}
}

func TestAtomic_KeyCheckedBeforeAlignment(t *testing.T) {
	// rxe's order: a bad rkey is a remote access error even when the VA is
	// also misaligned.
	f := newFx(t)
	k := f.reg(f.backing(64, 0), 0, 64, 0x1000, LocalWrite|RemoteAtomic)
	wantClass(t, f.remote(1, NextKey(k), 0x1001, 8, RemoteAtomic), ClassRemoteAccess)
}

func TestAtomic_LengthMustBe8(t *testing.T) {
	f := newFx(t)
	k := f.reg(f.backing(64, 0), 0, 64, 0, LocalWrite|RemoteAtomic)
	for _, n := range []uint64{0, 4, 16} {
		err := f.remote(1, k, 0, n, RemoteAtomic)
		wantKind(t, err, KindInvalidArg)
		wantClass(t, err, ClassInvalidRequest)
	}
}

func TestRemote_ZeroLengthReadWriteIgnoresRKeyAndVA(t *testing.T) {
	f := newFx(t)
	for _, a := range []Access{RemoteRead, RemoteWrite} {
		r, err := f.tab.Remote(f.pd, 1, 0xDEADBEEF, math.MaxUint64, 0, a)
		if err != nil {
			t.Fatalf("C9-88: zero-length %v checked the rkey: %v", a, err)
		}
		if r.Len() != 0 || r.Key() != 0 || r.Changed() {
			t.Fatal("zero-length access must give the empty Ref")
		}
		if _, err := r.ReadAt(nil, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := r.ReadAt(make([]byte, 1), 0); err == nil {
			t.Fatal("empty Ref read a byte")
		}
		r.Release()
	}
}

func TestRemote_ZeroLengthFlushChecksKeyNotRange(t *testing.T) {
	f := newFx(t)
	k := f.reg(f.backing(64, 0), 0, 64, 0x1000, RemoteRead|FlushGlobal)
	if err := f.remote(1, k, 0, 0, FlushGlobal); err != nil {
		t.Fatal(err)
	}
	wantKind(t, f.remote(1, NextKey(k), 0, 0, FlushGlobal), KindKeyMismatch)
	wantKind(t, f.remote(1, k, 0, 1, FlushGlobal), KindOutOfRange)
}

func TestLocal_MWKeyIsNotAnLKey(t *testing.T) {
	f := newFx(t)
	mr, _ := f.bindable(LocalWrite | MWBind)
	mw := f.mw(MWType1)
	f.tab.BindMW(f.pd, mw, mr, 0x10000, 64, RemoteRead)
	_, err := f.tab.Local(f.pd, mw, 0x10000, 8, 0)
	wantKind(t, err, KindNoObject)
	wantClass(t, err, ClassLocalProtection)
}

func TestLocal_KeyPDStateRangeChecked(t *testing.T) {
	f := newFx(t)
	k := f.reg(f.backing(64, 0), 0, 64, 0x1000, 0)
	for _, c := range []struct {
		pd   PD
		key  uint32
		va   uint64
		n    uint64
		kind ErrKind
	}{
		{f.pd, NextKey(k), 0x1000, 8, KindKeyMismatch},
		{f.pd + 1, k, 0x1000, 8, KindWrongPD},
		{f.pd, k, 0x0FFF, 8, KindOutOfRange},
		{f.pd, k, 0x1039, 8, KindOutOfRange},
		{f.pd, k, 0x1000, math.MaxUint64, KindOutOfRange},
	} {
		_, err := f.tab.Local(c.pd, c.key, c.va, c.n, 0)
		wantKind(t, err, c.kind)
		wantClass(t, err, ClassLocalProtection)
	}
	r, err := f.tab.Local(f.pd, k, 0x1000, 64, 0)
	if err != nil {
		t.Fatal(err)
	}
	r.Release()
}

func TestLocal_WriteNeedsLocalWrite(t *testing.T) {
	f := newFx(t)
	ro := f.reg(f.backing(64, 0), 0, 64, 0, RemoteRead)
	_, err := f.tab.Local(f.pd, ro, 0, 8, LocalWrite)
	wantKind(t, err, KindAccessDenied)
	_, err = f.tab.Local(f.pd, ro, 0, 8, RemoteRead)
	wantKind(t, err, KindInvalidArg)
	r, err := f.tab.Local(f.pd, ro, 0, 8, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	if _, err := r.WriteAt([]byte{1}, 0); KindOf(err) != KindAccessDenied {
		t.Fatalf("read-only Ref wrote: %v", err)
	}
	if _, err := r.FetchAdd(0, 1); KindOf(err) != KindAccessDenied {
		t.Fatalf("read-only Ref did an atomic: %v", err)
	}
}

func TestLocal_ZeroLengthSGEIsNotLookedUp(t *testing.T) {
	f := newFx(t)
	r, err := f.tab.Local(f.pd, 0x12345678, 0, 0, LocalWrite)
	if err != nil || r.Len() != 0 {
		t.Fatalf("zero-length SGE: %v", err)
	}
}

func TestRemote_DoesNotAllocate(t *testing.T) {
	f := newFx(t)
	k := f.reg(f.backing(4096, 0), 0, 4096, 0x1000, LocalWrite|RemoteRead|RemoteWrite)
	fk := f.fastMR(f.backing(4096, 0), 512, 8, 0x2000, 4096, LocalWrite|RemoteRead)
	mr, _ := f.bindable(LocalWrite | MWBind)
	mw := f.mw(MWType2B)
	f.tab.BindMWWR(f.pd, 4, mw, mr, 0x10000, 1024, RemoteRead)
	buf := make([]byte, 512)
	n := testing.AllocsPerRun(200, func() {
		for _, c := range []struct {
			k  uint32
			va uint64
		}{{k, 0x1100}, {fk, 0x2100}, {mw, 0x10100}} {
			r, err := f.tab.Remote(f.pd, 4, c.k, c.va, 512, RemoteRead)
			if err != nil {
				panic(err)
			}
			r.ReadAt(buf, 0)
			r.Release()
		}
		r, _ := f.tab.Local(f.pd, k, 0x1000, 64, LocalWrite)
		r.WriteAt(buf[:64], 0)
		r.Release()
		// Failures do not allocate either.
		f.tab.Remote(f.pd, 4, NextKey(k), 0x1000, 8, RemoteRead)
		f.tab.Remote(f.pd, 5, mw, 0x10100, 8, RemoteRead)
	})
	if n != 0 {
		t.Fatalf("%v allocations per lookup round", n)
	}
}
