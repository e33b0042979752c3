package transport_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/mem"
	tt "github.com/vrnic/vrnicd/transport/transporttest"
)

const rw = mem.LocalWrite | mem.RemoteWrite | mem.RemoteRead | mem.RemoteAtomic

type pair struct {
	net  *tt.Net
	a, b *tt.Endpoint
}

func newPair(t *testing.T, seed uint64, o tt.Options) *pair {
	t.Helper()
	n := tt.NewNet(seed)
	a, b, err := tt.Connect(n.AddNode(), n.AddNode(), o)
	if err != nil {
		t.Fatal(err)
	}
	return &pair{net: n, a: a, b: b}
}

func (p *pair) buf(t *testing.T, ep *tt.Endpoint, n int, addr uint64) *tt.Buffer {
	t.Helper()
	b, err := ep.RegBuffer(n, addr, rw)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// waitWC runs the net until cq holds n completions and returns them.
func (p *pair) waitWC(t *testing.T, cq *transport.MemCQ, n int) []transport.WC {
	t.Helper()
	if err := p.net.Run(func() bool { return cq.Len() >= n }, 1_000_000); err != nil {
		t.Fatalf("waiting for %d completions (have %d): %v", n, cq.Len(), err)
	}
	return tt.Poll(cq)
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

func TestRCSendWriteReadAtomic(t *testing.T) {
	p := newPair(t, 1, tt.Options{})
	src := p.buf(t, p.a, 8192, 0x10000)
	dst := p.buf(t, p.b, 8192, 0x20000)
	fill(src.Bytes, 3)

	// SEND 2500 bytes: FIRST/MIDDLE/LAST at MTU 1024.
	if err := p.b.PostRecv(&transport.RecvWR{ID: 7, SGL: []transport.SGE{dst.SGE(0, 4096)}}); err != nil {
		t.Fatal(err)
	}
	if err := p.a.PostSend(&transport.SendWR{ID: 1, Opcode: transport.WRSend, Flags: transport.SendSignaled,
		SGL: []transport.SGE{src.SGE(0, 2500)}}); err != nil {
		t.Fatal(err)
	}
	wc := p.waitWC(t, p.b.RecvCQ, 1)
	if wc[0].Status != transport.WCSuccess || wc[0].ByteLen != 2500 || wc[0].WRID != 7 || wc[0].Opcode != transport.WCRecv {
		t.Fatalf("recv completion %+v", wc[0])
	}
	if !bytes.Equal(dst.Bytes[:2500], src.Bytes[:2500]) {
		t.Fatal("SEND payload differs")
	}
	if wc := p.waitWC(t, p.a.SendCQ, 1); wc[0].Status != transport.WCSuccess || wc[0].WRID != 1 {
		t.Fatalf("send completion %+v", wc[0])
	}

	// WRITE 5000 bytes into dst at offset 100, then READ them back.
	if err := p.a.PostSend(&transport.SendWR{ID: 2, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{src.SGE(1000, 5000)}, RemoteAddr: dst.Addr + 100, RKey: dst.RKey}); err != nil {
		t.Fatal(err)
	}
	back := p.buf(t, p.a, 8192, 0x30000)
	if err := p.a.PostSend(&transport.SendWR{ID: 3, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
		SGL: []transport.SGE{back.SGE(0, 5000)}, RemoteAddr: dst.Addr + 100, RKey: dst.RKey}); err != nil {
		t.Fatal(err)
	}
	wcs := p.waitWC(t, p.a.SendCQ, 2)
	if wcs[0].WRID != 2 || wcs[1].WRID != 3 || wcs[0].Status != 0 || wcs[1].Status != 0 || wcs[1].Opcode != transport.WCRDMARead {
		t.Fatalf("completions %+v", wcs)
	}
	if !bytes.Equal(dst.Bytes[100:5100], src.Bytes[1000:6000]) || !bytes.Equal(back.Bytes[:5000], src.Bytes[1000:6000]) {
		t.Fatal("WRITE/READ data differs")
	}

	// FETCH_ADD then COMPARE_SWAP on an 8-byte word.
	binary.LittleEndian.PutUint64(dst.Bytes[4096:], 40)
	res := p.buf(t, p.a, 16, 0x40000)
	if err := p.a.PostSend(&transport.SendWR{ID: 4, Opcode: transport.WRAtomicFetchAdd, Flags: transport.SendSignaled,
		SGL: []transport.SGE{res.SGE(0, 8)}, RemoteAddr: dst.Addr + 4096, RKey: dst.RKey, CompareAdd: 2}); err != nil {
		t.Fatal(err)
	}
	if err := p.a.PostSend(&transport.SendWR{ID: 5, Opcode: transport.WRAtomicCmpAndSwp, Flags: transport.SendSignaled,
		SGL: []transport.SGE{res.SGE(8, 8)}, RemoteAddr: dst.Addr + 4096, RKey: dst.RKey, CompareAdd: 42, Swap: 99}); err != nil {
		t.Fatal(err)
	}
	wcs = p.waitWC(t, p.a.SendCQ, 2)
	if wcs[0].Status != 0 || wcs[1].Status != 0 {
		t.Fatalf("atomic completions %+v", wcs)
	}
	if got := binary.LittleEndian.Uint64(res.Bytes[0:]); got != 40 {
		t.Errorf("FETCH_ADD returned %d, want 40", got)
	}
	if got := binary.LittleEndian.Uint64(res.Bytes[8:]); got != 42 {
		t.Errorf("COMPARE_SWAP returned %d, want 42", got)
	}
	if got := binary.LittleEndian.Uint64(dst.Bytes[4096:]); got != 99 {
		t.Errorf("target is %d, want 99", got)
	}
	if c := p.a.Node.Counters.Get(transport.RetransmitTimeouts); c != 0 {
		t.Errorf("retransmit_timeouts %d on a lossless link", c)
	}
}
