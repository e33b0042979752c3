package server_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"syscall"
	"testing"

	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/server"
	"github.com/vrnic/vrnicd/verbsock/shm"
	"golang.org/x/sys/unix"
)

// segsClient is a raw client with a PD and two mapped memory objects of
// four pages, A and B, which it also maps itself to see what lands.
type segsClient struct {
	*raw
	pd       uint32
	a, b     uint32 // memory handles
	aMem     []byte
	bMem     []byte
	mappings int64 // MaxMemBytes used with only A and B mapped
}

func newSegsClient(t *testing.T, limits verbsock.Limits) (*segsClient, *server.Server, *nictest.Host) {
	t.Helper()
	s, h := newServer(t, limits)
	c := &segsClient{raw: dialRaw(t, s, true)}
	var pd verbsock.AllocPDResp
	if err := c.do(verbsock.OpAllocPD, &verbsock.Empty{}, nil, &pd); err != nil {
		t.Fatal(err)
	}
	c.pd = pd.PD
	for _, m := range []struct {
		h *uint32
		b *[]byte
	}{{&c.a, &c.aMem}, {&c.b, &c.bMem}} {
		fd := memfd(t, 4*shm.PageSize)
		var mm verbsock.MapMemResp
		if err := c.do(verbsock.OpMapMem, &verbsock.MapMemReq{}, []int{fd}, &mm); err != nil {
			t.Fatal(err)
		}
		b, err := shm.MapFD(fd, 4*shm.PageSize)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Munmap(b) })
		*m.h, *m.b = mm.Mem, b
	}
	c.mappings = int64(s.Used(uint32(os.Getuid())).MaxMemBytes)
	return c, s, h
}

// segsReq is a reg_mr_segs request of c's PD.
func (c *segsClient) segsReq(first, length, iova uint64, access uint32, segs ...verbsock.RegMRSeg) *verbsock.RegMRSegsReq {
	r := &verbsock.RegMRSegsReq{PD: c.pd, Access: access, IOVA: iova, Length: length, FirstOffset: first, NumSegs: uint32(len(segs))}
	copy(r.Segs[:], segs)
	return r
}

func seg(m uint32, page, pages int) verbsock.RegMRSeg {
	return verbsock.RegMRSeg{Mem: m, Offset: uint64(page * shm.PageSize), Pages: uint64(pages)}
}

// Every malformed reg_mr_segs is refused with its errno, charges nothing,
// and leaves the connection working.
func TestRegMRSegsInvalid(t *testing.T) {
	c, s, _ := newSegsClient(t, verbsock.Limits{MaxMRBytes: uint64(6 * shm.PageSize)})
	ps := uint64(shm.PageSize)
	const rw = 1 | 2 // LOCAL_WRITE | REMOTE_WRITE
	ab := []verbsock.RegMRSeg{seg(c.a, 0, 1), seg(c.b, 0, 1)}
	tooMany := c.segsReq(0, 2*ps, 0, rw, ab...)
	tooMany.NumSegs = verbsock.MaxRegMRSegs + 1
	stray := c.segsReq(0, 2*ps, 0, rw, ab...)
	stray.Segs[5] = seg(c.a, 2, 1)
	badPD := c.segsReq(0, 2*ps, 0, rw, ab...)
	badPD.PD = 99
	cases := []struct {
		name  string
		req   *verbsock.RegMRSegsReq
		errno syscall.Errno
	}{
		{"unknown memory handle", c.segsReq(0, 2*ps, 0, rw, seg(c.a, 0, 1), seg(99, 0, 1)), syscall.ENOENT},
		{"memory handle 0", c.segsReq(0, ps, 0, rw, seg(0, 0, 1)), syscall.ENOENT},
		{"a PD's handle as memory", c.segsReq(0, ps, 0, rw, seg(c.pd, 0, 1)), syscall.ENOENT},
		{"unknown PD", badPD, syscall.ENOENT},
		{"no segments", c.segsReq(0, ps, 0, rw), syscall.EINVAL},
		{"more segments than slots", tooMany, syscall.EINVAL},
		{"a slot past num_segs in use", stray, syscall.EINVAL},
		{"zero pages", c.segsReq(0, ps, 0, rw, seg(c.a, 0, 1), seg(c.b, 1, 0)), syscall.EINVAL},
		{"offset not page aligned", c.segsReq(0, 2*ps, 0, rw, seg(c.a, 0, 1),
			verbsock.RegMRSeg{Mem: c.b, Offset: 8, Pages: 1}), syscall.EINVAL},
		{"pages past the object", c.segsReq(0, 4*ps, 0, rw, seg(c.a, 0, 1), seg(c.b, 2, 3)), syscall.EINVAL},
		{"offset past the object", c.segsReq(0, 2*ps, 0, rw, seg(c.a, 0, 1), seg(c.b, 4, 1)), syscall.EINVAL},
		{"pages that wrap", c.segsReq(0, 2*ps, 0, rw, seg(c.a, 0, 1),
			verbsock.RegMRSeg{Mem: c.b, Offset: ps, Pages: 1 << 52}), syscall.EINVAL},
		{"first_offset past the first page", c.segsReq(ps, ps, ps, rw, ab...), syscall.EINVAL},
		{"length not covered", c.segsReq(8, 2*ps-7, 8, rw, ab...), syscall.EINVAL},
		{"a page to spare", c.segsReq(0, ps, 0, rw, ab...), syscall.EINVAL},
		{"zero length", c.segsReq(0, 0, 0, rw, seg(c.a, 0, 1)), syscall.EINVAL},
		{"REMOTE_WRITE without LOCAL_WRITE", c.segsReq(0, 2*ps, 0, 2, ab...), syscall.EINVAL},
		{"unknown access bit", c.segsReq(0, 2*ps, 0, 1<<30, ab...), syscall.EINVAL},
		{"iova not congruent mod 8", c.segsReq(16, 2*ps-16, 0x1004, rw, ab...), syscall.EINVAL},
		{"over the registered-bytes quota", c.segsReq(0, 8*ps, 0, rw, seg(c.a, 0, 4), seg(c.b, 0, 4)), syscall.EDQUOT},
	}
	for _, tc := range cases {
		wantErrno(t, tc.name, c.do(verbsock.OpRegMRSegs, tc.req, nil, nil), tc.errno)
	}
	// Reserved bytes: the request's own, and a segment's.
	for _, off := range []int{36, 40 + 4, 40 + 24 + 4} {
		p := verbsock.Encode(nil, c.segsReq(0, 2*ps, 0, rw, ab...))
		p[off] = 1
		h, _, _ := c.send(verbsock.Header{Op: verbsock.OpRegMRSegs}, p, nil)
		if syscall.Errno(h.Status) != syscall.EINVAL {
			t.Errorf("reserved byte %d set: status %v, want EINVAL", off, syscall.Errno(h.Status))
		}
	}
	if u := s.Used(uint32(os.Getuid())); u.MaxMR != 0 || u.MaxMRBytes != 0 || int64(u.MaxMemBytes) != c.mappings {
		t.Errorf("refused registrations left charges: %+v", u)
	}
	c.alive()
}

// A registration over A's pages 1-2, B's page 0 and A's page 3 places the
// bytes a peer writes in those pages, in that order; it charges its page
// list until dereg_mr. Segments that continue each other are one piece,
// with nothing to charge.
func TestRegMRSegsDataLands(t *testing.T) {
	c, s, h := newSegsClient(t, verbsock.Limits{})
	uid := uint32(os.Getuid())
	ps := shm.PageSize
	const first, tail = 100, 50
	length := 4*ps - first - tail
	iova := uint64(0x7f0000000000 + first)
	var mr verbsock.RegMRResp
	if err := c.do(verbsock.OpRegMRSegs, c.segsReq(first, uint64(length), iova, 1|2,
		seg(c.a, 1, 2), seg(c.b, 0, 1), seg(c.a, 3, 1)), nil, &mr); err != nil {
		t.Fatal(err)
	}
	info, ok := h.Dev.Mem().Query(mr.LKey)
	if !ok || info.Length != uint64(length) || info.IOVA != iova || mr.RKey != mr.LKey {
		t.Fatalf("daemon's MR %+v %v", info, ok)
	}
	heap := int64(s.Used(uid).MaxMemBytes) - c.mappings
	if heap <= 0 {
		t.Fatalf("page list charged %d bytes", heap)
	}
	// A peer's WRITE over the whole MR, as the responder resolves it.
	src := make([]byte, length)
	for i := range src {
		src[i] = byte(i*13) ^ byte(i>>9)
	}
	ref, err := h.Dev.Mem().Remote(info.PD, 1, mr.RKey, iova, uint64(length), mem.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ref.WriteAt(src, 0); err != nil {
		t.Fatal(err)
	}
	ref.Release()
	want := map[string][2][]byte{
		"A page 1 from byte 100": {c.aMem[ps+first : 2*ps], src[:ps-first]},
		"A page 2":               {c.aMem[2*ps : 3*ps], src[ps-first : 2*ps-first]},
		"B page 0":               {c.bMem[:ps], src[2*ps-first : 3*ps-first]},
		"A page 3 to its tail":   {c.aMem[3*ps : 4*ps-tail], src[3*ps-first:]},
		"A page 0 untouched":     {c.aMem[:ps+first], make([]byte, ps+first)},
		"B pages 1-3 untouched":  {c.bMem[ps:], make([]byte, 3*ps)},
	}
	for what, w := range want {
		if !bytes.Equal(w[0], w[1]) {
			t.Errorf("%s: bytes differ", what)
		}
	}
	// A word that starts a page of another object is an atomic target.
	word := iova + uint64(2*ps-first)
	if ref, err := h.Dev.Mem().Remote(info.PD, 1, mr.RKey, word, 8, mem.RemoteWrite); err != nil {
		t.Fatal(err)
	} else {
		_ = ref.AtomicWrite(0, 0x1122334455667788)
		ref.Release()
	}
	if binary.NativeEndian.Uint64(c.bMem) != 0x1122334455667788 {
		t.Errorf("atomic write at B's page 0: % x", c.bMem[:8])
	}
	if err := c.do(verbsock.OpDeregMR, &verbsock.HandleReq{Handle: mr.MR}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if u := s.Used(uid); u.MaxMR != 0 || u.MaxMRBytes != 0 || int64(u.MaxMemBytes) != c.mappings {
		t.Fatalf("after dereg_mr: %+v", u)
	}
	// Two segments of A that continue each other: reg_mr's one piece.
	if err := c.do(verbsock.OpRegMRSegs, c.segsReq(8, uint64(3*ps-8), 8, 1, seg(c.a, 1, 1), seg(c.a, 2, 2)), nil, &mr); err != nil {
		t.Fatal(err)
	}
	if u := s.Used(uid); u.MaxMR != 1 || u.MaxMRBytes != uint64(3*ps-8) || int64(u.MaxMemBytes) != c.mappings {
		t.Fatalf("contiguous segments charged %+v", u)
	}
	if err := c.do(verbsock.OpDeregMR, &verbsock.HandleReq{Handle: mr.MR}, nil, nil); err != nil {
		t.Fatal(err)
	}
	c.alive()
}

// A client that disconnects with a page-list MR registered gets every
// charge back, and its memory objects are unmapped.
func TestRegMRSegsCleanup(t *testing.T) {
	c, s, _ := newSegsClient(t, verbsock.Limits{})
	ps := uint64(shm.PageSize)
	if err := c.do(verbsock.OpRegMRSegs, c.segsReq(0, 2*ps, 0, 1, seg(c.b, 3, 1), seg(c.a, 0, 1)), nil, nil); err != nil {
		t.Fatal(err)
	}
	c.c.Close()
	waitUntil(t, "usage released", func() bool { return s.Used(uint32(os.Getuid())) == verbsock.Limits{} })
}
