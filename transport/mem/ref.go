package mem

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"unsafe"
)

// region is the bytes behind an MR: one contiguous segment for a user MR,
// or one segment per page for a fast-reg MR and a user MR over several
// backings (RegMRSegments). It is shared by the snapshots
// of one registration (rereg without a new translation keeps it) and holds
// one reference on each backing it lists.
type region struct {
	refs     refCount
	segs     [][]byte
	shift    uint8  // log2 page size; 0 means segs[0] is the whole region
	first    uint64 // paged: offset of the region's first byte in segs[0]
	backings []Backing
}

// persistent reports whether every backing is persistent memory.
func (r *region) persistent() bool {
	for _, b := range r.backings {
		if !isPersistent(b) {
			return false
		}
	}
	return true
}

func (r *region) release() {
	if !r.refs.drop("mem: region released more often than acquired") {
		return
	}
	for _, b := range r.backings {
		b.Release()
	}
}

// span is the memory from region offset off to the end of its segment.
func (r *region) span(off uint64) []byte {
	if r.shift == 0 {
		return r.segs[0][off:]
	}
	p := r.first + off
	return r.segs[p>>r.shift][p&(1<<r.shift-1):]
}

func (r *region) copyOut(dst []byte, off uint64) {
	for len(dst) > 0 {
		n := copy(dst, r.span(off))
		dst = dst[n:]
		off += uint64(n)
	}
}

func (r *region) copyIn(src []byte, off uint64) {
	for len(src) > 0 {
		n := copy(r.span(off), src)
		src = src[n:]
		off += uint64(n)
	}
}

// Ref is a resolved, pinned view of length bytes of an MR (directly or
// through an MW), returned by Table.Remote and Table.Local. It stays usable
// for a whole multi-packet message without another lookup: its memory stays
// mapped until Release even if the consumer invalidates or deregisters the
// MR meanwhile (use Changed to notice that). Offsets are relative to the
// start of the access (the VA that was looked up).
//
// A Ref belongs to one goroutine. Do not copy it after use; Release it once.
// The zero Ref is the empty access (a zero-length READ/WRITE or SGE).
type Ref struct {
	s     *snap   // pinned snapshot: the MR's, or the MW's (which pins its MR's)
	reg   *region // the MR's bytes
	base  uint64  // region offset of the first byte
	iova  uint64  // MR IOVA of the first byte: atomic alignment is judged on it
	n     uint64
	op    Op
	write bool
}

// Len is the length that was resolved.
func (r *Ref) Len() uint64 { return r.n }

// Writable reports whether the access allows WriteAt and atomics.
func (r *Ref) Writable() bool { return r.write }

// Key is the key the access was resolved through (the rkey or lkey; an MW's
// rkey for window accesses), 0 for the empty Ref.
func (r *Ref) Key() uint32 {
	if r.s == nil {
		return 0
	}
	return r.s.key
}

// MRKey is the key of the MR whose memory is accessed: Key for direct MR
// accesses, the bound MR's for window accesses.
func (r *Ref) MRKey() uint32 {
	if r.s == nil {
		return 0
	}
	if r.s.parent != nil {
		return r.s.parent.key
	}
	return r.s.key
}

// Gen is the generation of the object named by Key when it was looked up.
func (r *Ref) Gen() uint64 {
	if r.s == nil {
		return 0
	}
	return r.s.gen
}

// MRGen is the generation of the MR behind the access when it was looked up.
func (r *Ref) MRGen() uint64 {
	if r.s == nil {
		return 0
	}
	if r.s.parent != nil {
		return r.s.parent.gen
	}
	return r.s.gen
}

// Changed reports whether the object (and, for a window, its MR) has
// changed state since the lookup: re-registered, invalidated, rebound,
// deregistered. It costs one or two atomic loads.
func (r *Ref) Changed() bool {
	s := r.s
	if s == nil {
		return false
	}
	if s.ent.snap.Load() != s {
		return true
	}
	if p := s.parent; p != nil && p.ent.snap.Load() != p {
		return true
	}
	return false
}

// Release unpins the memory. The Ref becomes the empty Ref; a second
// Release does nothing.
func (r *Ref) Release() {
	if r.s != nil {
		r.s.release()
	}
	*r = Ref{}
}

func (r *Ref) bounds(off int64, n int) error {
	if off < 0 || uint64(off) > r.n || uint64(n) > r.n-uint64(off) {
		return mkerr(r.op, KindOutOfRange)
	}
	return nil
}

// ReadAt copies len(p) bytes at off into p: all of them, or none and an error.
func (r *Ref) ReadAt(p []byte, off int64) (int, error) {
	if err := r.bounds(off, len(p)); err != nil {
		return 0, err
	}
	if len(p) > 0 {
		r.reg.copyOut(p, r.base+uint64(off))
	}
	return len(p), nil
}

// WriteAt copies p to off: all of it, or nothing and an error.
func (r *Ref) WriteAt(p []byte, off int64) (int, error) {
	if !r.write {
		return 0, mkerr(r.op, KindAccessDenied)
	}
	if err := r.bounds(off, len(p)); err != nil {
		return 0, err
	}
	if len(p) > 0 {
		r.reg.copyIn(p, r.base+uint64(off))
	}
	return len(p), nil
}

// unalignedMu serialises atomics whose IOVA is aligned but whose memory is
// not (an MR registered with an IOVA not congruent to its address mod 8).
// A given address is always either aligned or not, so such operations never
// race with the sync/atomic path on the same word.
var unalignedMu sync.Mutex

// word finds the 8-byte atomic target at off: a *uint64 if the memory is
// aligned, else the 8 bytes.
func (r *Ref) word(off int64) (*uint64, []byte, error) {
	if !r.write {
		return nil, nil, mkerr(r.op, KindAccessDenied)
	}
	if err := r.bounds(off, 8); err != nil {
		return nil, nil, err
	}
	if (r.iova+uint64(off))&7 != 0 {
		return nil, nil, mkerr(r.op, KindMisaligned)
	}
	// Pages are a power of two of at least 8 bytes, the IOVA is aligned,
	// and a page list's first byte is congruent to its IOVA mod 8 (FastReg
	// takes it from the IOVA, RegMRSegments checks it), so the word lies
	// within one segment.
	b := r.reg.span(r.base + uint64(off))[:8]
	p := unsafe.Pointer(unsafe.SliceData(b))
	if uintptr(p)&7 == 0 {
		return (*uint64)(p), nil, nil
	}
	return nil, b, nil
}

// CompareSwap is IBA's CmpSwap on the word at off, in native byte order as
// rxe does: if it equals compare it becomes swap. It returns the original
// value.
func (r *Ref) CompareSwap(off int64, compare, swap uint64) (uint64, error) {
	p, b, err := r.word(off)
	if err != nil {
		return 0, err
	}
	if p != nil {
		for {
			old := atomic.LoadUint64(p)
			if old != compare || atomic.CompareAndSwapUint64(p, old, swap) {
				return old, nil
			}
		}
	}
	unalignedMu.Lock()
	defer unalignedMu.Unlock()
	old := binary.NativeEndian.Uint64(b)
	if old == compare {
		binary.NativeEndian.PutUint64(b, swap)
	}
	return old, nil
}

// FetchAdd is IBA's FetchAdd on the word at off; it returns the original value.
func (r *Ref) FetchAdd(off int64, add uint64) (uint64, error) {
	p, b, err := r.word(off)
	if err != nil {
		return 0, err
	}
	if p != nil {
		return atomic.AddUint64(p, add) - add, nil
	}
	unalignedMu.Lock()
	defer unalignedMu.Unlock()
	old := binary.NativeEndian.Uint64(b)
	binary.NativeEndian.PutUint64(b, old+add)
	return old, nil
}

// AtomicWrite stores v in the word at off as one write (RDMA ATOMIC_WRITE).
func (r *Ref) AtomicWrite(off int64, v uint64) error {
	p, b, err := r.word(off)
	if err != nil {
		return err
	}
	if p != nil {
		atomic.StoreUint64(p, v)
		return nil
	}
	unalignedMu.Lock()
	defer unalignedMu.Unlock()
	binary.NativeEndian.PutUint64(b, v)
	return nil
}

// AtomicRead loads the word at off as one read (requires a writable Ref,
// like the other atomics; for replays and tests).
func (r *Ref) AtomicRead(off int64) (uint64, error) {
	p, b, err := r.word(off)
	if err != nil {
		return 0, err
	}
	if p != nil {
		return atomic.LoadUint64(p), nil
	}
	unalignedMu.Lock()
	defer unalignedMu.Unlock()
	return binary.NativeEndian.Uint64(b), nil
}
