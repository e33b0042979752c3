package wq

import (
	"bytes"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/verbsock/ring"
)

const page = 4096

type fakeRes struct {
	ahs  map[uint32]*transport.AddressVector
	pds  map[uint32]mem.PD
	mems map[uint32]mem.Backing
}

func (r *fakeRes) AH(h uint32) (*transport.AddressVector, mem.PD, bool) {
	av, ok := r.ahs[h]
	return av, r.pds[h], ok
}

func (r *fakeRes) Mem(h uint32) (mem.Backing, bool) { b, ok := r.mems[h]; return b, ok }

func newRes() *fakeRes {
	return &fakeRes{
		ahs:  map[uint32]*transport.AddressVector{7: {SGIDIndex: 1, HopLimit: 64}, 8: {}},
		pds:  map[uint32]mem.PD{7: 1, 8: 2},
		mems: map[uint32]mem.Backing{3: mem.NewSliceBacking(make([]byte, 1<<16))},
	}
}

// sq returns a producer and the daemon's SendQueue over one (heap) ring.
func sq(t testing.TB, entries, maxSGE, maxInline uint32, onCorrupt func(string)) (*ring.Producer, *SendQueue, []byte) {
	t.Helper()
	es := ring.SQEntrySize(maxSGE, maxInline)
	m := make([]byte, ring.Bytes(entries, es, page))
	p, err := ring.NewProducer(m, ring.KindSQ, entries, es, page)
	if err != nil {
		t.Fatal(err)
	}
	q, err := NewSendQueue(SQConfig{Mem: m, Entries: entries, MaxSGE: maxSGE, MaxInline: maxInline, MaxPages: 64,
		PageSize: page, PD: 1, Resolver: newRes(), OnCorrupt: onCorrupt})
	if err != nil {
		t.Fatal(err)
	}
	return p, q, m
}

func post(t testing.TB, p *ring.Producer, e *ring.SQE, maxSGE, maxInline uint32) bool {
	t.Helper()
	b := p.Next()
	if b == nil {
		t.Fatal("ring full")
	}
	if err := ring.PutSQE(b, e, maxSGE, maxInline); err != nil {
		t.Fatal(err)
	}
	return p.Publish()
}

func TestSQERoundTrip(t *testing.T) {
	cases := []struct {
		name string
		e    ring.SQE
		want transport.SendWR
	}{
		{"send", ring.SQE{WRID: 1, Opcode: transport.WRSend, Flags: transport.SendSignaled,
			SGL: []transport.SGE{{Addr: 0x1000, Length: 64, LKey: 0x105}, {Addr: 0x2000, Length: 8, LKey: 0x105}}},
			transport.SendWR{ID: 1, Opcode: transport.WRSend, Flags: transport.SendSignaled,
				SGL: []transport.SGE{{Addr: 0x1000, Length: 64, LKey: 0x105}, {Addr: 0x2000, Length: 8, LKey: 0x105}}}},
		{"write imm", ring.SQE{WRID: 2, Opcode: transport.WRRDMAWriteWithImm, ImmData: 0xdeadbeef, RKey: 0x207,
			RemoteAddr: 0x9000, SGL: []transport.SGE{{Addr: 0x10, Length: 16, LKey: 1}}},
			transport.SendWR{ID: 2, Opcode: transport.WRRDMAWriteWithImm, ImmData: 0xdeadbeef, RKey: 0x207,
				RemoteAddr: 0x9000, SGL: []transport.SGE{{Addr: 0x10, Length: 16, LKey: 1}}}},
		{"cas", ring.SQE{WRID: 3, Opcode: transport.WRAtomicCmpAndSwp, CompareAdd: 5, Swap: 6, RKey: 9, RemoteAddr: 64,
			SGL: []transport.SGE{{Addr: 0x10, Length: 8, LKey: 1}}},
			transport.SendWR{ID: 3, Opcode: transport.WRAtomicCmpAndSwp, CompareAdd: 5, Swap: 6, RKey: 9, RemoteAddr: 64,
				SGL: []transport.SGE{{Addr: 0x10, Length: 8, LKey: 1}}}},
		{"inline", ring.SQE{WRID: 4, Opcode: transport.WRSend, Flags: transport.SendInline, Inline: []byte("hello, rdma")},
			transport.SendWR{ID: 4, Opcode: transport.WRSend, Flags: transport.SendInline, Inline: []byte("hello, rdma")}},
		{"ud", ring.SQE{WRID: 5, Opcode: transport.WRSendWithImm, AH: 7, RemoteQPN: 0x12, RemoteQKey: 0x11111111,
			SGL: []transport.SGE{{Addr: 1, Length: 1, LKey: 1}}},
			transport.SendWR{ID: 5, Opcode: transport.WRSendWithImm, RemoteQPN: 0x12, RemoteQKey: 0x11111111,
				SGL: []transport.SGE{{Addr: 1, Length: 1, LKey: 1}}}},
		{"local inv", ring.SQE{WRID: 6, Opcode: transport.WRLocalInv, ImmData: 0x1234},
			transport.SendWR{ID: 6, Opcode: transport.WRLocalInv, ImmData: 0x1234, SGL: []transport.SGE{}}},
		{"bind", ring.SQE{WRID: 7, Opcode: transport.WRBindMW, BindMWKey: 0x80000101, BindMRKey: 0x105, BindAddr: 0x1000,
			BindLength: 4096, BindAccess: uint32(mem.RemoteRead)},
			transport.SendWR{ID: 7, Opcode: transport.WRBindMW, Bind: &transport.BindMWWR{MWKey: 0x80000101, MRKey: 0x105,
				Addr: 0x1000, Length: 4096, Access: mem.RemoteRead}}},
		{"flush", ring.SQE{WRID: 8, Opcode: transport.WRFlush, FlushType: 1, FlushLevel: 2, RKey: 4, RemoteAddr: 8},
			transport.SendWR{ID: 8, Opcode: transport.WRFlush, FlushType: 1, FlushLevel: 2, RKey: 4, RemoteAddr: 8, SGL: []transport.SGE{}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, q, _ := sq(t, 4, 4, 64, nil)
			post(t, p, &c.e, 4, 64)
			var wr transport.SendWR
			if !q.Peek(&wr) {
				t.Fatal("nothing to peek")
			}
			if wr.Fault != transport.WCSuccess {
				t.Fatalf("fault %v", wr.Fault)
			}
			if c.e.AH != 0 {
				if wr.AH == nil || wr.AH.HopLimit != 64 {
					t.Fatalf("AH not resolved: %+v", wr.AH)
				}
				wr.AH = nil
			}
			if !sameWR(&wr, &c.want) {
				t.Fatalf("got %+v\nwant %+v", wr, c.want)
			}
		})
	}
}

func sameWR(a, b *transport.SendWR) bool {
	if len(a.SGL) != len(b.SGL) || !bytes.Equal(a.Inline, b.Inline) {
		return false
	}
	for i := range a.SGL {
		if a.SGL[i] != b.SGL[i] {
			return false
		}
	}
	if (a.Bind == nil) != (b.Bind == nil) || a.Bind != nil && *a.Bind != *b.Bind {
		return false
	}
	x, y := *a, *b
	x.SGL, y.SGL, x.Inline, y.Inline, x.Bind, y.Bind = nil, nil, nil, nil, nil, nil
	return x.ID == y.ID && x.Opcode == y.Opcode && x.Flags == y.Flags && x.ImmData == y.ImmData && x.RKey == y.RKey &&
		x.RemoteAddr == y.RemoteAddr && x.CompareAdd == y.CompareAdd && x.Swap == y.Swap && x.RemoteQPN == y.RemoteQPN &&
		x.RemoteQKey == y.RemoteQKey && x.FlushType == y.FlushType && x.FlushLevel == y.FlushLevel && x.RegMR == y.RegMR &&
		x.AH == y.AH && x.Fault == y.Fault
}

func TestRegMRDecode(t *testing.T) {
	p, q, _ := sq(t, 4, 2, 64, nil)
	post(t, p, &ring.SQE{WRID: 1, Opcode: transport.WRRegMR, RegKey: 0x1ff, RegAccess: uint32(mem.LocalWrite),
		RegPageSize: 4096, RegMem: 3, RegIOVA: 0x10100, RegLength: 8192, RegMemOffset: 4096}, 2, 64)
	post(t, p, &ring.SQE{WRID: 2, Opcode: transport.WRRegMR, RegKey: 0x1ff, RegPageSize: 4096, RegIOVA: 0, RegLength: 8192,
		RegPages: []ring.PageRef{{Mem: 3, Offset: 8192}, {Mem: 3, Offset: 0}}}, 2, 64)
	var wr transport.SendWR
	if !q.Peek(&wr) || wr.Fault != 0 || wr.RegMR == nil {
		t.Fatalf("contiguous REG_MR: %+v", wr)
	}
	r := wr.RegMR
	// iova 0x100 into its page + 8192 bytes spans 3 pages.
	if len(r.Pages) != 3 || r.Pages[0].Offset != 4096 || r.Pages[2].Offset != 4096+8192 || r.Key != 0x1ff || r.IOVA != 0x10100 {
		t.Fatalf("contiguous pages %+v", r)
	}
	q.Consume()
	if !q.Peek(&wr) || wr.Fault != 0 || len(wr.RegMR.Pages) != 2 || wr.RegMR.Pages[0].Offset != 8192 {
		t.Fatalf("page-list REG_MR: %+v %+v", wr, wr.RegMR)
	}
}

// Every way an SQE can be malformed completes it with an error status and
// keeps its ID and signalling, so it completes in order.
func TestSQEValidation(t *testing.T) {
	sge := func(a uint64, l uint32) []transport.SGE { return []transport.SGE{{Addr: a, Length: l, LKey: 1}} }
	cases := []struct {
		name string
		edit func(b []byte)
		e    ring.SQE
		want transport.WCStatus
	}{
		{"unknown opcode", nil, ring.SQE{Opcode: 99}, transport.WCLocQPOpErr},
		{"unknown flag", nil, ring.SQE{Opcode: transport.WRSend, Flags: 1 << 10}, transport.WCLocQPOpErr},
		{"num_sge over max", func(b []byte) { b[ring.SQENumSGE] = 3 }, ring.SQE{Opcode: transport.WRSend}, transport.WCLocQPOpErr},
		{"num_sge 255", func(b []byte) { b[ring.SQENumSGE] = 255 }, ring.SQE{Opcode: transport.WRSend}, transport.WCLocQPOpErr},
		{"inline over max", func(b []byte) { le.PutUint16(b[ring.SQEInlineLen:], 65) },
			ring.SQE{Opcode: transport.WRSend, Flags: transport.SendInline}, transport.WCLocLenErr},
		{"sge wraps", nil, ring.SQE{Opcode: transport.WRSend, SGL: sge(math.MaxUint64-10, 100)}, transport.WCLocProtErr},
		{"message over 2^31", nil, ring.SQE{Opcode: transport.WRSend, SGL: []transport.SGE{{Addr: 0, Length: 1 << 31, LKey: 1},
			{Addr: 0, Length: 1, LKey: 1}}}, transport.WCLocLenErr},
		{"remote range wraps", nil, ring.SQE{Opcode: transport.WRRDMAWrite, RemoteAddr: math.MaxUint64 - 3, SGL: sge(0, 64)},
			transport.WCLocQPOpErr},
		{"bad AH", nil, ring.SQE{Opcode: transport.WRSend, AH: 99, SGL: sge(0, 1)}, transport.WCLocQPOpErr},
		{"AH of another PD", nil, ring.SQE{Opcode: transport.WRSend, AH: 8, SGL: sge(0, 1)}, transport.WCLocQPOpErr},
		{"UD QPN over 24 bits", nil, ring.SQE{Opcode: transport.WRSend, AH: 7, RemoteQPN: 1 << 24}, transport.WCLocQPOpErr},
		{"REG_MR page size 3", nil, ring.SQE{Opcode: transport.WRRegMR, RegPageSize: 3, RegLength: 1, RegMem: 3}, transport.WCLocQPOpErr},
		{"REG_MR page size 2^31", nil, ring.SQE{Opcode: transport.WRRegMR, RegPageSize: 1 << 31, RegLength: 1, RegMem: 3}, transport.WCLocQPOpErr},
		{"REG_MR too many pages", nil, ring.SQE{Opcode: transport.WRRegMR, RegPageSize: 8, RegLength: 65 * 8, RegMem: 3}, transport.WCLocQPOpErr},
		{"REG_MR iova wraps", nil, ring.SQE{Opcode: transport.WRRegMR, RegPageSize: 4096, RegIOVA: math.MaxUint64, RegLength: 2, RegMem: 3}, transport.WCLocQPOpErr},
		{"REG_MR bad mem", nil, ring.SQE{Opcode: transport.WRRegMR, RegPageSize: 4096, RegLength: 1, RegMem: 4}, transport.WCLocQPOpErr},
		{"REG_MR zero length", nil, ring.SQE{Opcode: transport.WRRegMR, RegPageSize: 4096, RegLength: 0, RegMem: 3}, transport.WCLocQPOpErr},
		{"REG_MR page list over area", func(b []byte) { le.PutUint16(b[ring.SQENumPages:], 5) },
			ring.SQE{Opcode: transport.WRRegMR, RegPageSize: 4096, RegLength: 1}, transport.WCLocQPOpErr},
		{"REG_MR page list bad mem", nil, ring.SQE{Opcode: transport.WRRegMR, RegPageSize: 4096, RegLength: 1,
			RegPages: []ring.PageRef{{Mem: 77}}}, transport.WCLocQPOpErr},
		{"BIND_MW wraps", nil, ring.SQE{Opcode: transport.WRBindMW, BindAddr: math.MaxUint64, BindLength: 2}, transport.WCMWBindErr},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, q, _ := sq(t, 4, 2, 64, nil)
			c.e.WRID = 0xabc
			c.e.Flags |= transport.SendSignaled
			b := p.Next()
			if err := ring.PutSQE(b, &c.e, 2, 64); err != nil {
				t.Fatal(err)
			}
			if c.edit != nil {
				c.edit(b)
			}
			p.Publish()
			var wr transport.SendWR
			if !q.Peek(&wr) {
				t.Fatal("nothing to peek")
			}
			if wr.Fault != c.want {
				t.Fatalf("fault %v, want %v (wr %+v)", wr.Fault, c.want, wr)
			}
			if wr.ID != 0xabc || wr.Flags&transport.SendSignaled == 0 {
				t.Fatalf("faulted WR lost its ID or signalling: %+v", wr)
			}
			if len(wr.SGL) != 0 || wr.Inline != nil || wr.RegMR != nil || wr.Bind != nil || wr.AH != nil {
				t.Fatalf("faulted WR still carries work: %+v", wr)
			}
		})
	}
}

// The entry is read once: changing it after Peek changes nothing.
func TestSQENoDoubleFetch(t *testing.T) {
	p, q, m := sq(t, 4, 2, 64, nil)
	post(t, p, &ring.SQE{WRID: 1, Opcode: transport.WRSend, SGL: []transport.SGE{{Addr: 8, Length: 8, LKey: 1}}}, 2, 64)
	var wr transport.SendWR
	q.Peek(&wr)
	off := ring.HeaderSize
	m[off+ring.SQENumSGE] = 200
	le.PutUint64(m[off+ring.SQEDescSize:], math.MaxUint64)
	var wr2 transport.SendWR
	q.Peek(&wr2)
	if wr2.Fault != 0 || len(wr2.SGL) != 1 || wr2.SGL[0].Addr != 8 {
		t.Fatalf("second Peek reread the ring: %+v", wr2)
	}
}

func TestDoorbellArming(t *testing.T) {
	p, q, _ := sq(t, 4, 1, 0, nil)
	var wr transport.SendWR
	e := &ring.SQE{Opcode: transport.WRSend}
	if !post(t, p, e, 1, 0) {
		t.Fatal("first publish to a fresh (idle) consumer did not ask for the doorbell")
	}
	if post(t, p, e, 1, 0) {
		t.Fatal("doorbell asked for twice for one idle period")
	}
	for range 2 {
		if !q.Peek(&wr) {
			t.Fatal("posted entry not seen")
		}
		q.Consume()
	}
	if q.Peek(&wr) {
		t.Fatal("empty ring yielded an entry")
	}
	// The consumer is armed now: the next publish must ring, once.
	if !post(t, p, e, 1, 0) {
		t.Fatal("publish to an idle consumer did not ask for the doorbell")
	}
	if post(t, p, e, 1, 0) {
		t.Fatal("doorbell asked for twice for one idle period")
	}
	for q.Peek(&wr) {
		q.Consume()
	}
	if q.Head() != 4 {
		t.Fatalf("consumed %d, want 4", q.Head())
	}
}

func TestRingFullAndIndices(t *testing.T) {
	p, q, m := sq(t, 4, 1, 0, nil)
	for range 4 {
		if p.Next() == nil {
			t.Fatal("ring full early")
		}
	}
	if p.Next() != nil || p.Room() != 0 {
		t.Fatal("a 4-entry ring took 5")
	}
	p.Publish()
	var wr transport.SendWR
	q.Peek(&wr)
	q.Consume()
	// Taken is not completed: the slot is the engine's until Retire.
	if p.Room() != 0 || loadCons(m) != 0 {
		t.Fatalf("room %d cons %d after a consume the engine still holds", p.Room(), loadCons(m))
	}
	for _, bad := range []int{-1, 2} { // more than taken, or negative: nothing moves
		q.Retire(bad)
		if loadCons(m) != 0 {
			t.Fatalf("Retire(%d) published consumer index %d", bad, loadCons(m))
		}
	}
	q.Retire(0)
	if p.Room() != 1 || loadCons(m) != 1 {
		t.Fatalf("room %d cons %d after one retirement", p.Room(), loadCons(m))
	}
	q.Peek(&wr)
	q.Consume()
	q.Retire(2) // as if the engine held more than it does: never moves back
	if loadCons(m) != 1 {
		t.Fatalf("consumer index moved back to %d", loadCons(m))
	}
	q.Retire(1)
	if loadCons(m) != 1 {
		t.Fatalf("consumer index %d with the second WR still held", loadCons(m))
	}
	q.Retire(0)
	if p.Room() != 2 || loadCons(m) != 2 {
		t.Fatalf("room %d cons %d after both retired", p.Room(), loadCons(m))
	}
}

// A producer index the consumer cannot believe stops the ring and reports
// it; it never yields an entry from outside the ring.
func TestCorruptProducerIndex(t *testing.T) {
	for _, tail := range []uint64{5, 1 << 40, math.MaxUint64} {
		var why string
		_, q, m := sq(t, 4, 1, 0, func(s string) { why = s })
		storeProd(m, tail)
		var wr transport.SendWR
		if q.Peek(&wr) {
			t.Fatalf("tail %d: Peek yielded an entry", tail)
		}
		if why == "" || !q.Corrupt() {
			t.Fatalf("tail %d: corruption not reported", tail)
		}
		storeProd(m, 1)
		if q.Peek(&wr) {
			t.Fatalf("tail %d: corrupt ring resumed", tail)
		}
	}
}

func TestRQEDecodeAndPoison(t *testing.T) {
	es := ring.RQEntrySize(2)
	m := make([]byte, ring.Bytes(8, es, page))
	p, err := ring.NewProducer(m, ring.KindRQ, 8, es, page)
	if err != nil {
		t.Fatal(err)
	}
	q, err := NewRecvQueue(RQConfig{Mem: m, Entries: 8, MaxSGE: 2, PageSize: page})
	if err != nil {
		t.Fatal(err)
	}
	_ = ring.PutRQE(p.Next(), 11, []transport.SGE{{Addr: 0x100, Length: 64, LKey: 5}}, 2)
	b := p.Next()
	_ = ring.PutRQE(b, 12, nil, 2)
	le.PutUint32(b[ring.RQENumSGE:], 3) // over max_recv_sge
	_ = ring.PutRQE(p.Next(), 13, []transport.SGE{{Addr: math.MaxUint64, Length: 2, LKey: 5}}, 2)
	_ = ring.PutRQE(p.Next(), 14, nil, 2)
	p.Publish()
	var wr transport.RecvWR
	want := []struct {
		id     uint64
		poison bool
	}{{11, false}, {12, true}, {13, true}, {14, false}}
	for _, w := range want {
		if !q.Peek(&wr) {
			t.Fatalf("WR %d missing", w.id)
		}
		poisoned := wr.Fault == transport.WCLocQPOpErr && len(wr.SGL) == 0
		if wr.ID != w.id || poisoned != w.poison {
			t.Fatalf("WR %d: got %+v", w.id, wr)
		}
		q.Consume()
	}
}

// Producer and consumer on two goroutines: every entry arrives once, in
// order, with its content; doorbells wake an idle consumer.
func TestSPSCConcurrent(t *testing.T) {
	const total = 20000
	p, q, _ := sq(t, 64, 2, 32, nil)
	bell := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var wr transport.SendWR
		for want := uint64(0); want < total; {
			if !q.Peek(&wr) {
				select {
				case <-bell:
				case <-time.After(5 * time.Second):
					t.Errorf("consumer starved at %d (lost doorbell)", want)
					return
				}
				continue
			}
			if wr.ID != want || len(wr.SGL) != 2 || wr.SGL[1].Addr != want*2 || wr.Fault != 0 {
				t.Errorf("entry %d: %+v", want, wr)
				return
			}
			q.Consume()
			want++
			q.Retire(int(want % 5)) // an engine holding a few WRs, completing in bursts
		}
	}()
	for i := uint64(0); i < total; {
		b := p.Next()
		if b == nil {
			if p.Publish() {
				bell <- struct{}{}
			}
			time.Sleep(time.Microsecond)
			continue
		}
		_ = ring.PutSQE(b, &ring.SQE{WRID: i, Opcode: transport.WRSend, SGL: []transport.SGE{{Addr: i, Length: 1, LKey: 1}, {Addr: i * 2, Length: 1, LKey: 1}}}, 2, 32)
		i++
		if i%7 == 0 || i == total {
			if p.Publish() {
				select {
				case bell <- struct{}{}:
				default:
				}
			}
		}
	}
	wg.Wait()
}
