package transport

import (
	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/transport/wire"
)

// maxRespPackets is how many response packets one RunRecv sends before it
// yields; a long READ response continues on the next run.
const maxRespPackets = 256

// respItem is one queued response: a READ response stream, or a small
// packet (ACK, NAK, atomic ACK, zero-length read response) kept in order
// behind it.
type respItem struct {
	stream bool
	// stream
	ref    mem.Ref
	hasRef bool
	psn    wire.PSN // next response PSN
	last   wire.PSN
	first  bool // the next packet starts the response
	off    uint64
	length uint64 // bytes of the whole (re)sent response
	msn    uint32
	// small packet
	f wire.PacketFields
}

func (rs *recvSide) ackFields(op wire.Opcode, psn wire.PSN, s *qpSnap) wire.PacketFields {
	return wire.PacketFields{BTH: wire.BTHFields{Opcode: op, PKey: wire.DefaultPKey, DestQP: s.attr.DestQPN, PSN: uint32(psn)}}
}

// queueAck queues an ACKNOWLEDGE with syndrome syn (ACK, RNR NAK or NAK).
// A plain ACK waits as the pending one, replacing the one before it.
func (rs *recvSide) queueAck(syn uint8, psn wire.PSN, s *qpSnap) {
	f := rs.ackFields(wire.RCAcknowledge, psn, s)
	f.AETH = wire.AETHFields{Syndrome: syn, MSN: rs.msn}
	if syn == wire.AETHAck|wire.AETHInvalidCredits {
		rs.ack, rs.ackPending = f, true
		return
	}
	if wire.SyndromeType(syn) != wire.AETHAck {
		rs.q.inc(NAKsSent)
	}
	rs.queue(respItem{f: f})
}

// queue appends a response behind the pending ACK, if any.
func (rs *recvSide) queue(it respItem) {
	rs.queuePendingAck()
	rs.respQ = append(rs.respQ, it)
}

// queuePendingAck moves the pending ACK into the response queue.
func (rs *recvSide) queuePendingAck() {
	if rs.ackPending {
		rs.ackPending = false
		rs.respQ = append(rs.respQ, respItem{f: rs.ack})
	}
}

func (rs *recvSide) queueAtomicAck(psn wire.PSN, orig uint64, s *qpSnap) {
	f := rs.ackFields(wire.RCAtomicAcknowledge, psn, s)
	f.AETH = wire.AETHFields{Syndrome: wire.AETHAck | wire.AETHInvalidCredits, MSN: rs.msn}
	f.AtomicAckETH = orig
	rs.queue(respItem{f: f})
}

func (rs *recvSide) queueEmptyReadResponse(psn wire.PSN, s *qpSnap) {
	f := rs.ackFields(wire.RCRDMAReadResponseOnly, psn, s)
	f.AETH = wire.AETHFields{Syndrome: wire.AETHAck | wire.AETHInvalidCredits, MSN: rs.msn}
	rs.queue(respItem{f: f})
}

// pump sends queued responses in order, up to maxRespPackets.
func (rs *recvSide) pump(s *qpSnap) {
	sent := 0
	for len(rs.respQ) > 0 && sent < maxRespPackets {
		it := &rs.respQ[0]
		if !it.stream {
			rs.emit(&it.f, nil, 0, s)
			sent++
			rs.popResp()
			continue
		}
		for sent < maxRespPackets {
			mtu := uint64(s.mtu)
			n := min(mtu, it.length-it.off)
			lastPkt := it.psn == it.last
			var op wire.Opcode
			switch {
			case it.first && lastPkt:
				op = wire.RCRDMAReadResponseOnly
			case it.first:
				op = wire.RCRDMAReadResponseFirst
			case lastPkt:
				op = wire.RCRDMAReadResponseLast
			default:
				op = wire.RCRDMAReadResponseMiddle
			}
			f := rs.ackFields(op, it.psn, s)
			f.AETH = wire.AETHFields{Syndrome: wire.AETHAck | wire.AETHInvalidCredits, MSN: it.msn}
			rs.emit(&f, it, int(n), s)
			sent++
			it.off += n
			it.first = false
			if lastPkt {
				if it.hasRef {
					it.ref.Release()
				}
				rs.popResp()
				break
			}
			it.psn = it.psn.Add(1)
		}
	}
}

func (rs *recvSide) popResp() {
	copy(rs.respQ, rs.respQ[1:])
	rs.respQ[len(rs.respQ)-1] = respItem{}
	rs.respQ = rs.respQ[:len(rs.respQ)-1]
}

// emit builds one response packet; a stream item supplies n payload bytes
// from its MR at its current offset.
func (rs *recvSide) emit(f *wire.PacketFields, it *respItem, n int, s *qpSnap) {
	q := rs.q
	info := f.BTH.Opcode.Info()
	h := q.env.Out.Headroom()
	buf := q.env.Out.Alloc(wire.Len(info, n))
	pkt := buf[h:]
	f.EncodeHeaders(pkt, n)
	if n > 0 {
		it.ref.ReadAt(pkt[info.HdrLen:info.HdrLen+n], int64(it.off))
	}
	rs.tx = append(rs.tx, TxPacket{Buf: buf, Headroom: h, AV: &s.attr.AV, SrcPort: s.srcPort, SrcQPN: q.qpn})
	q.inc(SentPkts)
	if len(rs.tx) >= txBatch {
		rs.flushTx()
	}
}

func (rs *recvSide) flushTx() {
	if len(rs.tx) == 0 {
		return
	}
	rs.q.env.Out.Send(rs.tx)
	clear(rs.tx)
	rs.tx = rs.tx[:0]
}
