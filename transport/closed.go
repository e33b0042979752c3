package transport

import (
	"github.com/vrnic/vrnicd/transport/wire"
)

// ClosedQP is what a destroyed RC QP leaves behind: enough to acknowledge
// again the SEND and WRITE requests its responder had already taken. The
// last ACK of a conversation can be lost after the QP that sent it is
// gone; the peer then retransmits to a QPN nobody answers, and kernel rxe,
// for which retry_cnt 7 never runs out, retransmits for ever. Repeating an
// ACK the peer should have had changes nothing it did not already know
// (TCP's TIME-WAIT re-acknowledges a retransmitted FIN the same way).
// READs and atomics get no answer: their memory and saved results are
// gone.
type ClosedQP struct {
	QPN     uint32
	destQPN uint32
	av      AddressVector
	srcPort uint16
	ePSN    wire.PSN // the PSN the responder expected next
	msn     uint32
}

// Closed returns what the QP leaves behind; ok is false for a QP that is
// not RC or whose responder never reached RTR. Call it once both owners
// have stopped for good (after Destroy), as it reads the responder's state.
func (q *QP) Closed() (c ClosedQP, ok bool) {
	rs := &q.rcv
	if q.typ != QPTypeRC || !rs.connected {
		return ClosedQP{}, false
	}
	s := q.snap.Load()
	return ClosedQP{QPN: q.qpn, destQPN: s.attr.DestQPN, av: s.attr.AV, srcPort: s.srcPort, ePSN: rs.psn, msn: rs.msn}, true
}

// Answer sends the ACK a live responder would send to p, a duplicate SEND
// or WRITE request (acknowledged again with the last PSN received, as
// recvSide.duplicate and rxe's duplicate_request do) on the QP's path, and
// reports whether it did. Anything else gets no answer.
func (c *ClosedQP) Answer(p *RxPacket, out Output) bool {
	info := p.Op
	if info == nil || p.BTH.Opcode().Transport() != wire.TransportRC || !info.Has(wire.FlagRequest) ||
		!(info.Has(wire.FlagSend) || info.Has(wire.FlagWrite)) {
		return false
	}
	if p.SrcGID != c.av.DGID || p.DstGID != c.av.SGID || !wire.PSN(p.BTH.PSN()).Before(c.ePSN) {
		return false
	}
	f := wire.PacketFields{
		BTH:  wire.BTHFields{Opcode: wire.RCAcknowledge, PKey: wire.DefaultPKey, DestQP: c.destQPN, PSN: uint32(c.ePSN.Sub(1))},
		AETH: wire.AETHFields{Syndrome: wire.AETHAck | wire.AETHInvalidCredits, MSN: c.msn},
	}
	h := out.Headroom()
	buf := out.Alloc(wire.Len(wire.RCAcknowledge.Info(), 0))
	f.EncodeHeaders(buf[h:], 0)
	out.Send([]TxPacket{{Buf: buf, Headroom: h, AV: &c.av, SrcPort: c.srcPort, SrcQPN: c.QPN}})
	return true
}
