package verbs_test

import (
	"bytes"
	"errors"
	"syscall"
	"testing"

	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

func TestQueryDevicePortGID(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	if d.Name() != e.host.Dev.Name() {
		t.Errorf("name %q, want %q", d.Name(), e.host.Dev.Name())
	}
	a, err := d.Query()
	if err != nil {
		t.Fatal(err)
	}
	want := e.host.Dev.Attr()
	if a.NodeGUID != want.NodeGUID || a.MaxQPWR != want.MaxQPWR || a.MaxInlineData != want.MaxInlineData ||
		a.DeviceCapFlags != want.DeviceCapFlags || a.FWVer != want.FWVer || a.PhysPortCnt != 1 {
		t.Errorf("device attr %+v, want %+v", a, want)
	}
	p, err := d.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	if p.State != verbs.PortActive || p.ActiveMTU != uint32(verbs.MTU1024) || p.LinkLayer != 2 {
		t.Errorf("port attr %+v", p)
	}
	if _, err := d.QueryPort(2); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("port 2: %v, want EINVAL", err)
	}
	g, err := d.QueryGID(1, int(e.host.GIDIndex()))
	if err != nil {
		t.Fatal(err)
	}
	if g != verbs.GID(e.host.GID()) || g.String() != "192.0.2.1" {
		t.Errorf("GID %v, want %v", g, e.host.Addr)
	}
	if _, err := d.QueryGID(1, int(p.GIDTblLen)); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("GID past the table: %v, want EINVAL", err)
	}
}

func TestPDMRLifecycle(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	buf, err := pd.AllocBuffer(10000)
	if err != nil {
		t.Fatal(err)
	}
	if buf.Len() != 12288 {
		t.Errorf("buffer of %d bytes, want 3 pages", buf.Len())
	}
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	info, ok := e.host.Dev.Mem().Query(mr.LKey())
	if !ok || info.Length != uint64(buf.Len()) || info.IOVA != buf.Addr() {
		t.Fatalf("daemon's MR %+v, want %d bytes at %#x", info, buf.Len(), buf.Addr())
	}
	if _, err := pd.RegMR(buf, verbs.AccessRemoteWrite); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("REMOTE_WRITE without LOCAL_WRITE: %v, want EINVAL", err)
	}
	if _, err := pd.RegMRRange(buf, 4096, 1<<20, 0, verbs.AccessLocalWrite); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("MR past the buffer: %v, want EINVAL", err)
	}
	if err := pd.Dealloc(); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("dealloc PD with an MR: %v, want EBUSY", err)
	}
	if err := mr.Dereg(); err != nil {
		t.Fatal(err)
	}
	if err := mr.Dereg(); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("second dereg: %v, want ENOENT", err)
	}
	if err := buf.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pd.Dealloc(); err != nil {
		t.Fatal(err)
	}
}

func TestRCLoopbackVerbs(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	a := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	b := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	connect(t, a, b)
	src := a.buf.Bytes()
	for i := range src[:1<<16] {
		src[i] = byte(i * 7)
	}
	loopbackSendImm(t, a, b, src)
	loopbackWriteRead(t, a, b, src)
	loopbackAtomics(t, a, b, src)
	loopbackInline(t, a, b, src)
	// Query reflects the modifies.
	attr, init, err := a.qp.Query()
	if err != nil {
		t.Fatal(err)
	}
	if attr.State != verbs.QPStateRTS || attr.DestQPN != b.qp.QPN() || attr.PathMTU != verbs.MTU1024 ||
		init.Type != verbs.QPTypeRC || init.Cap.MaxSendWR != 128 || init.Cap.MaxInlineData != 256 {
		t.Fatalf("query: %+v %+v", attr, init)
	}
}

// loopbackSendImm: SEND / RECV with immediate.
func loopbackSendImm(t *testing.T, a, b *side, src []byte) {
	t.Helper()
	if err := b.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{b.mr.SGE(0, 8192)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(verbs.SendWR{ID: 10, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled,
		ImmData: 0x01020304, SGL: []verbs.SGE{a.mr.SGE(0, 5000)}}); err != nil {
		t.Fatal(err)
	}
	wc := pollN(t, b.rcq, 1)[0]
	if wc.Status != verbs.WCSuccess || wc.ByteLen != 5000 || wc.WRID != 1 || wc.Opcode != verbs.WCRecv ||
		wc.Flags&verbs.WCWithImm == 0 || wc.ImmData != 0x01020304 || wc.QPN != b.qp.QPN() {
		t.Fatalf("receive %+v", wc)
	}
	if !bytes.Equal(b.buf.Bytes()[:5000], src[:5000]) {
		t.Fatal("SEND data differs")
	}
	if wc := pollN(t, a.scq, 1)[0]; wc.Status != verbs.WCSuccess || wc.WRID != 10 || wc.Opcode != verbs.WCSend {
		t.Fatalf("send completion %+v", wc)
	}
}

// loopbackWriteRead: RDMA WRITE then READ back, two SGEs.
func loopbackWriteRead(t *testing.T, a, b *side, src []byte) {
	t.Helper()
	if err := a.qp.PostSend(
		verbs.SendWR{ID: 11, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{a.mr.SGE(0, 30000), a.mr.SGE(30000, 10000)}, RemoteAddr: b.mr.Addr() + 100000, RKey: b.mr.RKey()},
		verbs.SendWR{ID: 12, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{a.mr.SGE(200000, 40000)}, RemoteAddr: b.mr.Addr() + 100000, RKey: b.mr.RKey()},
	); err != nil {
		t.Fatal(err)
	}
	for _, wc := range pollN(t, a.scq, 2) {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("completion %+v", wc)
		}
	}
	if !bytes.Equal(b.buf.Bytes()[100000:140000], src[:40000]) || !bytes.Equal(src[200000:240000], src[:40000]) {
		t.Fatal("WRITE/READ data differs")
	}
}

// loopbackAtomics: FETCH_ADD then CMP_AND_SWP on an 8-byte word of b.
func loopbackAtomics(t *testing.T, a, b *side, src []byte) {
	t.Helper()
	word := b.mr.Addr() + 4096
	copy(b.buf.Bytes()[4096:4104], []byte{5, 0, 0, 0, 0, 0, 0, 0})
	if err := a.qp.PostSend(
		verbs.SendWR{ID: 13, Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(300000, 8)},
			RemoteAddr: word, RKey: b.mr.RKey(), CompareAdd: 10},
		verbs.SendWR{ID: 14, Opcode: verbs.WRAtomicCmpAndSwp, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(300008, 8)},
			RemoteAddr: word, RKey: b.mr.RKey(), CompareAdd: 15, Swap: 99},
	); err != nil {
		t.Fatal(err)
	}
	for _, wc := range pollN(t, a.scq, 2) {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("atomic completion %+v", wc)
		}
	}
	if got := b.buf.Bytes()[4096]; got != 99 || src[300000] != 5 || src[300008] != 15 {
		t.Fatalf("atomics: word %d, fetched %d and %d", got, src[300000], src[300008])
	}
}

// loopbackInline: inline SENDs, from Inline and gathered from an SGE.
func loopbackInline(t *testing.T, a, b *side, src []byte) {
	t.Helper()
	if err := b.qp.PostRecv(verbs.RecvWR{ID: 2, SGL: []verbs.SGE{b.mr.SGE(500000, 256)}},
		verbs.RecvWR{ID: 3, SGL: []verbs.SGE{b.mr.SGE(501000, 256)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(verbs.SendWR{ID: 15, Opcode: verbs.WRSend, Flags: verbs.SendInline | verbs.SendSignaled, Inline: []byte("inline!")},
		verbs.SendWR{ID: 16, Opcode: verbs.WRSend, Flags: verbs.SendInline | verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(100, 200)}}); err != nil {
		t.Fatal(err)
	}
	r := pollN(t, b.rcq, 2)
	if r[0].ByteLen != 7 || string(b.buf.Bytes()[500000:500007]) != "inline!" || r[1].ByteLen != 200 ||
		!bytes.Equal(b.buf.Bytes()[501000:501200], src[100:300]) {
		t.Fatalf("inline receives %+v", r)
	}
	pollN(t, a.scq, 2)
}
