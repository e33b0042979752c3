package mem

import (
	"errors"
	"testing"
)

// fx is a table with one PD and helpers that fail the test on setup errors.
type fx struct {
	t   *testing.T
	tab *Table
	pd  PD
}

func newFx(t *testing.T) *fx {
	t.Helper()
	n := uint8(0)
	tab := NewTable(Config{KeyByte: func() uint8 { n += 37; return n }})
	pd, err := tab.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	return &fx{t: t, tab: tab, pd: pd}
}

// pattern is n bytes whose values identify their offset (and seed).
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ byte(i>>8) ^ seed
	}
	return b
}

func (f *fx) backing(n int, seed byte) *SliceBacking {
	return NewSliceBacking(pattern(n, seed))
}

func (f *fx) reg(b Backing, off, length, iova uint64, a Access) uint32 {
	f.t.Helper()
	k, err := f.tab.RegMR(f.pd, b, off, length, iova, a)
	if err != nil {
		f.t.Fatalf("RegMR: %v", err)
	}
	return k
}

func (f *fx) newPD() PD {
	f.t.Helper()
	pd, err := f.tab.AllocPD()
	if err != nil {
		f.t.Fatal(err)
	}
	return pd
}

// fastMR allocates a fast-reg MR and registers pages (page size ps) of b
// at iova with key byte kb.
func (f *fx) fastMR(b Backing, ps uint32, npages int, iova, length uint64, a Access) uint32 {
	f.t.Helper()
	k, err := f.tab.AllocMR(f.pd, npages)
	if err != nil {
		f.t.Fatal(err)
	}
	pages := make([]Page, npages)
	for i := range pages {
		pages[i] = Page{b, uint64(i) * uint64(ps)}
	}
	k = NextKey(k)
	if err := f.tab.FastReg(f.pd, k, pages, ps, iova, length, a); err != nil {
		f.t.Fatalf("FastReg: %v", err)
	}
	return k
}

func (f *fx) mw(typ MWType) uint32 {
	f.t.Helper()
	k, err := f.tab.AllocMW(f.pd, typ)
	if err != nil {
		f.t.Fatal(err)
	}
	return k
}

// remote resolves and immediately releases, returning only the error.
func (f *fx) remote(qpn, rkey uint32, va, length uint64, a Access) error {
	r, err := f.tab.Remote(f.pd, qpn, rkey, va, length, a)
	r.Release()
	return err
}

func wantKind(t *testing.T, err error, k ErrKind) {
	t.Helper()
	if k == KindNone {
		if err != nil {
			t.Fatalf("unexpected error %v", err)
		}
		return
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v, want kind %v", err, k)
	}
	if e.Kind != k {
		t.Fatalf("got %v (kind %v), want kind %v", err, e.Kind, k)
	}
}

func wantClass(t *testing.T, err error, c Class) {
	t.Helper()
	if got := ClassOf(err); got != c {
		t.Fatalf("got %v (class %v), want class %v", err, got, c)
	}
}
