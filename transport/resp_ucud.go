package transport

import (
	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/transport/wire"
)

// ucRequest: UC has no ACKs and no retries. A missing packet drops the rest
// of its message; the next FIRST or ONLY starts over.
func (rs *recvSide) ucRequest(s *qpSnap, p *RxPacket) {
	q := rs.q
	psn := wire.PSN(p.BTH.PSN())
	info := p.Op
	if rs.ucDrop || psn != rs.psn {
		if !info.Has(wire.FlagStart) {
			rs.ucDrop = true
			rs.abandon()
			q.inc(RcvdDropped)
			return
		}
		rs.ucDrop = false
		rs.abandon()
	}
	rs.psn = psn.Add(1)
	drop := func() {
		rs.ucDrop = true
		rs.abandon()
		q.inc(RcvdDropped)
	}
	if !rs.seqOK(info) || !accessOK(info, s.attr.AccessFlags) || !lengthOK(info, len(p.Payload), s.mtu) {
		drop()
		return
	}
	needWQE := info.Has(wire.FlagRecvWQE) && (info.Has(wire.FlagSend) || info.Has(wire.FlagEnd))
	if needWQE && !rs.popRecv() {
		drop()
		return
	}
	if needWQE && rs.cur.wr.Fault != WCSuccess {
		rs.wc = WC{Status: rs.cur.wr.Fault, Opcode: WCRecv}
		rs.completeRecv(&rs.wc)
		drop()
		return
	}
	switch {
	case info.Has(wire.FlagSend):
		c := &rs.cur
		n := uint64(len(p.Payload))
		if c.off+n > c.length || (n > 0 && !rs.scatterRecv(c.off, p.Payload)) {
			// IBA: a UC receive too small completes in error.
			rs.abandon()
			rs.wc = WC{Status: WCLocLenErr, Opcode: WCRecv}
			rs.completeRecv(&rs.wc)
			rs.ucDrop = !info.Has(wire.FlagEnd)
			return
		}
		c.off += n
		if !info.Has(wire.FlagEnd) {
			rs.inMsg = msgSend
			return
		}
		rs.inMsg = msgNone
		rs.wc = WC{Status: WCSuccess, Opcode: WCRecv, ByteLen: uint32(c.off), Solicited: p.BTH.SE()}
		if p.ImmDt != nil {
			rs.wc.Flags |= WCWithImm
			rs.wc.ImmData = p.ImmDt.Imm()
		}
		rs.completeRecv(&rs.wc)
	case info.Has(wire.FlagWrite):
		if info.Has(wire.FlagStart) {
			va, rkey, l := p.RETH.VA(), p.RETH.RKey(), uint64(p.RETH.Length())
			if l > 0 {
				r, err := q.env.Memory.Remote(q.pd, q.qpn, rkey, va, l, mem.RemoteWrite)
				if err != nil || l > MaxMessageSize {
					drop()
					return
				}
				rs.writeRef, rs.hasWrite = r, true
			}
			rs.writeOff, rs.writeLen = 0, l
		}
		n := uint64(len(p.Payload))
		rest := rs.writeLen - rs.writeOff
		if n > rest || (info.Has(wire.FlagEnd) && n != rest) {
			drop()
			return
		}
		if n > 0 {
			rs.writeRef.WriteAt(p.Payload, int64(rs.writeOff))
		}
		rs.writeOff += n
		if !info.Has(wire.FlagEnd) {
			rs.inMsg = msgWrite
			return
		}
		rs.inMsg = msgNone
		if rs.hasWrite {
			rs.writeRef.Release()
			rs.hasWrite = false
		}
		if p.ImmDt != nil {
			rs.wc = WC{Status: WCSuccess, Opcode: WCRecvRDMAWithImm, ByteLen: uint32(rs.writeLen), Flags: WCWithImm, ImmData: p.ImmDt.Imm(), Solicited: p.BTH.SE()}
			rs.completeRecv(&rs.wc)
		}
	default:
		drop()
	}
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
	if len(p.IPHeader) == wire.IPv4HeaderLen {
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
