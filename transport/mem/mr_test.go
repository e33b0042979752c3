package mem

import (
	"bytes"
	"math"
	"syscall"
	"testing"
)

func TestRegMR_RemoteWriteWithoutLocalWriteIsEINVAL(t *testing.T) {
	f := newFx(t)
	_, err := f.tab.RegMR(f.pd, f.backing(64, 0), 0, 64, 0x1000, RemoteWrite|RemoteRead)
	wantKind(t, err, KindInvalidArg)
	if !err.(*Error).Is(syscall.EINVAL) {
		t.Fatal("want EINVAL")
	}
}

func TestRegMR_RemoteAtomicWithoutLocalWriteIsEINVAL(t *testing.T) {
	f := newFx(t)
	_, err := f.tab.RegMR(f.pd, f.backing(64, 0), 0, 64, 0x1000, RemoteAtomic)
	wantKind(t, err, KindInvalidArg)
}

func TestRegMR_UnknownAccessBitsAreEINVAL(t *testing.T) {
	f := newFx(t)
	_, err := f.tab.RegMR(f.pd, f.backing(64, 0), 0, 64, 0, LocalWrite|1<<11)
	wantKind(t, err, KindInvalidArg)
}

func TestRegMR_OnDemandIsEOPNOTSUPP(t *testing.T) {
	f := newFx(t)
	_, err := f.tab.RegMR(f.pd, f.backing(64, 0), 0, 64, 0, LocalWrite|OnDemand)
	wantKind(t, err, KindNotSupported)
}

func TestRegMR_OptionalAccessBitsAreAcceptedAndDropped(t *testing.T) {
	f := newFx(t)
	k := f.reg(f.backing(64, 0), 0, 64, 0, RemoteRead|RelaxedOrdering|1<<25)
	in, _ := f.tab.Query(k)
	if in.Access != RemoteRead {
		t.Fatalf("access %v", in.Access)
	}
}

func TestRegMR_ZeroLengthIsEINVAL(t *testing.T) {
	f := newFx(t)
	_, err := f.tab.RegMR(f.pd, f.backing(64, 0), 0, 0, 0, LocalWrite)
	wantKind(t, err, KindInvalidArg)
}

func TestRegMR_RangeMustLieInsideBacking(t *testing.T) {
	f := newFx(t)
	b := f.backing(64, 0)
	for _, c := range []struct{ off, n uint64 }{{0, 65}, {1, 64}, {64, 1}, {65, 0 + 1}, {math.MaxUint64, 2}, {2, math.MaxUint64}} {
		_, err := f.tab.RegMR(f.pd, b, c.off, c.n, 0, LocalWrite)
		wantKind(t, err, KindOutOfRange)
	}
	if b.Refs() != 1 {
		t.Fatalf("failed registrations leaked backing references: %d", b.Refs())
	}
	f.reg(b, 63, 1, 0, 0)
}

func TestRegMR_IovaPlusLengthOverflowIsRejected(t *testing.T) {
	f := newFx(t)
	_, err := f.tab.RegMR(f.pd, f.backing(64, 0), 0, 64, math.MaxUint64-62, LocalWrite)
	wantKind(t, err, KindOutOfRange)
	// Ending exactly at 2^64 is representable.
	k := f.reg(f.backing(64, 0), 0, 64, math.MaxUint64-63, RemoteRead)
	if err := f.remote(1, k, math.MaxUint64-7, 8, RemoteRead); err != nil {
		t.Fatal(err)
	}
}

func TestRegMR_UnknownPDIsEINVAL(t *testing.T) {
	f := newFx(t)
	_, err := f.tab.RegMR(f.pd+100, f.backing(64, 0), 0, 64, 0, 0)
	wantKind(t, err, KindNoObject)
}

func TestRegMR_ReleasedBackingIsRefused(t *testing.T) {
	f := newFx(t)
	b := f.backing(64, 0)
	b.Close()
	_, err := f.tab.RegMR(f.pd, b, 0, 64, 0, 0)
	wantKind(t, err, KindInvalidArg)
}

type pmem struct{ *SliceBacking }

func (pmem) Persistent() bool { return true }

func TestRegMR_FlushPersistentNeedsPersistentMemory(t *testing.T) {
	f := newFx(t)
	_, err := f.tab.RegMR(f.pd, f.backing(64, 0), 0, 64, 0, RemoteRead|FlushPersistent)
	wantKind(t, err, KindInvalidArg)
	k := f.reg(pmem{f.backing(64, 0)}, 0, 64, 0, RemoteRead|FlushPersistent|FlushGlobal)
	if err := f.remote(1, k, 0, 64, FlushPersistent); err != nil {
		t.Fatal(err)
	}
}

func TestRegMR_KeyHasMRIndexAndRandomKeyByte(t *testing.T) {
	n := 0
	bytesOut := []uint8{0x11, 0x22, 0x22, 0x33}
	tab := NewTable(Config{KeyByte: func() uint8 { b := bytesOut[n%len(bytesOut)]; n++; return b }})
	pd, _ := tab.AllocPD()
	b := NewSliceBacking(make([]byte, 64))
	k1, _ := tab.RegMR(pd, b, 0, 64, 0, 0)
	if !IsMRKey(k1) || KeyByte(k1) != 0x11 {
		t.Fatalf("key %#x", k1)
	}
	k2, _ := tab.RegMR(pd, b, 0, 64, 0, 0)
	if KeyIndex(k2) == KeyIndex(k1) || KeyByte(k2) != 0x22 {
		t.Fatalf("second key %#x", k2)
	}
}

func TestRegMR_ReusedIndexNeverRepeatsPreviousKeyByte(t *testing.T) {
	tab := NewTable(Config{KeyByte: func() uint8 { return 0x42 }})
	tab.mrIdx = newIndexAlloc(7, 7, 1) // one index, so it comes straight back
	pd, _ := tab.AllocPD()
	b := NewSliceBacking(make([]byte, 64))
	k1, _ := tab.RegMR(pd, b, 0, 64, 0, RemoteRead)
	if err := tab.DeregMR(pd, k1); err != nil {
		t.Fatal(err)
	}
	k2, err := tab.RegMR(pd, b, 0, 64, 0, RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	if KeyIndex(k1) != 7 || KeyIndex(k2) != 7 || k1 == k2 {
		t.Fatalf("keys %#x, %#x: stale key names the new MR", k1, k2)
	}
	r, err := tab.Remote(pd, 1, k1, 0, 8, RemoteRead)
	wantKind(t, err, KindKeyMismatch)
	r.Release()
}

func TestRegMR_IndicesAreCyclic(t *testing.T) {
	f := newFx(t)
	b := f.backing(64, 0)
	k1 := f.reg(b, 0, 64, 0, 0)
	if err := f.tab.DeregMR(f.pd, k1); err != nil {
		t.Fatal(err)
	}
	k2 := f.reg(b, 0, 64, 0, 0)
	if KeyIndex(k2) == KeyIndex(k1) {
		t.Fatal("freed index handed out again at once")
	}
}

func TestRegMR_TableFullIsENOMEM(t *testing.T) {
	tab := NewTable(Config{MaxMR: 2})
	pd, _ := tab.AllocPD()
	b := NewSliceBacking(make([]byte, 64))
	tab.RegMR(pd, b, 0, 64, 0, 0)
	tab.AllocMR(pd, 1)
	_, err := tab.RegMR(pd, b, 0, 64, 0, 0)
	wantKind(t, err, KindNoSpace)
	_, err = tab.AllocMR(pd, 1)
	wantKind(t, err, KindNoSpace)
	if b.Refs() != 2 {
		t.Fatalf("refs %d", b.Refs())
	}
}

func TestDeregMR_BusyWhileMWBound(t *testing.T) {
	f := newFx(t)
	mr := f.reg(f.backing(256, 0), 0, 256, 0x1000, LocalWrite|MWBind)
	mw := f.mw(MWType1)
	if err := f.tab.BindMW(f.pd, NextKey(mw), mr, 0x1000, 64, RemoteRead); err != nil {
		t.Fatal(err)
	}
	err := f.tab.DeregMR(f.pd, mr)
	wantKind(t, err, KindBusy)
	if !err.(*Error).Is(syscall.EBUSY) {
		t.Fatal("want EBUSY")
	}
	if err := f.tab.BindMW(f.pd, NextKey(NextKey(mw)), 0, 0, 0, 0); err != nil { // unbind
		t.Fatal(err)
	}
	if err := f.tab.DeregMR(f.pd, mr); err != nil {
		t.Fatal(err)
	}
}

func TestDeregMR_OnlyThroughItsPD(t *testing.T) {
	f := newFx(t)
	mr := f.reg(f.backing(64, 0), 0, 64, 0, 0)
	wantKind(t, f.tab.DeregMR(f.newPD(), mr), KindWrongPD)
	wantKind(t, f.tab.DeregMR(f.pd, MakeKey(KeyIndex(mr)+1, 0)), KindNoObject)
	wantKind(t, f.tab.DeregMR(f.pd, MakeKey(MWIndexMin, 0)), KindNoObject)
	if err := f.tab.DeregMR(f.pd, mr); err != nil {
		t.Fatal(err)
	}
	wantKind(t, f.tab.DeregMR(f.pd, mr), KindNoObject)
}

func TestDeregMR_KeyStopsWorking(t *testing.T) {
	f := newFx(t)
	mr := f.reg(f.backing(64, 0), 0, 64, 0, LocalWrite|RemoteRead)
	f.tab.DeregMR(f.pd, mr)
	wantKind(t, f.remote(1, mr, 0, 8, RemoteRead), KindNoObject)
	_, err := f.tab.Local(f.pd, mr, 0, 8, 0)
	wantKind(t, err, KindNoObject)
}

func TestDeregMR_MemoryStaysMappedUntilRefReleased(t *testing.T) {
	f := newFx(t)
	b := f.backing(64, 9)
	mr := f.reg(b, 0, 64, 0, LocalWrite|RemoteRead|RemoteWrite)
	b.Close() // the owner (verbsock) wants to unmap
	r, err := f.tab.Remote(f.pd, 1, mr, 8, 16, RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.tab.DeregMR(f.pd, mr); err != nil {
		t.Fatal(err)
	}
	if b.Released() {
		t.Fatal("backing unmapped while an access is in progress")
	}
	if !r.Changed() {
		t.Fatal("Ref did not see the deregistration")
	}
	if _, err := r.WriteAt([]byte("still mapped"), 0); err != nil {
		t.Fatal(err)
	}
	r.Release()
	if !b.Released() {
		t.Fatal("backing not released after the last access")
	}
	if !bytes.Equal(b.Bytes()[8:20], []byte("still mapped")) {
		t.Fatal("write lost")
	}
}

func TestReregMR_AccessChangeTakesEffectKeepsKeyNewGeneration(t *testing.T) {
	f := newFx(t)
	mr := f.reg(f.backing(64, 0), 0, 64, 0, RemoteRead)
	in0, _ := f.tab.Query(mr)
	r, _ := f.tab.Remote(f.pd, 1, mr, 0, 8, RemoteRead)
	defer r.Release()
	if err := f.tab.ReregMR(f.pd, mr, ReregAccess, Rereg{Access: LocalWrite}); err != nil {
		t.Fatal(err)
	}
	in1, _ := f.tab.Query(mr)
	if in1.Key != mr || in1.Gen <= in0.Gen || in1.Access != LocalWrite {
		t.Fatalf("after rereg: %+v (before %+v)", in1, in0)
	}
	wantKind(t, f.remote(1, mr, 0, 8, RemoteRead), KindAccessDenied)
	if !r.Changed() {
		t.Fatal("Ref did not see the rereg")
	}
	var buf [8]byte
	if _, err := r.ReadAt(buf[:], 0); err != nil { // the old pin still reads
		t.Fatal(err)
	}
}

func TestReregMR_RemoteWriteWithoutLocalWriteIsEINVAL(t *testing.T) {
	f := newFx(t)
	mr := f.reg(f.backing(64, 0), 0, 64, 0, RemoteRead)
	wantKind(t, f.tab.ReregMR(f.pd, mr, ReregAccess, Rereg{Access: RemoteWrite}), KindInvalidArg)
	wantKind(t, f.tab.ReregMR(f.pd, mr, 0, Rereg{}), KindInvalidArg)
	wantKind(t, f.tab.ReregMR(f.pd, mr, 8, Rereg{}), KindInvalidArg)
}

func TestReregMR_MovesToNewPD(t *testing.T) {
	f := newFx(t)
	pd2 := f.newPD()
	mr := f.reg(f.backing(64, 0), 0, 64, 0, RemoteRead)
	wantKind(t, f.tab.ReregMR(f.pd, mr, ReregPD, Rereg{PD: 999}), KindNoObject)
	if err := f.tab.ReregMR(f.pd, mr, ReregPD, Rereg{PD: pd2}); err != nil {
		t.Fatal(err)
	}
	wantKind(t, f.remote(1, mr, 0, 8, RemoteRead), KindWrongPD)
	r, err := f.tab.Remote(pd2, 1, mr, 0, 8, RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	r.Release()
	if err := f.tab.DeallocPD(f.pd); err != nil {
		t.Fatalf("old PD still counted: %v", err)
	}
	wantKind(t, f.tab.DeallocPD(pd2), KindBusy)
}

func TestReregMR_TranslationReplacesMemoryAndReleasesOld(t *testing.T) {
	f := newFx(t)
	old, nw := f.backing(64, 1), f.backing(128, 2)
	mr := f.reg(old, 0, 64, 0x1000, RemoteRead)
	old.Close()
	wantKind(t, f.tab.ReregMR(f.pd, mr, ReregTranslation, Rereg{Backing: nw, Offset: 100, Length: 64, IOVA: 0}), KindOutOfRange)
	if err := f.tab.ReregMR(f.pd, mr, ReregTranslation, Rereg{Backing: nw, Offset: 64, Length: 64, IOVA: 0x2000}); err != nil {
		t.Fatal(err)
	}
	if !old.Released() {
		t.Fatal("old backing kept")
	}
	wantKind(t, f.remote(1, mr, 0x1000, 8, RemoteRead), KindOutOfRange)
	r, err := f.tab.Remote(f.pd, 1, mr, 0x2000, 64, RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 64)
	r.ReadAt(got, 0)
	r.Release()
	if !bytes.Equal(got, nw.Bytes()[64:]) {
		t.Fatal("wrong bytes after rereg")
	}
}

func TestReregMR_ZeroBasedAccessNeedsIovaZero(t *testing.T) {
	f := newFx(t)
	mr := f.reg(f.backing(64, 0), 0, 64, 0x1000, RemoteRead)
	wantKind(t, f.tab.ReregMR(f.pd, mr, ReregAccess, Rereg{Access: RemoteRead | ZeroBased}), KindInvalidArg)
}

func TestReregMR_BusyWhileMWBound(t *testing.T) {
	f := newFx(t)
	mr := f.reg(f.backing(64, 0), 0, 64, 0, LocalWrite|MWBind)
	mw := f.mw(MWType1)
	if err := f.tab.BindMW(f.pd, mw, mr, 0, 64, RemoteRead); err != nil {
		t.Fatal(err)
	}
	wantKind(t, f.tab.ReregMR(f.pd, mr, ReregAccess, Rereg{Access: LocalWrite}), KindBusy)
}

func TestReregMR_FastRegMRRefused(t *testing.T) {
	f := newFx(t)
	mr, _ := f.tab.AllocMR(f.pd, 4)
	wantKind(t, f.tab.ReregMR(f.pd, mr, ReregAccess, Rereg{Access: LocalWrite}), KindWrongType)
}

func TestDeallocPD_BusyWhileObjectsRemain(t *testing.T) {
	f := newFx(t)
	mr := f.reg(f.backing(64, 0), 0, 64, 0, 0)
	wantKind(t, f.tab.DeallocPD(f.pd), KindBusy)
	f.tab.DeregMR(f.pd, mr)
	mw := f.mw(MWType2B)
	wantKind(t, f.tab.DeallocPD(f.pd), KindBusy)
	f.tab.DeallocMW(f.pd, mw)
	if err := f.tab.HoldPD(f.pd); err != nil {
		t.Fatal(err)
	}
	wantKind(t, f.tab.DeallocPD(f.pd), KindBusy)
	f.tab.ReleasePD(f.pd)
	wantKind(t, f.tab.ReleasePD(f.pd), KindNoObject)
	if err := f.tab.DeallocPD(f.pd); err != nil {
		t.Fatal(err)
	}
	wantKind(t, f.tab.DeallocPD(f.pd), KindNoObject)
	_, err := f.tab.RegMR(f.pd, f.backing(8, 0), 0, 8, 0, 0)
	wantKind(t, err, KindNoObject)
}

func TestAllocPD_HandlesAreNotReused(t *testing.T) {
	f := newFx(t)
	f.tab.DeallocPD(f.pd)
	if pd := f.newPD(); pd == f.pd || pd == 0 {
		t.Fatalf("PD %d reused", pd)
	}
}
