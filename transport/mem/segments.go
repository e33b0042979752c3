package mem

import (
	"math/bits"
	"slices"
	"unsafe"
)

// Segment is a run of whole pages of a Backing: Pages pages from byte
// Offset, a multiple of the page size. A user MR over memory that several
// backings hold (a C program's pages, each range in a memfd of its own) is
// a list of segments that follow each other in the MR's address space.
type Segment struct {
	Backing Backing
	Offset  uint64
	Pages   uint64
}

// RegMRSegments registers a user MR over the pages of segs, in order: its
// first byte is at offset first of segs[0]'s first page and it is length
// bytes long, addressed from iova as RegMR's. The segments must hold exactly
// the pages those bytes touch. When they are one contiguous run of one
// backing the MR is registered as RegMR registers it, in one piece;
// otherwise its region is a page list, which takes one reference on each
// distinct backing. A page-list MR's IOVA must be congruent to its first
// byte's offset modulo 8, so that an aligned atomic target never straddles
// two pages. The rights and results are RegMR's.
func (t *Table) RegMRSegments(pd PD, segs []Segment, pageSize uint32, first, length, iova uint64, access Access) (uint32, error) {
	access, k := checkMRAccess(access)
	if k != KindNone {
		return 0, mkerr(OpVerb, k)
	}
	if k := checkTranslation(nil, length, iova, access); k != KindNone {
		return 0, mkerr(OpVerb, k)
	}
	if k := checkSegments(segs, pageSize, first, length, access); k != KindNone {
		return 0, mkerr(OpVerb, k)
	}
	runs := coalesce(segs, uint64(pageSize))
	if len(runs) > 1 && (iova-first)&7 != 0 {
		return 0, mkerr(OpVerb, KindMisaligned)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pds[pd]
	if p == nil {
		return 0, mkerr(OpVerb, KindNoObject)
	}
	var reg *region
	if len(runs) == 1 {
		reg, k = userRegion(runs[0].Backing, runs[0].Offset+first, length)
	} else {
		reg, k = pagedRegion(runs, pageSize, first)
	}
	if k != KindNone {
		return 0, mkerr(OpVerb, k)
	}
	return t.createUserMR(p, pd, reg, access, iova, length)
}

// checkSegments validates a segment list against its backings and the
// bytes [first, first+length) it must cover, with no page to spare.
func checkSegments(segs []Segment, pageSize uint32, first, length uint64, access Access) ErrKind {
	ps := uint64(pageSize)
	if pageSize < minPageSize || pageSize > maxPageSize || pageSize&(pageSize-1) != 0 || len(segs) == 0 || first >= ps {
		return KindInvalidArg
	}
	var pages uint64
	for _, s := range segs {
		if s.Backing == nil || s.Pages == 0 || s.Offset&(ps-1) != 0 {
			return KindInvalidArg
		}
		if n := uint64(len(s.Backing.Bytes())); s.Offset > n || s.Pages > (n-s.Offset)/ps {
			return KindOutOfRange
		}
		if access&FlushPersistent != 0 && !isPersistent(s.Backing) {
			return KindInvalidArg
		}
		var carry uint64
		if pages, carry = bits.Add64(pages, s.Pages, 0); carry != 0 {
			return KindOutOfRange
		}
	}
	// The last byte must fall in the last page: fewer pages leave bytes
	// out, more would pin memory nothing can address.
	if hi, lo := bits.Mul64(pages, ps); hi != 0 || lo-first < length || lo-first-length >= ps {
		return KindOutOfRange
	}
	return KindNone
}

// coalesce merges segments that continue each other in one backing.
func coalesce(segs []Segment, ps uint64) []Segment {
	runs := []Segment{segs[0]}
	for _, s := range segs[1:] {
		last := &runs[len(runs)-1]
		if s.Backing == last.Backing && s.Offset == last.Offset+last.Pages*ps {
			last.Pages += s.Pages
			continue
		}
		runs = append(runs, s)
	}
	return runs
}

// SegmentsHeap is the memory a registration over segs keeps beside the
// pages themselves, for callers that charge for it: nothing when they are
// one contiguous run, else a slice per page and the list of backings.
func SegmentsHeap(segs []Segment, pageSize uint32) uint64 {
	if len(segs) == 0 || len(coalesce(segs, uint64(pageSize))) == 1 {
		return 0
	}
	var pages uint64
	for _, s := range segs {
		pages += s.Pages
	}
	return pages*uint64(unsafe.Sizeof([]byte(nil))) + uint64(len(segs))*uint64(unsafe.Sizeof(Backing(nil)))
}

// pagedRegion builds the page-list region of a user MR over runs (already
// checked), taking one reference on each distinct backing.
func pagedRegion(runs []Segment, pageSize uint32, first uint64) (*region, ErrKind) {
	ps := uint64(pageSize)
	var pages uint64
	for _, s := range runs {
		pages += s.Pages
	}
	reg := &region{segs: make([][]byte, 0, pages), shift: uint8(bits.TrailingZeros32(pageSize)), first: first}
	for _, s := range runs {
		if !slices.Contains(reg.backings, s.Backing) {
			if !s.Backing.Acquire() {
				for _, b := range reg.backings {
					b.Release()
				}
				return nil, KindInvalidArg
			}
			reg.backings = append(reg.backings, s.Backing)
		}
		m := s.Backing.Bytes()
		for off := s.Offset; off < s.Offset+s.Pages*ps; off += ps {
			reg.segs = append(reg.segs, m[off:off+ps:off+ps])
		}
	}
	reg.refs.Store(1)
	return reg, KindNone
}
