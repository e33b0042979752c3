package ring

import (
	"sync/atomic"
	"testing"

	"github.com/vrnic/vrnicd/verbsock/ibv"
)

const page = 4096

func newCQPair(t testing.TB, entries uint32, signal func(), onErr func(string)) (*CQ, *CQReader, []byte) {
	t.Helper()
	m := make([]byte, Bytes(entries, CQESize, page))
	r, err := NewCQReader(m, entries, page)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCQ(CQConfig{Mem: m, Entries: entries, PageSize: page, Signal: signal, OnError: onErr})
	if err != nil {
		t.Fatal(err)
	}
	return c, r, m
}

func TestCQPushPollOverflow(t *testing.T) {
	var errs []string
	c, r, _ := newCQPair(t, 4, nil, func(s string) { errs = append(errs, s) })
	for i := range 4 {
		if !c.Push(&ibv.WC{WRID: uint64(i), Status: ibv.WCSuccess, ByteLen: 64, QPN: 0x11, Opcode: ibv.WCRecv,
			Flags: ibv.WCWithImm, ImmData: 0x01020304, SrcQP: 9, VendorErr: 1, PKeyIndex: 0}) {
			t.Fatalf("push %d failed", i)
		}
	}
	if c.Push(&ibv.WC{WRID: 99}) {
		t.Fatal("push into a full CQ succeeded")
	}
	if len(errs) != 1 {
		t.Fatalf("overflow reported %d times", len(errs))
	}
	out := make([]ibv.WC, 8)
	n := r.Poll(out)
	if n != 4 {
		t.Fatalf("polled %d, want 4", n)
	}
	for i, wc := range out[:n] {
		if wc.WRID != uint64(i) || wc.ByteLen != 64 || wc.QPN != 0x11 || wc.ImmData != 0x01020304 || wc.Flags != ibv.WCWithImm ||
			wc.SrcQP != 9 || wc.Opcode != ibv.WCRecv || wc.VendorErr != 1 {
			t.Fatalf("wc %d = %+v", i, wc)
		}
	}
	if c.Push(&ibv.WC{}) {
		t.Fatal("a CQ in error accepted a completion")
	}
}

func TestCQCorruptConsumerIndex(t *testing.T) {
	var why string
	c, _, m := newCQPair(t, 4, nil, func(s string) { why = s })
	storeCons(m, 1000) // ahead of every completion ever written
	if c.Push(&ibv.WC{}) || why == "" {
		t.Fatal("impossible consumer index not caught")
	}
}

func TestCQNotify(t *testing.T) {
	var fired atomic.Int32
	c, r, _ := newCQPair(t, 16, func() { fired.Add(1) }, nil)
	c.Push(&ibv.WC{})
	if fired.Load() != 0 {
		t.Fatal("event without arming")
	}
	r.Arm(false)
	c.Push(&ibv.WC{})
	c.Push(&ibv.WC{})
	if fired.Load() != 1 {
		t.Fatalf("%d events for one arming", fired.Load())
	}
	r.Arm(true)
	c.Push(&ibv.WC{Opcode: ibv.WCSend}) // successful send: not solicited
	if fired.Load() != 1 {
		t.Fatal("solicited-only arming fired on a successful send completion")
	}
	c.Push(&ibv.WC{Opcode: ibv.WCSend, Status: ibv.WCRemAccessErr})
	if fired.Load() != 2 {
		t.Fatal("solicited-only arming did not fire on an error completion")
	}
	r.Arm(true)
	c.Push(&ibv.WC{Opcode: ibv.WCRecv}) // a receive without SE
	if fired.Load() != 2 {
		t.Fatal("solicited-only arming fired on an unsolicited receive")
	}
	c.Push(&ibv.WC{Opcode: ibv.WCRecv, Solicited: true})
	if fired.Load() != 3 {
		t.Fatal("solicited-only arming did not fire on a solicited receive")
	}
	c.Arm(false) // daemon-side arming (socket req_notify_cq)
	c.Push(&ibv.WC{})
	if fired.Load() != 4 {
		t.Fatal("daemon-side arming did not fire")
	}
}

func TestCQResize(t *testing.T) {
	c, r, _ := newCQPair(t, 4, nil, nil)
	for i := range 4 {
		c.Push(&ibv.WC{WRID: uint64(i)})
	}
	out := make([]ibv.WC, 1)
	r.Poll(out) // 1 polled, 3 waiting
	small := make([]byte, Bytes(2, CQESize, page))
	if err := c.Resize(small, 2, page); err == nil {
		t.Fatal("resize below the waiting completions succeeded")
	}
	big := make([]byte, Bytes(16, CQESize, page))
	r2, _ := NewCQReader(big, 16, page)
	if err := c.Resize(big, 16, page); err != nil {
		t.Fatal(err)
	}
	for i := 4; i < 14; i++ {
		if !c.Push(&ibv.WC{WRID: uint64(i)}) {
			t.Fatalf("push %d after resize failed", i)
		}
	}
	all := make([]ibv.WC, 32)
	n := r2.Poll(all)
	if n != 13 {
		t.Fatalf("polled %d after resize, want 13", n)
	}
	for i, wc := range all[:n] {
		if wc.WRID != uint64(i+1) {
			t.Fatalf("order after resize: %d at %d", wc.WRID, i)
		}
	}
}
