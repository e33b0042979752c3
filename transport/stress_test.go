package transport_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/vrnic/vrnicd/transport"
	tt "github.com/vrnic/vrnicd/transport/transporttest"
)

// flow drives one RC connection with a random mix of operations and checks
// every result: data placed and read back byte for byte, SENDs and WRITE
// immediates received exactly once and in order, atomics executed exactly
// once (each returns the value the model predicts).
type flow struct {
	t      *testing.T
	id     int
	a, b   *tt.Endpoint
	rng    *rand.Rand
	src    *tt.Buffer // a: the bytes every SEND/WRITE takes
	dst    *tt.Buffer // a: READ targets, one slot per outstanding op
	res    *tt.Buffer // a: atomic results
	wreg   *tt.Buffer // b: WRITE targets
	rreg   *tt.Buffer // b: READ sources
	atom   *tt.Buffer // b: the atomic counter and the ATOMIC_WRITE word
	rbufs  *tt.Buffer // b: receive buffers
	total  int
	posted int
	done   int
	ops    map[uint64]op // outstanding by WR ID
	order  []uint64      // WR IDs in post order
	recvQ  []op          // ops that consume a receive WQE, in order
	recvs  int           // receive WQEs posted
	model  uint64        // the counter's value once every posted atomic ran
	sizes  map[transport.WROpcode]int
}

type op struct {
	seq    uint64
	code   transport.WROpcode
	off, n int
	slot   int
	want   uint64 // atomics: the original value expected back
	imm    uint32
}

const (
	slots     = 8       // outstanding operations per flow
	slotSize  = 1 << 20 // largest message
	recvSize  = 64 << 10
	recvSlots = 32
)

func newFlow(t *testing.T, id int, a, b *tt.Endpoint, total int, seed uint64) *flow {
	f := &flow{t: t, id: id, a: a, b: b, rng: rand.New(rand.NewPCG(seed, uint64(id))), total: total,
		ops: map[uint64]op{}, sizes: map[transport.WROpcode]int{}}
	reg := func(ep *tt.Endpoint, n int, addr uint64) *tt.Buffer {
		buf, err := ep.RegBuffer(n, addr, rw)
		if err != nil {
			t.Fatal(err)
		}
		return buf
	}
	f.src = reg(a, 2*slotSize, 0x1000_0000)
	f.dst = reg(a, slots*slotSize, 0x2000_0000)
	f.res = reg(a, slots*8, 0x3000_0000)
	f.wreg = reg(b, slots*slotSize, 0x4000_0000)
	f.rreg = reg(b, 2*slotSize, 0x5000_0000)
	f.atom = reg(b, 8+slots*8, 0x6000_0000)
	f.rbufs = reg(b, recvSlots*recvSize, 0x7000_0000)
	for _, buf := range []*tt.Buffer{f.src, f.rreg} {
		for i := range buf.Bytes {
			buf.Bytes[i] = byte(f.rng.Uint32())
		}
	}
	for range recvSlots {
		f.postRecv()
	}
	return f
}

func (f *flow) postRecv() {
	i := f.recvs % recvSlots
	if err := f.b.PostRecv(&transport.RecvWR{ID: uint64(f.recvs), SGL: []transport.SGE{f.rbufs.SGE(i*recvSize, recvSize)}}); err != nil {
		f.t.Fatal(err)
	}
	f.recvs++
}

func (f *flow) size(limit int) int {
	// Mostly small messages, some of a few pages, a few up to the limit:
	// every size class is covered while the run stays short.
	switch r := f.rng.IntN(1000); {
	case r < 50:
		return 0
	case r < 900:
		return 1 + f.rng.IntN(min(4096, limit))
	case r < 995:
		return 1 + f.rng.IntN(min(64<<10, limit))
	}
	return limit/2 + f.rng.IntN(limit/2+1)
}

// post keeps up to slots operations outstanding.
func (f *flow) post() {
	for f.posted < f.total && len(f.ops) < slots {
		seq := uint64(f.posted)
		slot := int(seq % slots)
		o := op{seq: seq, slot: slot}
		wr := transport.SendWR{ID: seq, Flags: transport.SendSignaled}
		switch r := f.rng.IntN(100); {
		case r < 25:
			o.code = transport.WRSend
			if r < 8 {
				o.code = transport.WRSendWithImm
			}
			o.n = f.size(recvSize)
		case r < 50:
			o.code = transport.WRRDMAWrite
			o.n = f.size(slotSize)
		case r < 58:
			o.code = transport.WRRDMAWriteWithImm
			o.n = f.size(slotSize)
		case r < 78:
			o.code = transport.WRRDMARead
			o.n = f.size(slotSize)
		case r < 86:
			o.code = transport.WRAtomicFetchAdd
		case r < 94:
			o.code = transport.WRAtomicCmpAndSwp
		case r < 97:
			o.code = transport.WRAtomicWrite
		default:
			o.code = transport.WRFlush
		}
		wr.Opcode = o.code
		o.off = int(seq*4099) % slotSize
		o.imm = uint32(seq)*2654435761 + uint32(f.id)
		switch o.code {
		case transport.WRSend, transport.WRSendWithImm:
			wr.SGL = []transport.SGE{f.src.SGE(o.off, o.n)}
			wr.ImmData = o.imm
			f.recvQ = append(f.recvQ, o)
		case transport.WRRDMAWrite, transport.WRRDMAWriteWithImm:
			wr.SGL = []transport.SGE{f.src.SGE(o.off, o.n)}
			wr.RemoteAddr, wr.RKey = f.wreg.Addr+uint64(slot*slotSize), f.wreg.RKey
			wr.ImmData = o.imm
			if o.code == transport.WRRDMAWriteWithImm {
				f.recvQ = append(f.recvQ, o)
			}
		case transport.WRRDMARead:
			wr.SGL = []transport.SGE{f.dst.SGE(slot*slotSize, o.n)}
			wr.RemoteAddr, wr.RKey = f.rreg.Addr+uint64(o.off), f.rreg.RKey
		case transport.WRAtomicFetchAdd:
			wr.SGL = []transport.SGE{f.res.SGE(slot*8, 8)}
			wr.RemoteAddr, wr.RKey, wr.CompareAdd = f.atom.Addr, f.atom.RKey, 1
			o.want = f.model
			f.model++
		case transport.WRAtomicCmpAndSwp:
			wr.SGL = []transport.SGE{f.res.SGE(slot*8, 8)}
			wr.RemoteAddr, wr.RKey, wr.CompareAdd, wr.Swap = f.atom.Addr, f.atom.RKey, f.model, f.model+1
			o.want = f.model
			f.model++
		case transport.WRAtomicWrite:
			wr.Flags |= transport.SendInline
			var v [8]byte
			binary.LittleEndian.PutUint64(v[:], seq|0xA5<<56)
			wr.Inline = v[:]
			wr.RemoteAddr, wr.RKey = f.atom.Addr+8+uint64(slot*8), f.atom.RKey
		case transport.WRFlush:
			wr.RemoteAddr, wr.RKey = f.wreg.Addr, f.wreg.RKey
			wr.SGL = nil
		}
		if err := f.a.PostSend(&wr); err != nil {
			f.t.Fatalf("flow %d op %d %v: post: %v", f.id, seq, o.code, err)
		}
		f.sizes[o.code]++
		f.ops[seq] = o
		f.order = append(f.order, seq)
		f.posted++
	}
}

// check consumes completions and verifies them.
func (f *flow) check() {
	for _, wc := range tt.Poll(f.a.SendCQ) {
		if len(f.order) == 0 || wc.WRID != f.order[0] {
			f.t.Fatalf("flow %d: completion for WR %d out of order (next expected %v)", f.id, wc.WRID, f.order[:min(1, len(f.order))])
		}
		f.order = f.order[1:]
		o := f.ops[wc.WRID]
		delete(f.ops, wc.WRID)
		if wc.Status != transport.WCSuccess {
			f.t.Fatalf("flow %d op %d %v n=%d: %v", f.id, o.seq, o.code, o.n, wc.Status)
		}
		switch o.code {
		case transport.WRRDMAWrite, transport.WRRDMAWriteWithImm:
			got := f.wreg.Bytes[o.slot*slotSize : o.slot*slotSize+o.n]
			if !bytes.Equal(got, f.src.Bytes[o.off:o.off+o.n]) {
				f.t.Fatalf("flow %d op %d: WRITE of %d bytes placed wrong data", f.id, o.seq, o.n)
			}
		case transport.WRRDMARead:
			got := f.dst.Bytes[o.slot*slotSize : o.slot*slotSize+o.n]
			if !bytes.Equal(got, f.rreg.Bytes[o.off:o.off+o.n]) {
				f.t.Fatalf("flow %d op %d: READ of %d bytes returned wrong data", f.id, o.seq, o.n)
			}
		case transport.WRAtomicFetchAdd, transport.WRAtomicCmpAndSwp:
			if got := binary.LittleEndian.Uint64(f.res.Bytes[o.slot*8:]); got != o.want {
				f.t.Fatalf("flow %d op %d %v returned %d, want %d (executed twice or not at all?)", f.id, o.seq, o.code, got, o.want)
			}
		case transport.WRAtomicWrite:
			if got := binary.LittleEndian.Uint64(f.atom.Bytes[8+o.slot*8:]); got != o.seq|0xA5<<56 {
				f.t.Fatalf("flow %d op %d: ATOMIC_WRITE left %#x", f.id, o.seq, got)
			}
		}
		f.done++
	}
	for _, wc := range tt.Poll(f.b.RecvCQ) {
		if len(f.recvQ) == 0 {
			f.t.Fatalf("flow %d: unexpected receive completion %+v", f.id, wc)
		}
		o := f.recvQ[0]
		f.recvQ = f.recvQ[1:]
		if wc.Status != transport.WCSuccess {
			f.t.Fatalf("flow %d op %d: receive %v", f.id, o.seq, wc.Status)
		}
		switch o.code {
		case transport.WRSend, transport.WRSendWithImm:
			if wc.Opcode != transport.WCRecv || int(wc.ByteLen) != o.n {
				f.t.Fatalf("flow %d op %d: receive %+v for a SEND of %d", f.id, o.seq, wc, o.n)
			}
			i := int(wc.WRID) % recvSlots
			if !bytes.Equal(f.rbufs.Bytes[i*recvSize:i*recvSize+o.n], f.src.Bytes[o.off:o.off+o.n]) {
				f.t.Fatalf("flow %d op %d: SEND data differs", f.id, o.seq)
			}
			if (o.code == transport.WRSendWithImm) != (wc.Flags&transport.WCWithImm != 0) || (o.code == transport.WRSendWithImm && wc.ImmData != o.imm) {
				f.t.Fatalf("flow %d op %d: immediate %+v", f.id, o.seq, wc)
			}
		case transport.WRRDMAWriteWithImm:
			if wc.Opcode != transport.WCRecvRDMAWithImm || wc.ImmData != o.imm || int(wc.ByteLen) != o.n {
				f.t.Fatalf("flow %d op %d: WRITE_WITH_IMM receive %+v", f.id, o.seq, wc)
			}
		}
		f.postRecv()
	}
}

func (f *flow) finished() bool { return f.done == f.total && len(f.recvQ) == 0 }

func runFlows(t *testing.T, n *tt.Net, flows []*flow, maxEvents int) {
	t.Helper()
	err := n.Run(func() bool {
		all := true
		for _, f := range flows {
			f.check()
			f.post()
			all = all && f.finished()
		}
		return all
	}, maxEvents)
	if err != nil {
		for _, f := range flows {
			t.Logf("flow %d: %d/%d done, %d outstanding, %v", f.id, f.done, f.total, len(f.ops), f.a.QP.Info())
		}
		t.Fatal(err)
	}
}

// IBA 9.7 (RC): every operation is delivered exactly once and in order,
// with its data intact, over a link that loses, reorders, duplicates and
// corrupts packets.
func TestRCExactlyOnceInOrderUnderFaults(t *testing.T) {
	total := 10_000
	if raceEnabled {
		total = 500
	}
	n := tt.NewNet(42)
	n.Faults = tt.Faults{Loss: 0.05, Reorder: 0.25, Duplicate: 0.05, Corrupt: 0.01}
	na, nb := n.AddNode(), n.AddNode()
	var flows []*flow
	mtus := []transport.MTU{transport.MTU1024, transport.MTU4096, transport.MTU256}
	per := total / len(mtus)
	for i, mtu := range mtus {
		a, b, err := tt.Connect(na, nb, tt.Options{MTU: mtu, Timeout: 14})
		if err != nil {
			t.Fatal(err)
		}
		flows = append(flows, newFlow(t, i, a, b, per+boolInt(i == 0)*(total-per*len(mtus)), 7))
	}
	runFlows(t, n, flows, 100_000_000)
	sum := 0
	for _, f := range flows {
		sum += f.done
		t.Logf("flow %d: %v", f.id, f.sizes)
	}
	if sum != total {
		t.Fatalf("%d operations completed, want %d", sum, total)
	}
	for _, nd := range []*tt.Node{na, nb} {
		c := &nd.Counters
		if c.Get(transport.LocalOpReplays) != 0 {
			t.Errorf("local_op_replays = %d", c.Get(transport.LocalOpReplays))
		}
		t.Logf("node %v: %v", nd.Addr, nonZero(c))
	}
	t.Logf("link: %+v", n.Stats)
	if n.Stats.Lost == 0 || n.Stats.Reordered == 0 || n.Stats.Duplicated == 0 || n.Stats.ICRCDropped == 0 {
		t.Errorf("faults not exercised: %+v", n.Stats)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func nonZero(c *transport.Counters) string {
	s := ""
	for _, name := range transport.CounterNames() {
		if v := c.Snapshot()[name]; v != 0 {
			s += fmt.Sprintf("%s=%d ", name, v)
		}
	}
	return s
}
