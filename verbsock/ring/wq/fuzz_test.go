package wq

import (
	"testing"

	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/verbsock/ring"
)

// FuzzDecodeSQE feeds arbitrary bytes as an SQE under arbitrary caps: the
// decoder never panics, and a WR it passes as well-formed is within every
// limit the engine relies on.
func FuzzDecodeSQE(f *testing.F) {
	for _, e := range []ring.SQE{
		{WRID: 1, Opcode: transport.WRSend, SGL: []transport.SGE{{Addr: 1, Length: 2, LKey: 3}}},
		{Opcode: transport.WRSend, Flags: transport.SendInline, Inline: []byte("abc")},
		{Opcode: transport.WRRegMR, RegPageSize: 4096, RegLength: 100, RegMem: 3},
		{Opcode: transport.WRRegMR, RegPageSize: 4096, RegLength: 100, RegPages: []ring.PageRef{{Mem: 3}}},
		{Opcode: transport.WRBindMW, BindLength: 5},
		{Opcode: transport.WRSend, AH: 7, RemoteQPN: 5},
	} {
		b := make([]byte, ring.SQEntrySize(4, 64))
		_ = ring.PutSQE(b, &e, 4, 64)
		f.Add(b, uint8(4), uint16(64))
	}
	f.Fuzz(func(t *testing.T, raw []byte, maxSGE uint8, maxInline uint16) {
		ms, mi := uint32(maxSGE%33), uint32(maxInline%1025)
		b := make([]byte, ring.SQEntrySize(ms, mi))
		copy(b, raw)
		cfg := &SQConfig{MaxSGE: ms, MaxInline: mi, MaxPages: 64, PD: 1, Resolver: newRes()}
		var wr transport.SendWR
		sgl := make([]transport.SGE, ms)
		inline := make([]byte, mi)
		st := DecodeSQE(b, &wr, sgl, inline, cfg)
		if st != transport.WCSuccess {
			if len(wr.SGL) != 0 || wr.Inline != nil || wr.RegMR != nil || wr.Bind != nil || wr.AH != nil {
				t.Fatalf("faulted WR carries work: %+v", wr)
			}
			return
		}
		if uint32(len(wr.SGL)) > ms || uint32(len(wr.Inline)) > mi {
			t.Fatalf("WR over caps: %d SGEs, %d inline", len(wr.SGL), len(wr.Inline))
		}
		var total uint64
		for _, s := range wr.SGL {
			if s.Length > 0 && s.Addr+uint64(s.Length)-1 < s.Addr {
				t.Fatalf("SGE wraps: %+v", s)
			}
			total += uint64(s.Length)
		}
		if total > transport.MaxMessageSize {
			t.Fatalf("message of %d bytes", total)
		}
		if r := wr.RegMR; r != nil {
			if len(r.Pages) == 0 || len(r.Pages) > cfg.MaxPages || r.PageSize&(r.PageSize-1) != 0 || r.Length == 0 {
				t.Fatalf("REG_MR passed: %+v", r)
			}
			for _, p := range r.Pages {
				if p.Backing == nil {
					t.Fatal("REG_MR page without backing")
				}
			}
		}
		if wr.AH != nil && wr.RemoteQPN > 0xFFFFFF {
			t.Fatalf("UD QPN %#x", wr.RemoteQPN)
		}
	})
}

// FuzzDecodeRQE: never panics; a passed WR is within max_recv_sge and its
// SGEs do not wrap.
func FuzzDecodeRQE(f *testing.F) {
	b := make([]byte, ring.RQEntrySize(4))
	_ = ring.PutRQE(b, 9, []transport.SGE{{Addr: 1, Length: 2, LKey: 3}}, 4)
	f.Add(b, uint8(4))
	f.Fuzz(func(t *testing.T, raw []byte, maxSGE uint8) {
		ms := uint32(maxSGE % 33)
		b := make([]byte, ring.RQEntrySize(ms))
		copy(b, raw)
		var wr transport.RecvWR
		sgl := make([]transport.SGE, max(ms, 1))
		ok := DecodeRQE(b, &wr, sgl, ms)
		if !ok {
			if len(wr.SGL) != 0 || wr.Fault != transport.WCLocQPOpErr {
				t.Fatalf("malformed RQE not faulted: %+v", wr)
			}
			return
		}
		if uint32(len(wr.SGL)) > ms {
			t.Fatalf("%d SGEs > %d", len(wr.SGL), ms)
		}
		for _, s := range wr.SGL {
			if s.Length > 0 && s.Addr+uint64(s.Length)-1 < s.Addr {
				t.Fatalf("SGE wraps: %+v", s)
			}
		}
	})
}

// FuzzRingIndices lets a hostile client set the shared indices to anything
// between operations: the daemon's consumers and CQ producer never touch
// memory outside the ring, never panic, and a corrupt ring stays stopped.
func FuzzRingIndices(f *testing.F) {
	f.Add(uint64(1), uint64(0), uint64(3), uint64(2), uint8(3))
	f.Add(uint64(1<<63), uint64(5), uint64(0), uint64(1<<40), uint8(7))
	f.Fuzz(func(t *testing.T, prod1, prod2, cons1, cons2 uint64, ops uint8) {
		_, q, m := sq(t, 8, 1, 0, nil)
		cm := make([]byte, ring.Bytes(8, ring.CQESize, page))
		ring.InitHeader(cm, ring.KindCQ, 8, ring.CQESize)
		c, err := ring.NewCQ(ring.CQConfig{Mem: cm, Entries: 8, PageSize: page, Signal: func() {}})
		if err != nil {
			t.Fatal(err)
		}
		var wr transport.SendWR
		for i := range int(ops%16) + 1 {
			switch i % 4 {
			case 0:
				storeProd(m, prod1+uint64(i))
			case 1:
				storeProd(m, prod2)
			case 2:
				storeCons(cm, cons1)
			case 3:
				storeCons(cm, cons2+uint64(i))
			}
			for range 10 {
				if !q.Peek(&wr) {
					break
				}
				q.Consume()
			}
			c.Push(&transport.WC{WRID: uint64(i)})
			if q.Head() > prod1+16 && q.Head() > prod2+16 {
				t.Fatalf("consumer ran to %d past every producer index", q.Head())
			}
		}
	})
}
