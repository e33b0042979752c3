package nic_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/mem"
)

type side struct {
	h    *nictest.Host
	pd   mem.PD
	scq  *transport.MemCQ
	rcq  *transport.MemCQ
	qp   *nic.QP
	buf  []byte
	key  uint32
	addr uint64
}

func newSide(t testing.TB, h *nictest.Host, typ transport.QPType, addr uint64) *side {
	t.Helper()
	return newSideCfg(t, h, typ, addr, nil)
}

// newSideCfg is newSide with cfg, if not nil, changing the QP's config.
func newSideCfg(t testing.TB, h *nictest.Host, typ transport.QPType, addr uint64, cfg func(*nic.QPConfig)) *side {
	t.Helper()
	s := &side{h: h, scq: transport.NewMemCQ(4096, nil), rcq: transport.NewMemCQ(4096, nil), addr: addr}
	var err error
	if s.pd, err = h.Dev.Mem().AllocPD(); err != nil {
		t.Fatal(err)
	}
	s.buf = make([]byte, 1<<20)
	if s.key, err = h.Dev.Mem().RegMR(s.pd, mem.NewSliceBacking(s.buf), 0, uint64(len(s.buf)), addr,
		mem.LocalWrite|mem.RemoteWrite|mem.RemoteRead|mem.RemoteAtomic); err != nil {
		t.Fatal(err)
	}
	qc := nic.QPConfig{Type: typ, PD: s.pd, SendCQ: s.scq, RecvCQ: s.rcq,
		Cap: transport.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 256}}
	if cfg != nil {
		cfg(&qc)
	}
	s.qp, err = h.Dev.CreateQP(qc)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *side) sge(off, n int) []transport.SGE {
	return []transport.SGE{{Addr: s.addr + uint64(off), Length: uint32(n), LKey: s.key}}
}

func waitCQ(t testing.TB, cq *transport.MemCQ, n int) []transport.WC {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for cq.Len() < n {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d completions (have %d)", n, cq.Len())
		}
		time.Sleep(200 * time.Microsecond)
	}
	out := make([]transport.WC, n)
	return out[:cq.Poll(out)]
}

func testRC(t *testing.T, a, b *side) {
	for i := range a.buf[:1<<16] {
		a.buf[i] = byte(i * 13)
	}
	if err := b.qp.PostRecv(&transport.RecvWR{ID: 1, SGL: b.sge(0, 8192)}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(&transport.SendWR{ID: 10, Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: a.sge(0, 5000)}); err != nil {
		t.Fatal(err)
	}
	if wc := waitCQ(t, b.rcq, 1); wc[0].Status != transport.WCSuccess || wc[0].ByteLen != 5000 {
		t.Fatalf("receive %+v", wc[0])
	}
	if !bytes.Equal(b.buf[:5000], a.buf[:5000]) {
		t.Fatal("SEND data differs")
	}
	if err := a.qp.PostSend(&transport.SendWR{ID: 11, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: a.sge(0, 40000), RemoteAddr: b.addr + 100000, RKey: b.key}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(&transport.SendWR{ID: 12, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
		SGL: a.sge(200000, 40000), RemoteAddr: b.addr + 100000, RKey: b.key}); err != nil {
		t.Fatal(err)
	}
	wcs := waitCQ(t, a.scq, 3)
	for _, wc := range wcs {
		if wc.Status != transport.WCSuccess {
			t.Fatalf("send completion %+v", wc)
		}
	}
	if !bytes.Equal(a.buf[200000:240000], a.buf[:40000]) || !bytes.Equal(b.buf[100000:140000], a.buf[:40000]) {
		t.Fatal("WRITE/READ data differs")
	}
}

func TestDevicesOverPipeRC(t *testing.T) {
	testPipeRC(t, nictest.Pair)
}

// The reader-goroutine mode (a link the worker cannot poll: Stack.Run
// delivers to the device) carries the same traffic.
func TestDevicesOverPipeRCReaderGoroutine(t *testing.T) {
	testPipeRC(t, nictest.PairReaderGoroutine)
}

func testPipeRC(t *testing.T, pair func(testing.TB, int) (*nictest.Host, *nictest.Host)) {
	ha, hb := pair(t, 1500)
	a := newSide(t, ha, transport.QPTypeRC, 0x10000000)
	b := newSide(t, hb, transport.QPTypeRC, 0x20000000)
	if err := nictest.ConnectRC(a.qp, b.qp, ha, hb, transport.QPTypeRC, transport.MTU1024); err != nil {
		t.Fatal(err)
	}
	testRC(t, a, b)
	if c := ha.Dev.Counters().Get(transport.RetransmitTimeouts); c != 0 {
		t.Errorf("retransmit_timeouts = %d on a lossless pipe", c)
	}
}

// Two QPs on one device talk through loopback, never the wire.
func TestDeviceLoopbackRC(t *testing.T) {
	ha, _ := nictest.Pair(t, 1500)
	a := newSide(t, ha, transport.QPTypeRC, 0x10000000)
	b := newSide(t, ha, transport.QPTypeRC, 0x20000000)
	if err := nictest.ConnectRC(a.qp, b.qp, ha, ha, transport.QPTypeRC, transport.MTU1024); err != nil {
		t.Fatal(err)
	}
	framesBefore := ha.Stack.Counters().Map()["roce_out"]
	testRC(t, a, b)
	if got := ha.Stack.Counters().Map()["roce_out"]; got != framesBefore {
		t.Errorf("loopback traffic went to the wire: roce_out %d → %d", framesBefore, got)
	}
}

func TestDestroyFlushesAndFreesQPN(t *testing.T) {
	ha, hb := nictest.Pair(t, 1500)
	a := newSide(t, ha, transport.QPTypeRC, 0x10000000)
	b := newSide(t, hb, transport.QPTypeRC, 0x20000000)
	if err := nictest.ConnectRC(a.qp, b.qp, ha, hb, transport.QPTypeRC, transport.MTU1024); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := b.qp.PostRecv(&transport.RecvWR{ID: uint64(i), SGL: b.sge(0, 64)}); err != nil {
			t.Fatal(err)
		}
	}
	b.qp.Destroy()
	wcs := waitCQ(t, b.rcq, 3)
	for _, wc := range wcs {
		if wc.Status != transport.WCWRFlushErr {
			t.Errorf("posted receive after destroy: %v, want WR_FLUSH_ERR", wc.Status)
		}
	}
	if _, ok := hb.Dev.QP(b.qp.QPN()); ok {
		t.Error("destroyed QP still in the table")
	}
	if err := hb.Dev.Mem().DeallocPD(b.pd); err == nil {
		t.Error("PD deallocated while its MR is registered")
	}
}
