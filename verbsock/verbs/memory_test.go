package verbs_test

import (
	"errors"
	"syscall"
	"testing"

	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

func TestMemoryWindows(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	a := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	b := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	connect(t, a, b)
	// Type 1, bound synchronously over a page of b's MR.
	mw1, err := b.pd.AllocMW(verbs.MWType1)
	if err != nil {
		t.Fatal(err)
	}
	old := mw1.RKey()
	if err := mw1.Bind(b.mr, b.mr.Addr()+8192, 4096, verbs.AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	if mw1.RKey() == old {
		t.Fatal("bind did not change the rkey")
	}
	copy(a.buf.Bytes(), "through the window")
	write := func(id uint64, rkey uint32, off uint64) verbs.WC {
		t.Helper()
		if err := a.qp.PostSend(verbs.SendWR{ID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{a.mr.SGE(0, 18)}, RemoteAddr: b.mr.Addr() + off, RKey: rkey}); err != nil {
			t.Fatal(err)
		}
		return pollN(t, a.scq, 1)[0]
	}
	if wc := write(1, mw1.RKey(), 8192); wc.Status != verbs.WCSuccess || string(b.buf.Bytes()[8192:8210]) != "through the window" {
		t.Fatalf("write through MW: %+v", wc)
	}
	if err := b.mr.Dereg(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("dereg MR under a bound window: %v", err)
	}
	// Type 2B, bound by a BIND_MW work request on b's QP; a's write outside
	// the window fails and breaks the connection (RC: QP to ERR).
	mw2, err := b.pd.AllocMW(verbs.MWType2B)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.qp.PostSend(verbs.SendWR{ID: 5, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled,
		Bind: &verbs.BindMWWR{MW: mw2, MR: b.mr, Addr: b.mr.Addr() + 65536, Length: 100, Access: verbs.AccessRemoteWrite}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, b.scq, 1)[0]; wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCBindMW {
		t.Fatalf("BIND_MW completion %+v", wc)
	}
	if wc := write(2, mw2.RKey(), 65536); wc.Status != verbs.WCSuccess || string(b.buf.Bytes()[65536:65554]) != "through the window" {
		t.Fatalf("write through type 2B MW: %+v", wc)
	}
	if wc := write(3, mw2.RKey(), 65536+90); wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("write past the window: %+v, want REM_ACCESS_ERR", wc)
	}
}

func TestFastRegAndLocalInv(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	a := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	b := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	connect(t, a, b)
	fmr, err := b.pd.AllocMR(8)
	if err != nil {
		t.Fatal(err)
	}
	pages, err := b.pd.AllocBuffer(4 * 4096)
	if err != nil {
		t.Fatal(err)
	}
	old := fmr.RKey()
	// Pages 2 and 0 of the buffer, in that order, as IOVA 0x7000000.
	if err := b.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRegMR, Flags: verbs.SendSignaled,
		RegMR: &verbs.RegMRWR{MR: fmr, Pages: []verbs.PageRef{{Buffer: pages, Offset: 8192}, {Buffer: pages, Offset: 0}},
			PageSize: 4096, IOVA: 0x7000000, Length: 8192, Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, b.scq, 1)[0]; wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRegMR {
		t.Fatalf("REG_MR completion %+v", wc)
	}
	if fmr.RKey() == old {
		t.Fatal("REG_MR did not change the key")
	}
	copy(a.buf.Bytes(), "fast")
	if err := a.qp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 4)}, RemoteAddr: 0x7000000 + 4096, RKey: fmr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, a.scq, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("write through fast-reg MR: %+v", wc)
	}
	if string(pages.Bytes()[:4]) != "fast" { // IOVA page 1 is buffer page 0
		t.Fatalf("fast-reg page map: %q", pages.Bytes()[:4])
	}
	if err := b.qp.PostSend(verbs.SendWR{ID: 3, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, ImmData: fmr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, b.scq, 1)[0]; wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCLocalInv {
		t.Fatalf("LOCAL_INV %+v", wc)
	}
	if info, ok := e.host.Dev.Mem().Query(fmr.RKey()); !ok || info.State.String() != "FREE" {
		t.Fatalf("after LOCAL_INV: %+v", info)
	}
}
