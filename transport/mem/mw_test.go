package mem

import (
	"bytes"
	"math"
	"testing"
)

// bindable is a user MR at IOVA 0x10000 of 4096 bytes that windows can bind to.
func (f *fx) bindable(a Access) (uint32, *SliceBacking) {
	b := f.backing(4096, 5)
	return f.reg(b, 0, 4096, 0x10000, a), b
}

func TestMW_IndicesLiveInTheMWRange(t *testing.T) {
	f := newFx(t)
	for _, typ := range []MWType{MWType1, MWType2B} {
		k := f.mw(typ)
		if !IsMWKey(k) || IsMRKey(k) {
			t.Fatalf("MW key %#x not in the MW range", k)
		}
	}
	_, err := f.tab.AllocMW(f.pd, 3)
	wantKind(t, err, KindInvalidArg)
	_, err = f.tab.AllocMW(99, MWType1)
	wantKind(t, err, KindNoObject)
}

func TestMW1_ValidAtAllocButUnusableUntilBound(t *testing.T) {
	f := newFx(t)
	mw := f.mw(MWType1)
	if in, _ := f.tab.Query(mw); in.State != StateValid || in.Kind != ObjMW1 {
		t.Fatalf("%+v", in)
	}
	wantKind(t, f.remote(1, mw, 0, 8, RemoteRead), KindWrongState)
}

func TestMW1_BoundWindowUsableThroughAnyQPOfThePD(t *testing.T) {
	f := newFx(t)
	mr, b := f.bindable(LocalWrite | MWBind)
	mw := NextKey(f.mw(MWType1))
	if err := f.tab.BindMW(f.pd, mw, mr, 0x10100, 256, RemoteRead|RemoteWrite); err != nil {
		t.Fatal(err)
	}
	for _, qpn := range []uint32{1, 77, 0xFFFFFF} {
		r, err := f.tab.Remote(f.pd, qpn, mw, 0x10100, 256, RemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 256)
		r.ReadAt(got, 0)
		r.Release()
		if !bytes.Equal(got, b.Bytes()[0x100:0x200]) {
			t.Fatal("window bytes wrong")
		}
	}
	wantKind(t, f.remote(1, mw, 0x10100, 8, RemoteAtomic), KindAccessDenied)
}

func TestMW1_NotInvalidatable(t *testing.T) {
	f := newFx(t)
	mr, _ := f.bindable(LocalWrite | MWBind)
	mw := f.mw(MWType1)
	f.tab.BindMW(f.pd, mw, mr, 0x10000, 64, RemoteRead)
	wantKind(t, f.tab.LocalInvalidate(f.pd, 1, mw), KindWrongType)
	wantKind(t, f.tab.RemoteInvalidate(f.pd, 1, mw), KindWrongType)
	if err := f.remote(1, mw, 0x10000, 8, RemoteRead); err != nil {
		t.Fatal(err)
	}
}

func TestMW1_ZeroBasedRefused(t *testing.T) {
	f := newFx(t)
	mr, _ := f.bindable(LocalWrite | MWBind)
	mw := f.mw(MWType1)
	err := f.tab.BindMW(f.pd, mw, mr, 0x10000, 64, RemoteRead|ZeroBased)
	wantKind(t, err, KindInvalidArg)
	wantClass(t, err, ClassMWBind)
}

func TestMW1_LengthZeroUnbinds(t *testing.T) {
	f := newFx(t)
	mr, _ := f.bindable(LocalWrite | MWBind)
	mw := f.mw(MWType1)
	f.tab.BindMW(f.pd, mw, mr, 0x10000, 64, RemoteRead)
	k2 := NextKey(mw)
	if err := f.tab.BindMW(f.pd, k2, 0xDEAD, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	wantKind(t, f.remote(1, k2, 0x10000, 8, RemoteRead), KindWrongState)
	if in, _ := f.tab.Query(mr); in.BoundMWs != 0 {
		t.Fatalf("MR still counts %d windows", in.BoundMWs)
	}
}

func TestMW1_RebindMovesTheWindow(t *testing.T) {
	f := newFx(t)
	mr1, _ := f.bindable(LocalWrite | MWBind)
	mr2, _ := f.bindable(LocalWrite | MWBind)
	mw := f.mw(MWType1)
	f.tab.BindMW(f.pd, mw, mr1, 0x10000, 64, RemoteRead)
	f.tab.BindMW(f.pd, NextKey(mw), mr1, 0x10040, 64, RemoteRead) // same MR
	if in, _ := f.tab.Query(mr1); in.BoundMWs != 1 {
		t.Fatalf("rebind to the same MR counted %d", in.BoundMWs)
	}
	if err := f.tab.BindMW(f.pd, NextKey(NextKey(mw)), mr2, 0x10000, 64, RemoteRead); err != nil {
		t.Fatal(err)
	}
	if err := f.tab.DeregMR(f.pd, mr1); err != nil {
		t.Fatalf("first MR still pinned: %v", err)
	}
	wantKind(t, f.tab.DeregMR(f.pd, mr2), KindBusy)
	wantKind(t, f.remote(1, mw, 0x10000, 8, RemoteRead), KindKeyMismatch)
}

func TestMW2B_StartsFree(t *testing.T) {
	f := newFx(t)
	mw := f.mw(MWType2B)
	if in, _ := f.tab.Query(mw); in.State != StateFree || in.Kind != ObjMW2B {
		t.Fatalf("%+v", in)
	}
	wantKind(t, f.remote(1, mw, 0, 8, RemoteRead), KindWrongState)
}

func TestMW2B_UsableOnlyThroughBoundQP(t *testing.T) {
	f := newFx(t)
	mr, _ := f.bindable(LocalWrite | MWBind)
	mw := NextKey(f.mw(MWType2B))
	if err := f.tab.BindMWWR(f.pd, 17, mw, mr, 0x10000, 128, RemoteRead|RemoteWrite); err != nil {
		t.Fatal(err)
	}
	if in, _ := f.tab.Query(mw); in.QPN != 17 || in.MRKey != mr {
		t.Fatalf("%+v", in)
	}
	if err := f.remote(17, mw, 0x10000, 128, RemoteWrite); err != nil {
		t.Fatal(err)
	}
	err := f.remote(18, mw, 0x10000, 128, RemoteWrite)
	wantKind(t, err, KindWrongQP)
	wantClass(t, err, ClassRemoteAccess)
}

func TestMW2B_BindRequiresFree(t *testing.T) {
	f := newFx(t)
	mr, _ := f.bindable(LocalWrite | MWBind)
	mw := f.mw(MWType2B)
	f.tab.BindMWWR(f.pd, 1, mw, mr, 0x10000, 128, RemoteRead)
	wantKind(t, f.tab.BindMWWR(f.pd, 1, NextKey(mw), mr, 0x10000, 64, RemoteRead), KindWrongState)
}

func TestMW2B_BindRequiresNonZeroLength(t *testing.T) {
	f := newFx(t)
	mr, _ := f.bindable(LocalWrite | MWBind)
	mw := f.mw(MWType2B)
	wantKind(t, f.tab.BindMWWR(f.pd, 1, mw, mr, 0x10000, 0, RemoteRead), KindInvalidArg)
}

func TestMW2B_VerbBindRefused(t *testing.T) {
	f := newFx(t)
	mr, _ := f.bindable(LocalWrite | MWBind)
	mw := f.mw(MWType2B)
	wantKind(t, f.tab.BindMW(f.pd, mw, mr, 0x10000, 64, RemoteRead), KindWrongType)
}

func TestMW2B_InvalidateOnlyThroughBoundQP(t *testing.T) {
	f := newFx(t)
	mr, _ := f.bindable(LocalWrite | MWBind)
	mw := f.mw(MWType2B)
	f.tab.BindMWWR(f.pd, 3, mw, mr, 0x10000, 64, RemoteRead)
	wantKind(t, f.tab.LocalInvalidate(f.pd, 4, mw), KindWrongQP)
	wantKind(t, f.tab.RemoteInvalidate(f.pd, 4, mw), KindWrongQP)
	wantKind(t, f.tab.RemoteInvalidate(f.newPD(), 3, mw), KindWrongPD)
	wantKind(t, f.tab.RemoteInvalidate(f.pd, 3, NextKey(mw)), KindKeyMismatch)
	if err := f.remote(3, mw, 0x10000, 8, RemoteRead); err != nil {
		t.Fatal("a refused invalidation changed the window")
	}
}

func TestMW2B_LocalInvalidateFreesAndAllowsRebind(t *testing.T) {
	f := newFx(t)
	mr, _ := f.bindable(LocalWrite | MWBind)
	mw := f.mw(MWType2B)
	f.tab.BindMWWR(f.pd, 3, mw, mr, 0x10000, 64, RemoteRead)
	r, _ := f.tab.Remote(f.pd, 3, mw, 0x10000, 8, RemoteRead)
	defer r.Release()
	if err := f.tab.LocalInvalidate(f.pd, 3, mw); err != nil {
		t.Fatal(err)
	}
	if !r.Changed() {
		t.Fatal("Ref missed the invalidation")
	}
	wantKind(t, f.remote(3, mw, 0x10000, 8, RemoteRead), KindWrongState)
	wantKind(t, f.tab.LocalInvalidate(f.pd, 3, mw), KindWrongState)
	if in, _ := f.tab.Query(mr); in.BoundMWs != 0 {
		t.Fatal("MR still counts the window")
	}
	k2 := NextKey(mw)
	if err := f.tab.BindMWWR(f.pd, 9, k2, mr, 0x10000, 64, RemoteRead); err != nil {
		t.Fatal(err)
	}
	wantKind(t, f.remote(9, mw, 0x10000, 8, RemoteRead), KindKeyMismatch)
}

func TestMW2B_RemoteInvalidateFrees(t *testing.T) {
	f := newFx(t)
	mr, _ := f.bindable(LocalWrite | MWBind)
	mw := f.mw(MWType2B)
	f.tab.BindMWWR(f.pd, 3, mw, mr, 0x10000, 64, RemoteRead)
	if err := f.tab.RemoteInvalidate(f.pd, 3, mw); err != nil {
		t.Fatal(err)
	}
	wantKind(t, f.remote(3, mw, 0x10000, 8, RemoteRead), KindWrongState)
}

func TestMW2B_DetachQPUnbindsItsWindows(t *testing.T) {
	f := newFx(t)
	mr, _ := f.bindable(LocalWrite | MWBind)
	a, b, c := f.mw(MWType2B), f.mw(MWType2B), f.mw(MWType2B)
	f.tab.BindMWWR(f.pd, 3, a, mr, 0x10000, 64, RemoteRead)
	f.tab.BindMWWR(f.pd, 3, b, mr, 0x10000, 64, RemoteRead)
	f.tab.BindMWWR(f.pd, 4, c, mr, 0x10000, 64, RemoteRead)
	if n := f.tab.DetachQP(3); n != 2 {
		t.Fatalf("DetachQP unbound %d", n)
	}
	wantKind(t, f.remote(3, a, 0x10000, 8, RemoteRead), KindWrongState)
	wantKind(t, f.remote(3, b, 0x10000, 8, RemoteRead), KindWrongState)
	if err := f.remote(4, c, 0x10000, 8, RemoteRead); err != nil {
		t.Fatal(err)
	}
	if in, _ := f.tab.Query(mr); in.BoundMWs != 1 {
		t.Fatalf("bound count %d", in.BoundMWs)
	}
	if f.tab.DetachQP(3) != 0 {
		t.Fatal("second detach found windows")
	}
}

func TestBindMW_RequiresSamePD(t *testing.T) {
	f := newFx(t)
	mr, _ := f.bindable(LocalWrite | MWBind)
	pd2 := f.newPD()
	mw := f.mw(MWType2B)
	// QP in another PD (C10-72).
	wantKind(t, f.tab.BindMWWR(pd2, 1, mw, mr, 0x10000, 64, RemoteRead), KindWrongPD)
	// MR in another PD than the window (rxe does not check).
	mw2, _ := f.tab.AllocMW(pd2, MWType2B)
	err := f.tab.BindMWWR(pd2, 1, mw2, mr, 0x10000, 64, RemoteRead)
	wantKind(t, err, KindWrongPD)
	wantClass(t, err, ClassMWBind)
}

func TestBindMW_MRNeedsMWBindAccess(t *testing.T) {
	f := newFx(t)
	mr, _ := f.bindable(LocalWrite | RemoteRead)
	wantKind(t, f.tab.BindMWWR(f.pd, 1, f.mw(MWType2B), mr, 0x10000, 64, RemoteRead), KindAccessDenied)
}

func TestBindMW_WritableWindowNeedsLocalWriteOnMR(t *testing.T) {
	f := newFx(t)
	mr, _ := f.bindable(MWBind)
	for _, a := range []Access{RemoteWrite, RemoteAtomic} {
		wantKind(t, f.tab.BindMWWR(f.pd, 1, f.mw(MWType2B), mr, 0x10000, 64, a), KindAccessDenied)
	}
	if err := f.tab.BindMWWR(f.pd, 1, f.mw(MWType2B), mr, 0x10000, 64, RemoteRead); err != nil {
		t.Fatal(err)
	}
}

func TestBindMW_FlushRightsNeedTheMRs(t *testing.T) {
	f := newFx(t)
	mr, _ := f.bindable(LocalWrite | MWBind)
	wantKind(t, f.tab.BindMWWR(f.pd, 1, f.mw(MWType2B), mr, 0x10000, 64, FlushGlobal), KindAccessDenied)
}

func TestBindMW_AccessMustBeWindowRights(t *testing.T) {
	f := newFx(t)
	mr, _ := f.bindable(LocalWrite | MWBind)
	for _, a := range []Access{LocalWrite, MWBind, 1 << 12} {
		wantKind(t, f.tab.BindMWWR(f.pd, 1, f.mw(MWType2B), mr, 0x10000, 64, a|RemoteRead), KindInvalidArg)
	}
}

func TestBindMW_RangeMustLieInsideMR(t *testing.T) {
	f := newFx(t)
	mr, _ := f.bindable(LocalWrite | MWBind) // [0x10000, 0x11000)
	for _, c := range []struct{ addr, n uint64 }{
		{0xFFFF, 2}, {0x10FFF, 2}, {0x10000, 0x1001}, {0x11000, 1}, {math.MaxUint64, 2}, {0x10001, math.MaxUint64},
	} {
		wantKind(t, f.tab.BindMWWR(f.pd, 1, f.mw(MWType2B), mr, c.addr, c.n, RemoteRead), KindOutOfRange)
		// Zero-based windows too (rxe only compares lengths there).
		wantKind(t, f.tab.BindMWWR(f.pd, 1, f.mw(MWType2B), mr, c.addr, c.n, RemoteRead|ZeroBased), KindOutOfRange)
	}
	if err := f.tab.BindMWWR(f.pd, 1, f.mw(MWType2B), mr, 0x10000, 0x1000, RemoteRead); err != nil {
		t.Fatal(err)
	}
}

func TestBindMW_ZeroBasedMRRefused(t *testing.T) {
	f := newFx(t)
	mr := f.reg(f.backing(256, 0), 0, 256, 0, LocalWrite|MWBind|ZeroBased)
	wantKind(t, f.tab.BindMWWR(f.pd, 1, f.mw(MWType2B), mr, 0, 64, RemoteRead), KindWrongType)
}

func TestBindMW_MRKeyMustMatchAll32Bits(t *testing.T) {
	f := newFx(t)
	mr, _ := f.bindable(LocalWrite | MWBind)
	mw := f.mw(MWType2B)
	wantKind(t, f.tab.BindMWWR(f.pd, 1, mw, NextKey(mr), 0x10000, 64, RemoteRead), KindKeyMismatch)
	wantKind(t, f.tab.BindMWWR(f.pd, 1, mw, mw, 0x10000, 64, RemoteRead), KindNoObject)
	wantKind(t, f.tab.BindMWWR(f.pd, 1, mr, mr, 0x10000, 64, RemoteRead), KindNoObject) // an MR key is not a window
}

func TestBindMW_MRMustBeValid(t *testing.T) {
	f := newFx(t)
	mr, _ := f.tab.AllocMR(f.pd, 1) // FREE
	wantKind(t, f.tab.BindMWWR(f.pd, 1, f.mw(MWType2B), mr, 0, 64, RemoteRead), KindWrongState)
}

func TestBindMW_NewKeyByteReplacesOld(t *testing.T) {
	f := newFx(t)
	mr, _ := f.bindable(LocalWrite | MWBind)
	mw := f.mw(MWType1)
	k := WithKeyByte(mw, KeyByte(mw)+9)
	f.tab.BindMW(f.pd, k, mr, 0x10000, 64, RemoteRead)
	wantKind(t, f.remote(1, mw, 0x10000, 8, RemoteRead), KindKeyMismatch)
	if err := f.remote(1, k, 0x10000, 8, RemoteRead); err != nil {
		t.Fatal(err)
	}
}

func TestRemote_WindowAccessHeldToTheWindow(t *testing.T) {
	f := newFx(t)
	mr, _ := f.bindable(LocalWrite | MWBind | RemoteRead)
	mw := f.mw(MWType1)
	f.tab.BindMW(f.pd, mw, mr, 0x10100, 0x100, RemoteRead)
	for _, c := range []struct{ va, n uint64 }{{0x100FF, 1}, {0x101FF, 2}, {0x10000, 8}, {0x10200, 1}} {
		wantKind(t, f.remote(1, mw, c.va, c.n, RemoteRead), KindOutOfRange)
	}
	if err := f.remote(1, mw, 0x101F8, 8, RemoteRead); err != nil {
		t.Fatal(err)
	}
}

func TestRemote_ZeroBasedWindowAddressedFromZero(t *testing.T) {
	f := newFx(t)
	mr, b := f.bindable(LocalWrite | MWBind)
	mw := f.mw(MWType2B)
	f.tab.BindMWWR(f.pd, 2, mw, mr, 0x10100, 0x100, RemoteRead|RemoteAtomic|ZeroBased)
	r, err := f.tab.Remote(f.pd, 2, mw, 0x10, 16, RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 16)
	r.ReadAt(got, 0)
	r.Release()
	if !bytes.Equal(got, b.Bytes()[0x110:0x120]) {
		t.Fatal("zero-based window offset wrong")
	}
	wantKind(t, f.remote(2, mw, 0x10110, 8, RemoteRead), KindOutOfRange)
	wantKind(t, f.remote(2, mw, 0xF9, 8, RemoteRead), KindOutOfRange)
	if err := f.remote(2, mw, 0xF8, 8, RemoteAtomic); err != nil {
		t.Fatal(err)
	}
}

func TestRemote_WindowRightsNotTheMRs(t *testing.T) {
	f := newFx(t)
	mr, _ := f.bindable(LocalWrite | MWBind | RemoteWrite) // no REMOTE_READ on the MR
	mw := f.mw(MWType1)
	f.tab.BindMW(f.pd, mw, mr, 0x10000, 64, RemoteRead)
	if err := f.remote(1, mw, 0x10000, 8, RemoteRead); err != nil {
		t.Fatal(err)
	}
	wantKind(t, f.remote(1, mw, 0x10000, 8, RemoteWrite), KindAccessDenied)
	wantKind(t, f.remote(1, mr, 0x10000, 8, RemoteRead), KindAccessDenied)
}

func TestDeallocMW_UnbindsItsMR(t *testing.T) {
	f := newFx(t)
	mr, _ := f.bindable(LocalWrite | MWBind)
	mw := f.mw(MWType2B)
	f.tab.BindMWWR(f.pd, 1, mw, mr, 0x10000, 64, RemoteRead)
	wantKind(t, f.tab.DeallocMW(f.newPD(), mw), KindWrongPD)
	if err := f.tab.DeallocMW(f.pd, mw); err != nil {
		t.Fatal(err)
	}
	wantKind(t, f.remote(1, mw, 0x10000, 8, RemoteRead), KindNoObject)
	if f.tab.DetachQP(1) != 0 {
		t.Fatal("deallocated window still listed on its QP")
	}
	if err := f.tab.DeregMR(f.pd, mr); err != nil {
		t.Fatal(err)
	}
	wantKind(t, f.tab.DeallocMW(f.pd, mw), KindNoObject)
}
