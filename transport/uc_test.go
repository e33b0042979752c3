package transport_test

import (
	"bytes"
	"testing"

	"github.com/vrnic/vrnicd/transport"
	tt "github.com/vrnic/vrnicd/transport/transporttest"
	"github.com/vrnic/vrnicd/transport/wire"
)

// UC: no ACKs; a lost packet drops the rest of its message, and the next
// FIRST/ONLY starts over in the same receive WQE.
func TestUCDropsMessageWithGapAndResyncsOnNextFirst(t *testing.T) {
	p, src, dst, fromB := newUCPair(t, 11, 5)
	dropped := false
	p.net.Faults.Drop = func(f *tt.Frame) bool {
		if !dropped && f.Pkt.BTH.Opcode() == wire.UCSendMiddle {
			dropped = true
			return true
		}
		return false
	}
	postRecv(t, p.b, 1, dst.SGE(0, 8192))
	post(t, p.a, transport.SendWR{ID: 1, Opcode: transport.WRSend, SGL: []transport.SGE{src.SGE(0, 3000)}})
	post(t, p.a, transport.SendWR{ID: 2, Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: []transport.SGE{src.SGE(100, 2500)}})
	p.waitWC(t, p.a.SendCQ, 1)
	wcs := p.waitWC(t, p.b.RecvCQ, 1)
	if wcs[0].Status != transport.WCSuccess || wcs[0].ByteLen != 2500 || wcs[0].WRID != 1 {
		t.Fatalf("receive %+v, want the second message in WQE 1", wcs[0])
	}
	if !bytes.Equal(dst.Bytes[:2500], src.Bytes[100:2600]) {
		t.Fatal("data differs")
	}
	if *fromB != 0 {
		t.Errorf("UC responder sent %d packets", *fromB)
	}
}

// UC: a SEND longer than its receive buffer completes that receive WQE
// with LOC_LEN_ERR and the rest of the message is dropped (UC has nobody
// to NAK, and a UC length error is not a QP error); the QP stays up and
// the next message takes the next receive WQE.
func TestUCSendTooLongFailsItsReceiveOnly(t *testing.T) {
	p, src, dst, fromB := newUCPair(t, 21, 3)
	postRecv(t, p.b, 1, dst.SGE(0, 1000))
	postRecv(t, p.b, 2, dst.SGE(4096, 4096))
	post(t, p.a, transport.SendWR{ID: 1, Opcode: transport.WRSend, SGL: []transport.SGE{src.SGE(0, 3000)}})
	post(t, p.a, transport.SendWR{ID: 2, Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: []transport.SGE{src.SGE(200, 500)}})
	p.waitWC(t, p.a.SendCQ, 1)
	wcs := p.waitWC(t, p.b.RecvCQ, 2)
	if len(wcs) != 2 {
		t.Fatalf("%d receive completions, want 2: %+v", len(wcs), wcs)
	}
	if wcs[0].WRID != 1 || wcs[0].Status != transport.WCLocLenErr {
		t.Errorf("first receive %+v, want WR 1 with LOC_LEN_ERR", wcs[0])
	}
	if wcs[1].WRID != 2 || wcs[1].Status != transport.WCSuccess || wcs[1].ByteLen != 500 {
		t.Errorf("second receive %+v, want WR 2, success, 500 bytes", wcs[1])
	}
	if !bytes.Equal(dst.Bytes[4096:4596], src.Bytes[200:700]) {
		t.Error("the second message's data differs")
	}
	if st := p.b.QP.State(); st != transport.StateRTS {
		t.Errorf("UC responder in %v after a receive too small, want RTS", st)
	}
	if *fromB != 0 {
		t.Errorf("UC responder sent %d packets", *fromB)
	}
}

// UC: a WRITE whose rkey does not check out is dropped without an answer
// and without touching memory or receive WQEs; the next WRITE (with
// immediate) is placed and consumes a receive WQE.
func TestUCWriteBadRKeyIsDroppedSilently(t *testing.T) {
	p, src, dst, fromB := newUCPair(t, 22, 11)
	postRecv(t, p.b, 7, dst.SGE(0, 16))
	post(t, p.a, transport.SendWR{ID: 1, Opcode: transport.WRRDMAWrite, SGL: []transport.SGE{src.SGE(0, 2000)},
		RemoteAddr: dst.Addr, RKey: dst.RKey ^ 0xff})
	post(t, p.a, transport.SendWR{ID: 2, Opcode: transport.WRRDMAWriteWithImm, Flags: transport.SendSignaled, ImmData: 0x1234,
		SGL: []transport.SGE{src.SGE(3000, 1500)}, RemoteAddr: dst.Addr + 4096, RKey: dst.RKey})
	p.waitWC(t, p.a.SendCQ, 1)
	wcs := p.waitWC(t, p.b.RecvCQ, 1)
	if len(wcs) != 1 {
		t.Fatalf("%d receive completions, want 1: %+v", len(wcs), wcs)
	}
	w := wcs[0]
	if w.WRID != 7 || w.Status != transport.WCSuccess || w.Opcode != transport.WCRecvRDMAWithImm ||
		w.ByteLen != 1500 || w.Flags&transport.WCWithImm == 0 || w.ImmData != 0x1234 {
		t.Errorf("receive %+v, want WR 7, RECV_RDMA_WITH_IMM, 1500 bytes, imm 0x1234", w)
	}
	if !bytes.Equal(dst.Bytes[4096:5596], src.Bytes[3000:4500]) {
		t.Error("the second WRITE's data differs")
	}
	if !bytes.Equal(dst.Bytes[:2000], make([]byte, 2000)) {
		t.Error("the WRITE with a bad rkey changed memory")
	}
	if got := p.b.QP.Counters().Get(transport.RcvdDropped); got == 0 {
		t.Error("the WRITE with a bad rkey was not counted as dropped")
	}
	if st := p.b.QP.State(); st != transport.StateRTS {
		t.Errorf("UC responder in %v after a bad rkey, want RTS", st)
	}
	if *fromB != 0 {
		t.Errorf("UC responder sent %d packets", *fromB)
	}
}

// newUCPair is a UC pair (seed) with an 8 KiB buffer on each side, a's
// filled by fill(src, fill0), and a count of the packets b sends (UC's
// responder must send none).
func newUCPair(t *testing.T, seed uint64, fill0 byte) (p *pair, src, dst *tt.Buffer, fromB *int) {
	t.Helper()
	p = newPair(t, seed, tt.Options{Type: transport.QPTypeUC})
	src = p.buf(t, p.a, 8192, 0x1000)
	dst = p.buf(t, p.b, 8192, 0x2000)
	fill(src.Bytes, fill0)
	fromB = new(int)
	p.net.Tap = func(f *tt.Frame) {
		if f.From == p.b.Node {
			*fromB++
		}
	}
	return p, src, dst, fromB
}
