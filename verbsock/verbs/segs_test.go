package verbs_test

import (
	"bytes"
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// An MR over pages of two buffers (as the C library registers memory that
// two memfds back) takes a peer's RDMA WRITE across the boundary between
// them, gives it back to an RDMA READ, and is a gather list for inline data.
func TestRegMRSegsAcrossBuffers(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	a := newSide(t, e.client(), e.host, verbs.QPTypeRC, nil, nil)
	b := newSide(t, e.peerClient(), e.peer, verbs.QPTypeRC, nil, nil)
	connect(t, a, b)
	ps := uint64(os.Getpagesize())
	x, err := b.pd.AllocBuffer(int(3 * ps))
	if err != nil {
		t.Fatal(err)
	}
	y, err := b.pd.AllocBuffer(int(2 * ps))
	if err != nil {
		t.Fatal(err)
	}
	// x's pages 1-2, then y's pages 0-1; from byte 100 of x's page 1 to 10
	// bytes short of y's end.
	const first, tail = 100, 10
	length := 4*ps - first - tail
	iova := uint64(0x50000000 + first)
	mr, err := b.pd.RegMRSegs([]verbs.SegRef{{Buffer: x, Offset: ps, Pages: 2}, {Buffer: y, Pages: 2}}, first, length, iova,
		verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	if mr.Addr() != iova || mr.Len() != length || mr.Bytes() != nil {
		t.Fatalf("MR at %#x of %d bytes (Bytes %d)", mr.Addr(), mr.Len(), len(mr.Bytes()))
	}
	src := a.buf.Bytes()[:length]
	for i := range src {
		src[i] = byte(i*5) ^ byte(i>>10)
	}
	post := func(qp *verbs.QP, wr verbs.SendWR, cq *verbs.CQ) {
		t.Helper()
		wr.Flags |= verbs.SendSignaled
		if err := qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		if wc := pollN(t, cq, 1)[0]; wc.Status != verbs.WCSuccess {
			t.Fatalf("%v: %+v", wr.Opcode, wc)
		}
	}
	post(a.qp, verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.mr.SGE(0, length)},
		RemoteAddr: iova, RKey: mr.RKey()}, a.scq)
	split := 2*ps - first // where y's bytes start in the MR
	if !bytes.Equal(x.Bytes()[ps+first:], src[:split]) || !bytes.Equal(y.Bytes()[:2*ps-tail], src[split:]) {
		t.Fatal("the WRITE did not land in x's pages 1-2 then y's pages 0-1")
	}
	if !bytes.Equal(x.Bytes()[:ps+first], make([]byte, ps+first)) || !bytes.Equal(y.Bytes()[2*ps-tail:], make([]byte, tail)) {
		t.Fatal("the WRITE reached bytes outside the MR")
	}
	// READ back 200 bytes around the boundary.
	back := a.buf.Bytes()[1<<19:][:200]
	post(a.qp, verbs.SendWR{ID: 2, Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{a.mr.SGE(1<<19, 200)},
		RemoteAddr: iova + split - 100, RKey: mr.RKey()}, a.scq)
	if !bytes.Equal(back, src[split-100:split+100]) {
		t.Fatal("READ across the boundary differs")
	}
	// Inline data gathered in this process from both buffers.
	post(b.qp, verbs.SendWR{ID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendInline, SGL: []verbs.SGE{mr.SGE(split-50, 100)},
		RemoteAddr: a.mr.Addr() + 1<<18, RKey: a.mr.RKey()}, b.scq)
	if !bytes.Equal(a.buf.Bytes()[1<<18:][:100], src[split-50:split+50]) {
		t.Fatal("inline WRITE gathered from the MR differs")
	}
	if err := mr.Dereg(); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.peer.Dev.Mem().Query(mr.LKey()); ok {
		t.Fatal("MR still in the daemon's table after Dereg")
	}
	// Segments that continue each other in one buffer are one piece.
	one, err := b.pd.RegMRSegs([]verbs.SegRef{{Buffer: x, Pages: 1}, {Buffer: x, Offset: ps, Pages: 2}}, 8, 3*ps-8, 8, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if got := one.Bytes(); len(got) != int(3*ps-8) || &got[0] != &x.Bytes()[8] {
		t.Fatalf("contiguous segments: Bytes of %d bytes", len(got))
	}
	if err := one.Dereg(); err != nil {
		t.Fatal(err)
	}
}

// Segments the SDK can tell are wrong never reach the daemon; a buffer of
// another connection is the daemon's to refuse, as in RegMR.
func TestRegMRSegsClientChecks(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d, other := e.client(), e.client()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	buf, err := other.AllocBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		segs  []verbs.SegRef
		errno syscall.Errno
	}{
		{"nil buffer", []verbs.SegRef{{Pages: 1}}, syscall.EINVAL},
		{"more segments than slots", make([]verbs.SegRef, verbsock.MaxRegMRSegs+1), syscall.EINVAL},
		{"another connection's buffer", []verbs.SegRef{{Buffer: buf, Pages: 1}}, syscall.ENOENT}, // its handle is d's PD
	} {
		if _, err := pd.RegMRSegs(c.segs, 0, 4096, 0, verbs.AccessLocalWrite); !errors.Is(err, c.errno) {
			t.Errorf("%s: %v, want %v", c.name, err, c.errno)
		}
	}
}
