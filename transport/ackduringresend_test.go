package transport_test

import (
	"testing"

	"github.com/vrnic/vrnicd/transport"
	tt "github.com/vrnic/vrnicd/transport/transporttest"
	"github.com/vrnic/vrnicd/transport/wire"
)

// respond hands q a response made here (as if it came off the wire).
func respond(t *testing.T, q *transport.QP, op wire.Opcode, psn uint32, syndrome uint8, msn uint32) {
	t.Helper()
	f := wire.PacketFields{BTH: wire.BTHFields{Opcode: op, PKey: wire.DefaultPKey, DestQP: q.QPN(), PSN: psn},
		AETH: wire.AETHFields{Syndrome: syndrome, MSN: msn}}
	b := make([]byte, f.EncodedLen())
	f.Encode(b)
	var rx transport.RxPacket
	if err := rx.Packet.Parse(b); err != nil {
		t.Fatal(err)
	}
	q.HandleResponse(&rx)
}

// Found by the interop suite against kernel rxe with reordering (see
// interop/README.md): a sequence NAK that is stale by the time it arrives
// (the responder sent it when a reordered packet overtook another, then
// got the rest and acknowledged the whole message) is followed at once by
// the ACK of the message's last PSN. The NAK starts a resend from its PSN;
// the ACK says every PSN of the message arrived (an ACK acknowledges every
// PSN up to its own: coalesced acknowledgement), so the SEND must complete,
// whether or not the resend has got through the message again. It must not
// stay active with every PSN acknowledged, where no response counts any
// more (all are before the acknowledged PSN) and no timer runs (nothing is
// outstanding): the SQ would stall for good.
func TestAckOfLastPSNDuringResendCompletesTheSend(t *testing.T) {
	p := newPair(t, 21, tt.Options{Timeout: 14, PSN: [2]uint32{0x100, 0x200}})
	src := p.buf(t, p.a, 8192, 0x10000)
	dst := p.buf(t, p.b, 8192, 0x20000)
	postRecv(t, p.b, 1, dst.SGE(0, 8192))
	// The responder gets all four packets; its responses are lost for now.
	p.net.Faults.Drop = func(f *tt.Frame) bool { return f.From == p.b.Node }
	post(t, p.a, transport.SendWR{ID: 7, Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: []transport.SGE{src.SGE(0, 4096)}})
	if err := p.net.Run(func() bool { return p.net.InFlight() == 0 && p.b.RecvCQ.Len() == 1 }, 10_000); err != nil {
		t.Fatalf("the SEND did not reach the responder: %v", err)
	}
	p.net.Faults.Drop = nil
	// PSNs 0x100..0x103: a stale NAK for 0x102, then the ACK of 0x103,
	// both read before the requester runs again.
	respond(t, p.a.QP, wire.RCAcknowledge, 0x102, wire.NakPSNSeqError, 0)
	respond(t, p.a.QP, wire.RCAcknowledge, 0x103, wire.AETHAck|wire.AETHInvalidCredits, 1)
	if err := p.net.Run(func() bool { return p.a.SendCQ.Len() == 1 }, 100_000); err != nil {
		t.Fatalf("the SEND never completed: %v; QP %+v", err, p.a.QP.Info())
	}
	if wc := tt.Poll(p.a.SendCQ); wc[0].Status != transport.WCSuccess || wc[0].WRID != 7 {
		t.Fatalf("completion %+v", wc[0])
	}
}
