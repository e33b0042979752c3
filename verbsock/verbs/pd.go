package verbs

import (
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/ibv"
	"github.com/vrnic/vrnicd/verbsock/shm"
	"golang.org/x/sys/unix"
)

// PD is a protection domain (ibv_pd).
type PD struct {
	d *Device
	h uint32
}

// Device is the device the PD belongs to.
func (pd *PD) Device() *Device { return pd.d }

// Dealloc frees the PD (ibv_dealloc_pd); EBUSY while objects remain in it.
func (pd *PD) Dealloc() error {
	_, err := pd.d.call(verbsock.OpDeallocPD, &verbsock.HandleReq{Handle: pd.h}, nil, &verbsock.Empty{})
	return err
}

// Buffer is memory shared with the daemon: a sealed memfd mapped in this
// process and in the daemon. Register it (PD.RegMR) to use it in work
// requests; the device then reads and writes it directly.
type Buffer struct {
	d      *Device
	h      uint32
	b      []byte
	mu     sync.Mutex
	closed bool
}

// AllocBuffer allocates size bytes (rounded up to the page size) of shared
// memory. It belongs to the device, not to pd; it is on PD as in the
// ibverbs programs that allocate and register together.
func (pd *PD) AllocBuffer(size int) (*Buffer, error) { return pd.d.AllocBuffer(size) }

// AllocBuffer allocates size bytes (rounded up to the page size) of shared
// memory.
func (d *Device) AllocBuffer(size int) (*Buffer, error) {
	if size <= 0 {
		return nil, verr(verbsock.OpMapMem, syscall.EINVAL, "buffer of %d bytes", size)
	}
	size = (size + d.pageSize - 1) / d.pageSize * d.pageSize
	fd, err := shm.Create("vrnic-buf", size)
	if err != nil {
		return nil, verr(verbsock.OpMapMem, syscall.ENOMEM, "%v", err)
	}
	defer unix.Close(fd)
	b, err := shm.MapFD(fd, size)
	if err != nil {
		return nil, verr(verbsock.OpMapMem, syscall.ENOMEM, "%v", err)
	}
	var r verbsock.MapMemResp
	if _, err := d.call(verbsock.OpMapMem, &verbsock.MapMemReq{}, []int{fd}, &r); err != nil {
		unix.Munmap(b)
		return nil, err
	}
	return &Buffer{d: d, h: r.Mem, b: b}, nil
}

// Bytes is the memory.
func (b *Buffer) Bytes() []byte { return b.b }

// Len is the buffer's size.
func (b *Buffer) Len() int { return len(b.b) }

// Addr is the address of the buffer in this process: the default IOVA of
// an MR over it, as with ibv_reg_mr.
func (b *Buffer) Addr() uint64 { return uint64(uintptr(unsafe.Pointer(&b.b[0]))) }

// Close unmaps the buffer here and drops the daemon's handle on it (the
// daemon unmaps it once no MR uses it). Deregister its MRs first: the
// memory is gone from this process when Close returns.
func (b *Buffer) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	_, err := b.d.call(verbsock.OpUnmapMem, &verbsock.HandleReq{Handle: b.h}, nil, &verbsock.Empty{})
	unix.Munmap(b.b)
	if err == ErrClosed {
		err = nil
	}
	return err
}

// MR is a memory region (ibv_mr).
type MR struct {
	d      *Device
	h      uint32
	pd     *PD
	pieces [][]byte // the region's memory here, in IOVA order (segPieces); none for a fast-reg MR
	iova   uint64
	length uint64
	key    atomic.Uint32 // lkey == rkey; REG_MR changes its key byte
}

// RegMR registers all of buf with its address as IOVA (ibv_reg_mr).
func (pd *PD) RegMR(buf *Buffer, access Access) (*MR, error) {
	return pd.RegMRRange(buf, 0, uint64(buf.Len()), buf.Addr(), access)
}

// RegMRRange registers length bytes of buf from offset, addressed from iova
// (ibv_reg_mr_iova; with AccessZeroBased iova must be 0).
func (pd *PD) RegMRRange(buf *Buffer, offset, length, iova uint64, access Access) (*MR, error) {
	var r verbsock.RegMRResp
	if _, err := pd.d.call(verbsock.OpRegMR, &verbsock.RegMRReq{PD: pd.h, Mem: buf.h, Offset: offset, Length: length,
		IOVA: iova, Access: uint32(access)}, nil, &r); err != nil {
		return nil, err
	}
	return pd.newMR(&r, piece(buf, offset, length), iova, length), nil
}

// newMR files a registered MR whose memory here is pieces.
func (pd *PD) newMR(r *verbsock.RegMRResp, pieces [][]byte, iova, length uint64) *MR {
	mr := &MR{d: pd.d, h: r.MR, pd: pd, pieces: pieces, iova: iova, length: length}
	mr.key.Store(r.LKey)
	pd.d.mrs.Store(ibv.KeyIndex(r.LKey), mr)
	return mr
}

// SegRef is one segment of PD.RegMRSegs: Pages whole pages of Buffer from
// byte Offset, a multiple of the page size.
type SegRef struct {
	Buffer *Buffer
	Offset uint64
	Pages  uint64
}

// RegMRSegs registers one MR over the pages of several buffers, in the
// order of segs (at most verbsock.MaxRegMRSegs), as a C ibv_reg_mr over
// memory that several memfds back: its first byte is firstOffset bytes
// into the first segment, it is length bytes long, addressed from iova.
// The segments must hold exactly the pages those bytes touch. Bytes is nil
// for such an MR unless its segments are one range of one buffer.
func (pd *PD) RegMRSegs(segs []SegRef, firstOffset, length, iova uint64, access Access) (*MR, error) {
	req := &verbsock.RegMRSegsReq{PD: pd.h, Access: uint32(access), IOVA: iova, Length: length,
		FirstOffset: firstOffset, NumSegs: uint32(len(segs))}
	if len(segs) > len(req.Segs) {
		return nil, verr(verbsock.OpRegMRSegs, syscall.EINVAL, "%d segments, at most %d", len(segs), len(req.Segs))
	}
	for i, s := range segs {
		if s.Buffer == nil {
			return nil, verr(verbsock.OpRegMRSegs, syscall.EINVAL, "segment %d has no buffer", i)
		}
		req.Segs[i] = verbsock.RegMRSeg{Mem: s.Buffer.h, Offset: s.Offset, Pages: s.Pages}
	}
	var r verbsock.RegMRResp
	if _, err := pd.d.call(verbsock.OpRegMRSegs, req, nil, &r); err != nil {
		return nil, err
	}
	return pd.newMR(&r, pd.d.segPieces(segs, firstOffset, length), iova, length), nil
}

// piece is length bytes of buf from offset, nil if buf has no such bytes:
// the daemon checked the range against the memory object the buffer's
// handle names on this connection, which is another one if buf is another
// device's.
func piece(buf *Buffer, offset, length uint64) [][]byte {
	if offset > uint64(len(buf.b)) || length > uint64(len(buf.b))-offset {
		return nil
	}
	return [][]byte{buf.b[offset : offset+length]}
}

// segPieces is where the bytes of an MR over segs lie here, in order:
// one piece per run of segments that continue each other in one buffer;
// nil if a segment is not in its buffer (see piece).
func (d *Device) segPieces(segs []SegRef, first, length uint64) [][]byte {
	ps := uint64(d.pageSize)
	var out [][]byte
	var prev *Buffer
	var end uint64 // where in prev the last piece ends
	for _, s := range segs {
		lo, n := s.Offset+first, min(s.Pages*ps-first, length)
		if s.Offset > uint64(len(s.Buffer.b)) || s.Pages > (uint64(len(s.Buffer.b))-s.Offset)/ps {
			return nil
		}
		if s.Buffer == prev && lo == end {
			out[len(out)-1] = out[len(out)-1][:uint64(len(out[len(out)-1]))+n]
		} else {
			out = append(out, s.Buffer.b[lo:lo+n])
		}
		prev, end, first, length = s.Buffer, lo+n, 0, length-n
	}
	return out
}

// AllocMR makes a fast-registration MR for up to maxPages pages
// (ib_alloc_mr): it is FREE until a REG_MR work request registers it.
func (pd *PD) AllocMR(maxPages int) (*MR, error) {
	if maxPages <= 0 {
		return nil, verr(verbsock.OpAllocMR, syscall.EINVAL, "%d pages", maxPages)
	}
	var r verbsock.RegMRResp
	if _, err := pd.d.call(verbsock.OpAllocMR, &verbsock.AllocMRReq{PD: pd.h, MaxPages: uint32(maxPages)}, nil, &r); err != nil {
		return nil, err
	}
	mr := &MR{d: pd.d, h: r.MR, pd: pd}
	mr.key.Store(r.LKey)
	return mr, nil
}

// LKey is the local key.
func (mr *MR) LKey() uint32 { return mr.key.Load() }

// RKey is the remote key (the same value, as in rxe).
func (mr *MR) RKey() uint32 { return mr.key.Load() }

// Addr is the region's first IOVA.
func (mr *MR) Addr() uint64 { return mr.iova }

// Len is the region's length.
func (mr *MR) Len() uint64 { return mr.length }

// Bytes is the region's memory in this process: nil for a fast-reg MR, and
// for an MR over several buffers (RegMRSegs).
func (mr *MR) Bytes() []byte {
	if len(mr.pieces) != 1 {
		return nil
	}
	return mr.pieces[0]
}

// SGE is the scatter/gather element for length bytes at offset off of the
// region.
func (mr *MR) SGE(off, length uint64) SGE {
	return SGE{Addr: mr.iova + off, Length: uint32(length), LKey: mr.LKey()}
}

// Dereg deregisters the MR (ibv_dereg_mr); EBUSY while windows are bound.
func (mr *MR) Dereg() error {
	if _, err := mr.d.call(verbsock.OpDeregMR, &verbsock.HandleReq{Handle: mr.h}, nil, &verbsock.Empty{}); err != nil {
		return err
	}
	mr.d.mrs.CompareAndDelete(ibv.KeyIndex(mr.LKey()), mr)
	return nil
}

// gather copies the bytes an SGE names from this process's view of its MR
// (inline sends without Inline data).
func (d *Device) gather(dst []byte, s SGE) ([]byte, bool) {
	mr := d.lookupMR(s.LKey)
	if mr == nil || mr.pieces == nil || s.LKey != mr.LKey() {
		return dst, false
	}
	off := s.Addr - mr.iova
	if s.Addr < mr.iova || off > mr.length || uint64(s.Length) > mr.length-off {
		return dst, false
	}
	n := uint64(s.Length)
	for _, p := range mr.pieces {
		if n == 0 {
			break
		}
		if off >= uint64(len(p)) {
			off -= uint64(len(p))
			continue
		}
		k := min(uint64(len(p))-off, n)
		dst = append(dst, p[off:off+k]...)
		off, n = 0, n-k
	}
	return dst, true
}

// MW is a memory window (ibv_mw).
type MW struct {
	d    *Device
	h    uint32
	pd   *PD
	typ  MWType
	rkey atomic.Uint32
}

// AllocMW makes a memory window (ibv_alloc_mw).
func (pd *PD) AllocMW(typ MWType) (*MW, error) {
	var r verbsock.AllocMWResp
	if _, err := pd.d.call(verbsock.OpAllocMW, &verbsock.AllocMWReq{PD: pd.h, Type: uint32(typ)}, nil, &r); err != nil {
		return nil, err
	}
	mw := &MW{d: pd.d, h: r.MW, pd: pd, typ: typ}
	mw.rkey.Store(r.RKey)
	return mw, nil
}

// RKey is the window's current rkey.
func (mw *MW) RKey() uint32 { return mw.rkey.Load() }

// Type is the window's type.
func (mw *MW) Type() MWType { return mw.typ }

// Bind binds a type 1 window to length bytes at addr of mr with the given
// remote rights, synchronously (length 0 unbinds), and gives it a new rkey.
// Type 2B windows are bound with a BIND_MW work request (QP.PostSend).
func (mw *MW) Bind(mr *MR, addr, length uint64, access Access) error {
	req := &verbsock.BindMWReq{MW: mw.h, Addr: addr, Length: length, Access: uint32(access)}
	if mr != nil {
		req.MR = mr.h
	}
	var r verbsock.BindMWResp
	if _, err := mw.d.call(verbsock.OpBindMW, req, nil, &r); err != nil {
		return err
	}
	mw.rkey.Store(r.RKey)
	return nil
}

// Dealloc frees the window (ibv_dealloc_mw).
func (mw *MW) Dealloc() error {
	_, err := mw.d.call(verbsock.OpDeallocMW, &verbsock.HandleReq{Handle: mw.h}, nil, &verbsock.Empty{})
	return err
}

// AH is an address handle (ibv_ah) for UD sends.
type AH struct {
	d  *Device
	h  uint32
	pd *PD
}

// CreateAH makes an address handle (ibv_create_ah). The daemon fills the
// SGID from SGIDIndex.
func (pd *PD) CreateAH(attr AHAttr) (*AH, error) {
	var r verbsock.CreateAHResp
	av := verbsock.AVToWire(&attr)
	if _, err := pd.d.call(verbsock.OpCreateAH, &verbsock.CreateAHReq{PD: pd.h, AV: av}, nil, &r); err != nil {
		return nil, err
	}
	return &AH{d: pd.d, h: r.AH, pd: pd}, nil
}

// Destroy frees the address handle (ibv_destroy_ah); sends already posted
// keep their destination.
func (ah *AH) Destroy() error {
	_, err := ah.d.call(verbsock.OpDestroyAH, &verbsock.HandleReq{Handle: ah.h}, nil, &verbsock.Empty{})
	return err
}
