package mem

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

const segPS = 512 // the page size of these tests: small, so pages are many

// segFx is a paged user MR over two backings, A and B: A's pages 1-2, B's
// page 0, A's page 3, B's pages 2-3, in that order. Its first byte is 100
// bytes into A's page 1 and its last 30 bytes short of B's page 3's end.
type segFx struct {
	*fx
	a, b *SliceBacking
	segs []Segment
	want []byte // the MR's bytes as they were, in IOVA order
	key  uint32
}

const (
	segIOVA  = 0x10000 + 100 // congruent to the first byte's offset, mod the page
	segFirst = 100
	segLen   = 6*segPS - segFirst - 30
)

func newSegFx(t *testing.T, access Access) *segFx {
	t.Helper()
	f := &segFx{fx: newFx(t)}
	f.a, f.b = f.backing(4*segPS, 1), f.backing(4*segPS, 2)
	f.segs = []Segment{{f.a, segPS, 2}, {f.b, 0, 1}, {f.a, 3 * segPS, 1}, {f.b, 2 * segPS, 2}}
	for _, s := range f.segs {
		b := s.Backing.Bytes()
		f.want = append(f.want, b[s.Offset:s.Offset+s.Pages*segPS]...)
	}
	f.want = f.want[segFirst : segFirst+segLen]
	k, err := f.tab.RegMRSegments(f.pd, f.segs, segPS, segFirst, segLen, segIOVA, access)
	if err != nil {
		t.Fatalf("RegMRSegments: %v", err)
	}
	f.key = k
	return f
}

// region is the registration's region, as lookups see it.
func (f *segFx) region() *region { return f.tab.mrs.get(KeyIndex(f.key)).snap.Load().reg }

// Reads and writes at every offset near a page boundary, through the lkey
// and the rkey, see the pages of both backings in the segments' order.
func TestRegMRSegments_LookupsAcrossBackings(t *testing.T) {
	f := newSegFx(t, LocalWrite|RemoteRead|RemoteWrite)
	if in, _ := f.tab.Query(f.key); in.Kind != ObjUserMR || in.Length != segLen || in.IOVA != segIOVA {
		t.Fatalf("query: %+v", in)
	}
	if r := f.region(); r.shift == 0 || len(r.segs) != 6 || len(r.backings) != 2 {
		t.Fatalf("region: shift %d, %d pages, %d backings; want paged, 6, 2", r.shift, len(r.segs), len(r.backings))
	}
	for _, off := range []uint64{0, segPS - segFirst - 3, 2*segPS - segFirst - 1, 3*segPS - segFirst - 8, segLen - 600} {
		for _, n := range []uint64{1, 8, 600} {
			if off+n > segLen {
				continue
			}
			ref, err := f.tab.Remote(f.pd, 1, f.key, segIOVA+off, n, RemoteRead)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, n)
			if _, err := ref.ReadAt(got, 0); err != nil || !bytes.Equal(got, f.want[off:off+n]) {
				t.Fatalf("read %d bytes at %d: %v\n got % x\nwant % x", n, off, err, got, f.want[off:off+n])
			}
			ref.Release()
		}
	}
	// One write over all six pages lands in the backings' pages.
	src := pattern(segLen, 9)
	ref, err := f.tab.Local(f.pd, f.key, segIOVA, segLen, LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ref.WriteAt(src, 0); err != nil {
		t.Fatal(err)
	}
	ref.Release()
	at := uint64(0) // offset in src of each page's first byte
	for i, s := range f.segs {
		for p := range s.Pages {
			page := s.Backing.Bytes()[s.Offset+p*segPS:][:segPS]
			lo, hi := uint64(0), uint64(segPS)
			if i == 0 && p == 0 {
				lo = segFirst
			}
			if i == len(f.segs)-1 && p == s.Pages-1 {
				hi = segPS - 30
			}
			if !bytes.Equal(page[lo:hi], src[at:at+hi-lo]) {
				t.Fatalf("segment %d page %d: bytes differ", i, p)
			}
			at += hi - lo
		}
	}
	// Nothing outside the MR changed: A before its first byte, B's page 1
	// (in no segment), B after its last byte.
	a, b := pattern(4*segPS, 1), pattern(4*segPS, 2)
	if !bytes.Equal(f.a.Bytes()[:segPS+segFirst], a[:segPS+segFirst]) ||
		!bytes.Equal(f.b.Bytes()[segPS:2*segPS], b[segPS:2*segPS]) || !bytes.Equal(f.b.Bytes()[4*segPS-30:], b[4*segPS-30:]) {
		t.Fatal("write reached memory outside the MR")
	}
}

// Lookups are held to [iova, iova+length).
func TestRegMRSegments_Bounds(t *testing.T) {
	f := newSegFx(t, LocalWrite|RemoteRead|RemoteWrite)
	wantKind(t, f.remote(1, f.key, segIOVA-1, 2, RemoteRead), KindOutOfRange)
	wantKind(t, f.remote(1, f.key, segIOVA+segLen-1, 2, RemoteRead), KindOutOfRange)
	wantKind(t, f.remote(1, f.key, segIOVA+segLen-1, 1, RemoteRead), KindNone)
	wantKind(t, f.remote(1, f.key, segIOVA, segLen+1, RemoteRead), KindOutOfRange)
	wantKind(t, f.remote(1, f.key, segIOVA, 1, RemoteAtomic), KindInvalidArg)
	_, err := f.tab.Local(f.pd, f.key, ^uint64(0), 2, 0)
	wantKind(t, err, KindOutOfRange)
}

// An atomic on a word at the start of a later page (B's page 0) changes
// that word.
func TestRegMRSegments_Atomic(t *testing.T) {
	f := newSegFx(t, LocalWrite|RemoteAtomic)
	off := uint64(2*segPS - segFirst) // B's page 0
	ref, err := f.tab.Remote(f.pd, 1, f.key, segIOVA+off, 8, RemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Release()
	old, err := ref.FetchAdd(0, 5)
	if err != nil {
		t.Fatal(err)
	}
	if got := binary.NativeEndian.Uint64(f.b.Bytes()); got != old+5 {
		t.Fatalf("fetch-add: %#x, then B's word is %#x", old, got)
	}
}

// Each distinct backing gives one reference, however many segments it
// has; they go back when the last access through the deregistered MR
// ends.
func TestRegMRSegments_DeregReleasesEveryBacking(t *testing.T) {
	f := newSegFx(t, LocalWrite)
	if f.a.Refs() != 2 || f.b.Refs() != 2 {
		t.Fatalf("refs A %d B %d, want 2 each (owner and region)", f.a.Refs(), f.b.Refs())
	}
	f.a.Close()
	f.b.Close()
	ref, err := f.tab.Local(f.pd, f.key, segIOVA, segLen, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.tab.DeregMR(f.pd, f.key); err != nil {
		t.Fatal(err)
	}
	if f.a.Released() || f.b.Released() {
		t.Fatal("backing released under a live access")
	}
	got := make([]byte, segLen)
	if _, err := ref.ReadAt(got, 0); err != nil || !bytes.Equal(got, f.want) {
		t.Fatalf("read after dereg: %v", err)
	}
	ref.Release()
	if !f.a.Released() || !f.b.Released() {
		t.Fatalf("after the last access: A released %v, B %v", f.a.Released(), f.b.Released())
	}
	_, err = f.tab.Local(f.pd, f.key, segIOVA, 1, 0)
	wantKind(t, err, KindNoObject)
}

// Segments that continue each other in one backing are registered as
// RegMR registers: one piece, no page list.
func TestRegMRSegments_ContiguousIsOnePiece(t *testing.T) {
	f := newFx(t)
	a := f.backing(8*segPS, 3)
	segs := []Segment{{a, segPS, 1}, {a, 2 * segPS, 3}, {a, 5 * segPS, 1}}
	if SegmentsHeap(segs, segPS) != 0 {
		t.Fatal("a contiguous run is charged a page list")
	}
	k, err := f.tab.RegMRSegments(f.pd, segs, segPS, 7, 5*segPS-7, 0x3, LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	r := f.tab.mrs.get(KeyIndex(k)).snap.Load().reg
	if r.shift != 0 || len(r.segs) != 1 || len(r.segs[0]) != 5*segPS-7 || &r.segs[0][0] != &a.Bytes()[segPS+7] {
		t.Fatalf("region: shift %d, %d pieces", r.shift, len(r.segs))
	}
	if a.Refs() != 2 {
		t.Fatalf("refs %d, want 2", a.Refs())
	}
	if err := f.tab.DeregMR(f.pd, k); err != nil || a.Refs() != 1 {
		t.Fatalf("dereg: %v, refs %d", err, a.Refs())
	}
	if SegmentsHeap([]Segment{{a, 0, 1}, {a, 2 * segPS, 1}}, segPS) == 0 {
		t.Fatal("a page list is not charged")
	}
}

// Every malformed registration is refused, and holds no reference.
func TestRegMRSegments_Invalid(t *testing.T) {
	f := newFx(t)
	a, b := f.backing(4*segPS, 1), f.backing(2*segPS, 2)
	two := []Segment{{a, 0, 1}, {b, 0, 1}}
	cases := []struct {
		name   string
		pd     PD
		segs   []Segment
		ps     uint32
		first  uint64
		length uint64
		iova   uint64
		access Access
		want   ErrKind
	}{
		{"no segments", f.pd, nil, segPS, 0, 1, 0, 0, KindInvalidArg},
		{"nil backing", f.pd, []Segment{{nil, 0, 1}}, segPS, 0, 1, 0, 0, KindInvalidArg},
		{"zero pages", f.pd, []Segment{{a, 0, 1}, {b, 0, 0}}, segPS, 0, segPS, 0, 0, KindInvalidArg},
		{"offset not page aligned", f.pd, []Segment{{a, 8, 1}, {b, 0, 1}}, segPS, 0, 2 * segPS, 0, 0, KindInvalidArg},
		{"past the backing", f.pd, []Segment{{a, 0, 1}, {b, segPS, 2}}, segPS, 0, 3 * segPS, 0, 0, KindOutOfRange},
		{"offset past the backing", f.pd, []Segment{{a, 0, 1}, {b, 4 * segPS, 1}}, segPS, 0, 2 * segPS, 0, 0, KindOutOfRange},
		{"pages wrap", f.pd, []Segment{{a, 0, 1}, {b, 0, 1 << 62}}, segPS, 0, 2 * segPS, 0, 0, KindOutOfRange},
		{"first past the page", f.pd, two, segPS, segPS, segPS, 0, 0, KindInvalidArg},
		{"length not covered", f.pd, two, segPS, 8, 2*segPS - 7, 8, 0, KindOutOfRange},
		{"a page to spare", f.pd, two, segPS, 0, segPS, 0, 0, KindOutOfRange},
		{"zero length", f.pd, []Segment{{a, 0, 1}}, segPS, 0, 0, 0, 0, KindInvalidArg},
		{"page size 4", f.pd, two, 4, 0, 8, 0, 0, KindInvalidArg},
		{"page size not a power of two", f.pd, two, 768, 0, 1536, 0, 0, KindInvalidArg},
		{"iova not congruent", f.pd, two, segPS, 8, 2*segPS - 8, 0x1004, 0, KindMisaligned},
		{"zero-based not congruent", f.pd, two, segPS, 4, 2*segPS - 4, 0, ZeroBased, KindMisaligned},
		{"iova wraps", f.pd, two, segPS, 0, 2 * segPS, ^uint64(0) - 8, 0, KindOutOfRange},
		{"remote write without local write", f.pd, two, segPS, 0, 2 * segPS, 0, RemoteWrite, KindInvalidArg},
		{"not persistent", f.pd, two, segPS, 0, 2 * segPS, 0, LocalWrite | FlushPersistent, KindInvalidArg},
		{"no such PD", f.pd + 7, two, segPS, 0, 2 * segPS, 0, 0, KindNoObject},
	}
	for _, c := range cases {
		_, err := f.tab.RegMRSegments(c.pd, c.segs, c.ps, c.first, c.length, c.iova, c.access)
		if err == nil {
			t.Fatalf("%s: registered", c.name)
		}
		var e *Error
		if !errors.As(err, &e) || e.Kind != c.want {
			t.Errorf("%s: %v, want kind %v", c.name, err, c.want)
		}
	}
	if a.Refs() != 1 || b.Refs() != 1 {
		t.Fatalf("refused registrations hold references: A %d, B %d", a.Refs(), b.Refs())
	}
	// A backing already gone refuses the registration and gives back the
	// reference taken on the one before it.
	b.Close()
	_, err := f.tab.RegMRSegments(f.pd, two, segPS, 0, 2*segPS, 0, 0)
	wantKind(t, err, KindInvalidArg)
	if a.Refs() != 1 {
		t.Fatalf("A's refs %d after a failed registration, want 1", a.Refs())
	}
}

// A paged user MR's rights can be changed in place; asking for
// FlushPersistent judges every backing, not only the first.
func TestRegMRSegments_ReregAccessPersistence(t *testing.T) {
	f := newFx(t)
	a, b := pmem{f.backing(segPS, 1)}, f.backing(segPS, 2)
	k, err := f.tab.RegMRSegments(f.pd, []Segment{{a, 0, 1}, {b, 0, 1}}, segPS, 0, 2*segPS, 0, LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	err = f.tab.ReregMR(f.pd, k, ReregAccess, Rereg{Access: LocalWrite | FlushPersistent})
	wantKind(t, err, KindInvalidArg)
	if err := f.tab.ReregMR(f.pd, k, ReregAccess, Rereg{Access: LocalWrite | RemoteRead}); err != nil {
		t.Fatal(err)
	}
	wantKind(t, f.remote(1, k, segPS-4, 8, RemoteRead), KindNone)
}
