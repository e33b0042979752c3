package mem

import (
	"bytes"
	"testing"
)

func TestAllocMR_StartsFree(t *testing.T) {
	f := newFx(t)
	mr, err := f.tab.AllocMR(f.pd, 8)
	if err != nil {
		t.Fatal(err)
	}
	if in, _ := f.tab.Query(mr); in.State != StateFree || in.Kind != ObjFastMR || in.MaxPages != 8 {
		t.Fatalf("%+v", in)
	}
	wantKind(t, f.remote(1, mr, 0, 8, RemoteRead), KindWrongState)
	_, err = f.tab.Local(f.pd, mr, 0, 8, 0)
	wantKind(t, err, KindWrongState)
}

func TestAllocMR_MaxPagesBounded(t *testing.T) {
	tab := NewTable(Config{MaxFastRegPages: 16})
	pd, _ := tab.AllocPD()
	for _, n := range []int{0, -1, 17} {
		_, err := tab.AllocMR(pd, n)
		wantKind(t, err, KindInvalidArg)
	}
	if _, err := tab.AllocMR(pd, 16); err != nil {
		t.Fatal(err)
	}
	_, err := tab.AllocMR(pd+1, 1)
	wantKind(t, err, KindNoObject)
}

func pagesOf(b Backing, ps uint64, idx ...int) []Page {
	p := make([]Page, len(idx))
	for i, x := range idx {
		p[i] = Page{b, uint64(x) * ps}
	}
	return p
}

func TestFastReg_RequiresFreeMRSamePD(t *testing.T) {
	f := newFx(t)
	b := f.backing(4096, 0)
	mr, _ := f.tab.AllocMR(f.pd, 4)
	pages := pagesOf(b, 512, 0, 1)
	err := f.tab.FastReg(f.newPD(), mr, pages, 512, 0x1000, 1024, LocalWrite)
	wantKind(t, err, KindWrongPD)
	wantClass(t, err, ClassLocalQPOperation)
	if err := f.tab.FastReg(f.pd, mr, pages, 512, 0x1000, 1024, LocalWrite); err != nil {
		t.Fatal(err)
	}
	// VALID now: a second REG_MR without LOCAL_INV is refused.
	err = f.tab.FastReg(f.pd, NextKey(mr), pages, 512, 0x1000, 1024, LocalWrite)
	wantKind(t, err, KindWrongState)
	wantClass(t, err, ClassLocalQPOperation)
	if err := f.tab.LocalInvalidate(f.pd, 1, mr); err != nil {
		t.Fatal(err)
	}
	if err := f.tab.FastReg(f.pd, NextKey(mr), pages, 512, 0x1000, 1024, LocalWrite); err != nil {
		t.Fatal(err)
	}
}

func TestFastReg_KeyIndexMustNameTheMR(t *testing.T) {
	f := newFx(t)
	b := f.backing(4096, 0)
	mr, _ := f.tab.AllocMR(f.pd, 4)
	pages := pagesOf(b, 512, 0)
	wantKind(t, f.tab.FastReg(f.pd, MakeKey(KeyIndex(mr)+1, 0), pages, 512, 0, 512, 0), KindNoObject)
	wantKind(t, f.tab.FastReg(f.pd, MakeKey(MWIndexMin, 0), pages, 512, 0, 512, 0), KindNoObject)
	wantKind(t, f.tab.FastReg(f.pd, 0, pages, 512, 0, 512, 0), KindNoObject)
}

func TestFastReg_OnlyOnAllocMRRegions(t *testing.T) {
	f := newFx(t)
	b := f.backing(4096, 0)
	user := f.reg(b, 0, 4096, 0, LocalWrite)
	f.tab.DeregMR(f.pd, user)
	user = f.reg(b, 0, 4096, 0, LocalWrite)
	wantKind(t, f.tab.FastReg(f.pd, user, pagesOf(b, 512, 0), 512, 0, 512, 0), KindWrongType)
}

func TestFastReg_PageListMustFitMaxPages(t *testing.T) {
	f := newFx(t)
	b := f.backing(4096, 0)
	mr, _ := f.tab.AllocMR(f.pd, 2)
	wantKind(t, f.tab.FastReg(f.pd, mr, pagesOf(b, 512, 0, 1, 2), 512, 0, 1536, 0), KindInvalidArg)
	wantKind(t, f.tab.FastReg(f.pd, mr, nil, 512, 0, 1, 0), KindInvalidArg)
}

func TestFastReg_PageSizeMustBePowerOfTwoAtLeast8(t *testing.T) {
	f := newFx(t)
	b := f.backing(4096, 0)
	mr, _ := f.tab.AllocMR(f.pd, 4)
	for _, ps := range []uint32{0, 4, 12, 768, 1 << 31} {
		wantKind(t, f.tab.FastReg(f.pd, mr, pagesOf(b, 0, 0), ps, 0, 4, 0), KindInvalidArg)
	}
}

func TestFastReg_LengthMustFitPageListFromFirstByteOffset(t *testing.T) {
	f := newFx(t)
	b := f.backing(4096, 0)
	mr, _ := f.tab.AllocMR(f.pd, 4)
	pages := pagesOf(b, 512, 0, 1)
	// iova 0x1100 starts 256 bytes into the first page: 768 bytes fit.
	wantKind(t, f.tab.FastReg(f.pd, mr, pages, 512, 0x1100, 769, 0), KindOutOfRange)
	wantKind(t, f.tab.FastReg(f.pd, mr, pages, 512, 0x1100, 0, 0), KindInvalidArg)
	if err := f.tab.FastReg(f.pd, mr, pages, 512, 0x1100, 768, 0); err != nil {
		t.Fatal(err)
	}
}

func TestFastReg_PagesMustLieInsideBacking(t *testing.T) {
	f := newFx(t)
	b := f.backing(1000, 0)
	mr, _ := f.tab.AllocMR(f.pd, 4)
	wantKind(t, f.tab.FastReg(f.pd, mr, []Page{{b, 512}}, 512, 0, 512, 0), KindOutOfRange)
	wantKind(t, f.tab.FastReg(f.pd, mr, []Page{{b, 1 << 63}}, 512, 0, 512, 0), KindOutOfRange)
	wantKind(t, f.tab.FastReg(f.pd, mr, []Page{{nil, 0}}, 512, 0, 512, 0), KindInvalidArg)
	c := f.backing(512, 0)
	c.Close()
	wantKind(t, f.tab.FastReg(f.pd, mr, []Page{{b, 0}, {c, 0}}, 512, 0, 1024, 0), KindInvalidArg)
	if b.Refs() != 1 {
		t.Fatalf("failed REG_MR leaked references: %d", b.Refs())
	}
}

func TestFastReg_RemoteWriteWithoutLocalWriteRejected(t *testing.T) {
	f := newFx(t)
	b := f.backing(512, 0)
	mr, _ := f.tab.AllocMR(f.pd, 1)
	wantKind(t, f.tab.FastReg(f.pd, mr, pagesOf(b, 512, 0), 512, 0, 512, RemoteWrite), KindInvalidArg)
	wantKind(t, f.tab.FastReg(f.pd, mr, pagesOf(b, 512, 0), 512, 0x10, 64, ZeroBased), KindInvalidArg)
}

func TestFastReg_NonContiguousPagesMapInListOrder(t *testing.T) {
	f := newFx(t)
	b := f.backing(8*256, 3)
	mr, _ := f.tab.AllocMR(f.pd, 4)
	// Pages 5, 2, 7 of b, region starting 100 bytes into page 5.
	pages := pagesOf(b, 256, 5, 2, 7)
	key := WithKeyByte(mr, 0xC3)
	if err := f.tab.FastReg(f.pd, key, pages, 256, 0x7000+100, 600, LocalWrite|RemoteRead|RemoteWrite); err != nil {
		t.Fatal(err)
	}
	want := append(append(append([]byte{}, b.Bytes()[5*256+100:6*256]...), b.Bytes()[2*256:3*256]...), b.Bytes()[7*256:7*256+600-156-256]...)
	r, err := f.tab.Remote(f.pd, 1, key, 0x7000+100, 600, RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 600)
	r.ReadAt(got, 0)
	r.Release()
	if !bytes.Equal(got, want) {
		t.Fatal("bytes do not follow the page list")
	}
	// A write straddling the page 5 → page 2 boundary.
	r, _ = f.tab.Remote(f.pd, 1, key, 0x7000+250, 12, RemoteWrite)
	r.WriteAt([]byte("ABCDEFGHIJKL"), 0)
	r.Release()
	if string(b.Bytes()[5*256+250:6*256]) != "ABCDEF" || string(b.Bytes()[2*256:2*256+6]) != "GHIJKL" {
		t.Fatal("straddling write misplaced")
	}
}

func TestFastReg_NewKeyByteRetiresOldKey(t *testing.T) {
	f := newFx(t)
	b := f.backing(512, 0)
	mr, _ := f.tab.AllocMR(f.pd, 1)
	k1 := NextKey(mr)
	f.tab.FastReg(f.pd, k1, pagesOf(b, 512, 0), 512, 0, 512, RemoteRead)
	f.tab.LocalInvalidate(f.pd, 1, k1)
	k2 := NextKey(k1)
	if err := f.tab.FastReg(f.pd, k2, pagesOf(b, 512, 0), 512, 0, 512, RemoteRead); err != nil {
		t.Fatal(err)
	}
	wantKind(t, f.remote(1, k1, 0, 8, RemoteRead), KindKeyMismatch)
	wantKind(t, f.remote(1, mr, 0, 8, RemoteRead), KindKeyMismatch)
	if err := f.remote(1, k2, 0, 8, RemoteRead); err != nil {
		t.Fatal(err)
	}
}

func TestFastReg_ReleasesPagesOnlyAfterInvalidateAndLastRef(t *testing.T) {
	f := newFx(t)
	b1, b2 := f.backing(512, 0), f.backing(512, 0)
	mr, _ := f.tab.AllocMR(f.pd, 3)
	k := NextKey(mr)
	f.tab.FastReg(f.pd, k, []Page{{b1, 0}, {b1, 256}, {b2, 0}}, 256, 0, 768, RemoteRead)
	if b1.Refs() != 2 || b2.Refs() != 2 {
		t.Fatalf("refs %d %d: one per run of pages expected", b1.Refs(), b2.Refs())
	}
	r, _ := f.tab.Remote(f.pd, 1, k, 0, 768, RemoteRead)
	b1.Close()
	b2.Close()
	f.tab.LocalInvalidate(f.pd, 1, k)
	if b1.Released() || b2.Released() {
		t.Fatal("pages released while an access holds them")
	}
	r.Release()
	if !b1.Released() || !b2.Released() {
		t.Fatal("pages kept after the last access")
	}
}

func TestLocalInvalidate_MakesMRFree(t *testing.T) {
	f := newFx(t)
	k := f.fastMR(f.backing(512, 0), 512, 1, 0, 512, RemoteRead)
	if err := f.tab.LocalInvalidate(f.pd, 1, k); err != nil {
		t.Fatal(err)
	}
	if in, _ := f.tab.Query(k); in.State != StateFree || in.Key != k {
		t.Fatalf("%+v", in)
	}
	wantKind(t, f.remote(1, k, 0, 8, RemoteRead), KindWrongState)
}

func TestLocalInvalidate_KeyMustMatchAll32Bits(t *testing.T) {
	f := newFx(t)
	k := f.fastMR(f.backing(512, 0), 512, 1, 0, 512, RemoteRead)
	for bit := range 8 {
		err := f.tab.LocalInvalidate(f.pd, 1, k^1<<bit)
		wantKind(t, err, KindKeyMismatch)
		wantClass(t, err, ClassLocalQPOperation)
	}
	for bit := 8; bit < 32; bit++ {
		if f.tab.LocalInvalidate(f.pd, 1, k^1<<bit) == nil {
			t.Fatalf("flipping bit %d still invalidated", bit)
		}
	}
	if in, _ := f.tab.Query(k); in.State != StateValid {
		t.Fatal("a wrong key invalidated the MR")
	}
}

func TestLocalInvalidate_WrongPDRefused(t *testing.T) {
	f := newFx(t)
	k := f.fastMR(f.backing(512, 0), 512, 1, 0, 512, RemoteRead)
	wantKind(t, f.tab.LocalInvalidate(f.newPD(), 1, k), KindWrongPD)
}

func TestLocalInvalidate_UserMRRefused(t *testing.T) {
	f := newFx(t)
	k := f.reg(f.backing(64, 0), 0, 64, 0, RemoteRead)
	wantKind(t, f.tab.LocalInvalidate(f.pd, 1, k), KindWrongType)
}

func TestLocalInvalidate_BusyWhileMWBound(t *testing.T) {
	f := newFx(t)
	k := f.fastMR(f.backing(512, 0), 512, 1, 0, 512, LocalWrite|MWBind)
	mw := f.mw(MWType2B)
	if err := f.tab.BindMWWR(f.pd, 5, NextKey(mw), k, 0, 64, RemoteRead); err != nil {
		t.Fatal(err)
	}
	wantKind(t, f.tab.LocalInvalidate(f.pd, 5, k), KindBusy)
	wantKind(t, f.tab.RemoteInvalidate(f.pd, 5, k), KindBusy)
	if err := f.tab.LocalInvalidate(f.pd, 5, NextKey(mw)); err != nil {
		t.Fatal(err)
	}
	if err := f.tab.LocalInvalidate(f.pd, 5, k); err != nil {
		t.Fatal(err)
	}
}

func TestLocalInvalidate_FreeMRWithCurrentKeyIsNoOp(t *testing.T) {
	f := newFx(t)
	k := f.fastMR(f.backing(512, 0), 512, 1, 0, 512, RemoteRead)
	f.tab.LocalInvalidate(f.pd, 1, k)
	g, _ := f.tab.Query(k)
	if err := f.tab.LocalInvalidate(f.pd, 1, k); err != nil {
		t.Fatal(err)
	}
	if g2, _ := f.tab.Query(k); g2.Gen != g.Gen {
		t.Fatal("no-op invalidation changed the generation")
	}
	wantKind(t, f.tab.LocalInvalidate(f.pd, 1, NextKey(k)), KindKeyMismatch)
}

func TestRemoteInvalidate_MakesMRFreeWithInvalidateRKeyClass(t *testing.T) {
	f := newFx(t)
	k := f.fastMR(f.backing(512, 0), 512, 1, 0, 512, RemoteRead)
	err := f.tab.RemoteInvalidate(f.pd, 1, NextKey(k))
	wantKind(t, err, KindKeyMismatch)
	wantClass(t, err, ClassInvalidateRKey)
	if err := f.tab.RemoteInvalidate(f.pd, 1, k); err != nil {
		t.Fatal(err)
	}
	wantKind(t, f.remote(1, k, 0, 8, RemoteRead), KindWrongState)
	wantKind(t, f.tab.RemoteInvalidate(f.pd, 1, 0), KindNoObject)
}
