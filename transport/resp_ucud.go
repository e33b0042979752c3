package transport

import (
	"github.com/vrnic/vrnicd/header"
	"github.com/vrnic/vrnicd/transport/wire"
)

// ucRequest: UC has no ACKs and no retries. A missing packet drops the rest
// of its message; the next FIRST or ONLY starts over. Data is placed as on
// RC (placeSend, placeWrite); a failure drops the message.
func (rs *recvSide) ucRequest(s *qpSnap, p *RxPacket) {
	if !rs.ucInSequence(p) {
		return
	}
	info := p.Op
	if !rs.seqOK(info) || !accessOK(info, s.attr.AccessFlags) || !lengthOK(info, len(p.Payload), s.mtu) {
		rs.ucDropMessage()
		return
	}
	if !rs.ucTakeWQE(info) {
		return
	}
	var why placeFail
	switch {
	case info.Has(wire.FlagSend):
		why = rs.placeSend(p)
	case info.Has(wire.FlagWrite):
		why, _ = rs.placeWrite(p)
	default:
		rs.ucDropMessage()
		return
	}
	if why != placed {
		rs.ucPlaceFailed(p, why)
	}
}

// ucInSequence checks the packet's PSN. After a gap, or while a message is
// being dropped, only a FIRST or ONLY starts over; anything else is dropped.
// true: the packet is the next one to take.
func (rs *recvSide) ucInSequence(p *RxPacket) bool {
	psn := wire.PSN(p.BTH.PSN())
	if rs.ucDrop || psn != rs.psn {
		if !p.Op.Has(wire.FlagStart) {
			rs.ucDropMessage()
			return false
		}
		rs.ucDrop = false
		rs.abandon()
	}
	rs.psn = psn.Add(1)
	return true
}

// ucTakeWQE takes the receive WQE the packet needs (needsRecvWQE). UC has
// no RNR NAK: without one, or with a malformed one (which completes in
// error), the message is dropped.
func (rs *recvSide) ucTakeWQE(info *wire.OpInfo) bool {
	if !needsRecvWQE(info) {
		return true
	}
	if !rs.popRecv() {
		rs.ucDropMessage()
		return false
	}
	if rs.cur.wr.Fault != WCSuccess {
		rs.wc = WC{Status: rs.cur.wr.Fault, Opcode: WCRecv}
		rs.completeRecv(&rs.wc)
		rs.ucDropMessage()
		return false
	}
	return true
}

// ucDropMessage drops the packet and the rest of its message.
func (rs *recvSide) ucDropMessage() {
	rs.ucDrop = true
	rs.abandon()
	rs.q.inc(RcvdDropped)
}

// GRHLen is the room a UD receive buffer keeps for the Global Route Header.
const GRHLen = 40

// udRequest: check the Q_Key, take a receive WQE, write the 40-byte GRH
// (IPv4: 20 zero bytes and the IPv4 header; IPv6: the IPv6 header), then
// the payload.
func (rs *recvSide) udRequest(s *qpSnap, p *RxPacket) {
	q := rs.q
	if p.DETH == nil || p.DETH.QKey() != s.attr.QKey || len(p.Payload) > s.mtu {
		q.inc(RcvdDropped)
		return
	}
	if !rs.popRecv() {
		q.inc(RcvdDropped) // UD has no RNR: no receive WQE, no message
		return
	}
	c := &rs.cur
	n := uint64(len(p.Payload))
	if c.wr.Fault != WCSuccess {
		rs.wc = WC{Status: c.wr.Fault, Opcode: WCRecv}
		rs.completeRecv(&rs.wc)
		return
	}
	if c.length < n+GRHLen {
		rs.wc = WC{Status: WCLocLenErr, Opcode: WCRecv}
		rs.completeRecv(&rs.wc)
		return
	}
	var grh [GRHLen]byte
	if len(p.IPHeader) == header.IPv4HeaderLen {
		copy(grh[20:], p.IPHeader)
	} else {
		copy(grh[:], p.IPHeader)
	}
	if !rs.scatterRecv(0, grh[:]) || (n > 0 && !rs.scatterRecv(GRHLen, p.Payload)) {
		rs.wc = WC{Status: WCLocProtErr, Opcode: WCRecv}
		rs.completeRecv(&rs.wc)
		return
	}
	rs.psn = wire.PSN(p.BTH.PSN()).Add(1)
	rs.wc = WC{Status: WCSuccess, Opcode: WCRecv, ByteLen: uint32(n + GRHLen), Flags: WCWithGRH, SrcQP: p.DETH.SrcQP(), Solicited: p.BTH.SE()}
	if p.ImmDt != nil {
		rs.wc.Flags |= WCWithImm
		rs.wc.ImmData = p.ImmDt.Imm()
	}
	rs.completeRecv(&rs.wc)
}
