package transport_test

import (
	"bytes"
	"testing"

	"github.com/vrnic/vrnicd/transport"
	tt "github.com/vrnic/vrnicd/transport/transporttest"
	"github.com/vrnic/vrnicd/transport/wire"
)

// After a retransmit timeout only the oldest unacknowledged packet goes
// out again, with AckReq; the rest of the window waits for the peer's
// answer and then resumes from what it has not acknowledged. A slow peer
// is not handed the whole window again on top of its backlog.
func TestTimeoutProbesWithTheOldestPacket(t *testing.T) {
	for _, tc := range []struct {
		name     string
		drop     func(p *pair, f *tt.Frame, first wire.PSN) bool
		resent   []uint32 // PSN offsets sent again after the timeout, in order
		wantRetx uint64
	}{
		{
			// The responder had everything; its ACK was lost. The probe is
			// a duplicate, whose ACK covers the message.
			name: "ACK lost",
			drop: func(p *pair, f *tt.Frame, first wire.PSN) bool {
				return f.From == p.b.Node && f.Pkt.BTH.Opcode() == wire.RCAcknowledge && f.Pkt.BTH.PSN() == uint32(first.Add(15))
			},
			resent: []uint32{0}, wantRetx: 1,
		},
		{
			// The last packet was lost: nothing came after it to draw a
			// sequence NAK. The probe's ACK covers 0..14, then 15 goes again.
			name: "last request lost",
			drop: func(p *pair, f *tt.Frame, first wire.PSN) bool {
				return f.From == p.a.Node && f.Pkt.BTH.PSN() == uint32(first.Add(15))
			},
			resent: []uint32{0, 15}, wantRetx: 2,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, 7, tt.Options{Timeout: 14, PSN: [2]uint32{0xfffff8, 0x100}})
			src := p.buf(t, p.a, 16<<10, 0x1000)
			dst := p.buf(t, p.b, 16<<10, 0x2000)
			a, _ := p.a.QP.Query()
			first := wire.PSN(a.SQPSN)
			dropped := false
			var sent []uint32
			ackReq := map[uint32]bool{}
			seen := map[uint32]bool{}
			p.net.Faults.Drop = func(f *tt.Frame) bool {
				if f.From == p.a.Node { // every request a sends, lost or not
					off := uint32(wire.PSN(f.Pkt.BTH.PSN()).Diff(first))
					if seen[off] {
						sent = append(sent, off)
						ackReq[off] = f.Pkt.BTH.AckReq()
					}
					seen[off] = true
				}
				if !dropped && tc.drop(p, f, first) {
					dropped = true
					return true
				}
				return false
			}
			post(t, p.a, transport.SendWR{ID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
				SGL: []transport.SGE{src.SGE(0, 16<<10)}, RemoteAddr: dst.Addr, RKey: dst.RKey})
			wcs := p.waitWC(t, p.a.SendCQ, 1)
			if wcs[0].Status != transport.WCSuccess {
				t.Fatalf("status %v", wcs[0].Status)
			}
			if !dropped {
				t.Fatal("the fault never matched")
			}
			c := p.a.QP.Counters()
			if c.Get(transport.RetransmitTimeouts) != 1 || c.Get(transport.RetransmittedPkts) != tc.wantRetx {
				t.Errorf("timeouts %d, retransmitted %d; want 1, %d", c.Get(transport.RetransmitTimeouts),
					c.Get(transport.RetransmittedPkts), tc.wantRetx)
			}
			if len(sent) != len(tc.resent) {
				t.Fatalf("resent PSN offsets %v, want %v", sent, tc.resent)
			}
			for i := range sent {
				if sent[i] != tc.resent[i] {
					t.Fatalf("resent PSN offsets %v, want %v", sent, tc.resent)
				}
			}
			if !ackReq[0] {
				t.Error("the probe went without AckReq")
			}
		})
	}
}

// A probing READ asks for every response still missing in one request;
// its first response is progress, and the resumed window must not ask
// for the same responses again while they are on the way.
func TestTimeoutProbeReadIsNotRequestedTwice(t *testing.T) {
	p := newPair(t, 8, tt.Options{Timeout: 14})
	src := p.buf(t, p.b, 16<<10, 0x2000)
	dst := p.buf(t, p.a, 16<<10, 0x1000)
	fill(src.Bytes, 5)
	requests, dropped := 0, false
	p.net.Faults.Drop = func(f *tt.Frame) bool {
		if f.From != p.a.Node || f.Pkt.BTH.Opcode() != wire.RCRDMAReadRequest {
			return false
		}
		requests++
		if !dropped {
			dropped = true
			return true // the first request: only the timer recovers it
		}
		return false
	}
	post(t, p.a, transport.SendWR{ID: 1, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
		SGL: []transport.SGE{dst.SGE(0, 16<<10)}, RemoteAddr: src.Addr, RKey: src.RKey})
	wcs := p.waitWC(t, p.a.SendCQ, 1)
	if wcs[0].Status != transport.WCSuccess {
		t.Fatalf("status %v", wcs[0].Status)
	}
	if !bytes.Equal(dst.Bytes, src.Bytes) {
		t.Fatal("READ data differs")
	}
	if got := p.a.QP.Counters().Get(transport.RetransmitTimeouts); got != 1 {
		t.Errorf("retransmit timeouts %d, want 1", got)
	}
	if requests != 2 {
		t.Errorf("%d READ requests, want 2 (the lost one and the probe)", requests)
	}
}
