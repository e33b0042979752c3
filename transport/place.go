package transport

import (
	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/transport/wire"
)

// placeFail says why a SEND or WRITE packet could not be placed. RC and UC
// place data the same way and differ only in what a failure means: the RC
// responder answers with a NAK and the QP goes to ERR (rcPlaceFailed), the
// UC responder has nobody to tell and drops the message (ucPlaceFailed).
type placeFail uint8

const (
	placed            placeFail = iota
	placeRecvTooSmall           // SEND longer than the receive buffer
	placeRecvLKey               // the receive WQE has a bad lkey
	placeInvalidate             // SEND_WITH_INV of an rkey that cannot be invalidated
	placeRETHLength             // WRITE whose RETH length is over 2^31
	placeRKey                   // WRITE rkey check failed (the error says how)
	placeWriteLength            // WRITE payload does not match the RETH length
)

// nextMSN counts a message the responder has finished (AETH MSN).
func (rs *recvSide) nextMSN() { rs.msn = (rs.msn + 1) & wire.MSNMask }

// placeSend writes one SEND packet's payload into the current receive WQE;
// at the end of the message it counts the MSN, carries out an invalidation
// (SEND_WITH_INV) and completes the WQE.
func (rs *recvSide) placeSend(p *RxPacket) placeFail {
	q := rs.q
	c := &rs.cur
	n := uint64(len(p.Payload))
	if c.off+n > c.length {
		return placeRecvTooSmall
	}
	if n > 0 && !rs.scatterRecv(c.off, p.Payload) {
		return placeRecvLKey
	}
	c.off += n
	if !p.Op.Has(wire.FlagEnd) {
		rs.inMsg = msgSend
		return placed
	}
	rs.inMsg = msgNone
	rs.nextMSN()
	rs.wc = WC{Status: WCSuccess, Opcode: WCRecv, ByteLen: uint32(c.off), Solicited: p.BTH.SE()}
	if p.ImmDt != nil {
		rs.wc.Flags |= WCWithImm
		rs.wc.ImmData = p.ImmDt.Imm()
	}
	if p.IETH != nil {
		rkey := p.IETH.RKey()
		if err := q.env.Memory.RemoteInvalidate(q.pd, q.qpn, rkey); err != nil {
			q.log.Debug("SEND_WITH_INV of a key that cannot be invalidated", "rkey", rkey, "err", err)
			return placeInvalidate
		}
		rs.wc.Flags |= WCWithInv
		rs.wc.ImmData = rkey
	}
	rs.completeRecv(&rs.wc)
	return placed
}

// placeWrite writes one WRITE packet's payload into the MR its RETH names
// (checked at FIRST/ONLY); at the end of the message it counts the MSN and,
// with immediate data, completes the receive WQE. err is the rkey check's
// error for placeRKey.
func (rs *recvSide) placeWrite(p *RxPacket) (placeFail, error) {
	q := rs.q
	info := p.Op
	if info.Has(wire.FlagStart) {
		va, rkey, l := p.RETH.VA(), p.RETH.RKey(), uint64(p.RETH.Length())
		if l > MaxMessageSize {
			return placeRETHLength, nil
		}
		if l > 0 {
			r, err := q.env.Memory.Remote(q.pd, q.qpn, rkey, va, l, mem.RemoteWrite)
			if err != nil {
				q.log.Debug("WRITE rkey check failed", "rkey", rkey, "va", va, "len", l, "err", err)
				return placeRKey, err
			}
			rs.writeRef, rs.hasWrite = r, true
		}
		rs.writeOff, rs.writeLen = 0, l
	}
	n := uint64(len(p.Payload))
	rest := rs.writeLen - rs.writeOff
	if n > rest || (info.Has(wire.FlagEnd) && n != rest) {
		return placeWriteLength, nil
	}
	if n > 0 {
		rs.writeRef.WriteAt(p.Payload, int64(rs.writeOff))
	}
	rs.writeOff += n
	if !info.Has(wire.FlagEnd) {
		rs.inMsg = msgWrite
		return placed, nil
	}
	rs.inMsg = msgNone
	if rs.hasWrite {
		rs.writeRef.Release()
		rs.hasWrite = false
	}
	rs.nextMSN()
	if p.ImmDt != nil {
		rs.wc = WC{Status: WCSuccess, Opcode: WCRecvRDMAWithImm, ByteLen: uint32(rs.writeLen), Flags: WCWithImm, ImmData: p.ImmDt.Imm(), Solicited: p.BTH.SE()}
		rs.completeRecv(&rs.wc)
	}
	return placed, nil
}

// rcPlaceFailed answers a placement failure on RC: a NAK, and the QP goes
// to ERR (the receive WQE in progress completes in error).
func (rs *recvSide) rcPlaceFailed(s *qpSnap, psn wire.PSN, why placeFail, err error) {
	switch why {
	case placeRecvTooSmall:
		rs.classC(s, psn, WCLocLenErr, "SEND longer than the receive buffer")
	case placeRecvLKey:
		rs.fatalNAK(s, wire.NakRemoteOperation, psn, WCLocProtErr, EventQPFatal, "receive WQE with a bad lkey")
	case placeInvalidate:
		rs.classC(s, psn, WCRemInvReqErr, "SEND_WITH_INV with an invalid rkey")
	case placeRETHLength:
		rs.classC(s, psn, WCLocLenErr, "RETH length over 2^31")
	case placeRKey:
		rs.fatalNAK(s, nakFor(err), psn, WCLocAccessErr, EventQPAccessErr, "WRITE rkey check failed")
	case placeWriteLength:
		rs.classC(s, psn, WCLocLenErr, "WRITE payload does not match the RETH length")
	}
}

// ucPlaceFailed handles a placement failure on UC. A SEND that does not fit
// its receive WQE completes it in error (IBA: a UC receive too small
// completes in error) and the rest of the message is dropped; any other
// failure drops the message and leaves the receive WQE for the next one.
func (rs *recvSide) ucPlaceFailed(p *RxPacket, why placeFail) {
	switch why {
	case placeRecvTooSmall, placeRecvLKey:
		rs.abandon()
		rs.wc = WC{Status: WCLocLenErr, Opcode: WCRecv}
		rs.completeRecv(&rs.wc)
		rs.ucDrop = !p.Op.Has(wire.FlagEnd)
	default:
		rs.ucDropMessage()
	}
}
