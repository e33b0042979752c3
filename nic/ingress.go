package nic

import (
	"github.com/vrnic/vrnicd/nic/gid"
	"github.com/vrnic/vrnicd/nic/netstack"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/wire"
)

// bufSize holds the largest packet: 4096 bytes of payload, the biggest
// header set, pad, ICRC and the link headers in front.
const bufSize = 4096 + 128 + netstack.Headroom

// rxItem is a received packet copied out of the link's buffer, on its way
// to its QP's worker.
type rxItem struct {
	buf     []byte
	rx      transport.RxPacket
	q       *QP
	request bool
}

func (d *Device) putRx(it *rxItem) {
	it.rx, it.q = transport.RxPacket{}, nil
	d.rxPool.Put(it)
}

// Deliver takes a batch of received RoCEv2 packets (netstack's Deliver).
func (d *Device) Deliver(pkts []netstack.RxPacket) {
	for i := range pkts {
		p := &pkts[i]
		d.ingress(nil, p.Transport, p.IPHeader, gid.FromAddr(p.Src), gid.FromAddr(p.Dst), p.SrcPort)
	}
}

// ingress checks one packet as rxe_recv.c does and hands it to its QP: on
// the QP's own worker (on) at once, in the caller's buffer; else a copy
// goes to the QP's worker.
func (d *Device) ingress(on *worker, tp, iphdr []byte, src, dst gid.GID, sport uint16) {
	var pkt wire.Packet
	if err := pkt.Parse(tp); err != nil {
		d.ctr.Inc(transport.RcvdDropped)
		return
	}
	bth := pkt.BTH
	qpn := bth.DestQP()
	// TVer 0; P_Key must match the default full-member key (low 15 bits).
	if bth.TVer() != 0 || bth.PKey()&0x7fff != 0x7fff || qpn == 0 {
		d.ctr.Inc(transport.RcvdDropped)
		return
	}
	switch qpn {
	case GSIQPN:
		d.gsiInput(&pkt, iphdr, src, dst)
		return
	case wire.MulticastQPN:
		d.mcastInput(on, &pkt, tp, iphdr, src, dst, sport)
		return
	}
	d.mu.RLock()
	q := d.qps[qpn]
	d.mu.RUnlock()
	if q == nil {
		rx := transport.RxPacket{Packet: pkt, SrcGID: src, DstGID: dst, IPHeader: iphdr, SrcPort: sport}
		if !d.answerClosed(qpn, &rx) {
			d.ctr.Inc(transport.RcvdDropped)
		}
		return
	}
	d.toQP(on, q, &pkt, tp, iphdr, src, dst, sport)
}

// toQP checks the packet against its QP (rxe's check_type_state and
// check_addr) and hands it over: on the QP's own worker (on) at once, in
// the caller's buffer; else a copy goes to the QP's worker.
func (d *Device) toQP(on *worker, q *QP, pkt *wire.Packet, tp, iphdr []byte, src, dst gid.GID, sport uint16) {
	typ := q.tq.Type()
	if pkt.BTH.Opcode().Transport() != typeTransport(typ) {
		q.tq.Counters().Inc(transport.RcvdDropped)
		d.ctr.Inc(transport.RcvdDropped)
		return
	}
	if typ == transport.QPTypeRC || typ == transport.QPTypeUC {
		// The packet must come from the QP's path (rxe: check_addr).
		a, _ := q.tq.Query()
		if a.AV.DGID != src || a.AV.SGID != dst {
			q.tq.Counters().Inc(transport.RcvdDropped)
			d.ctr.Inc(transport.RcvdDropped)
			return
		}
	}
	request := pkt.Op.Flags&wire.FlagRequest != 0
	if on != nil && q.w == on {
		rx := transport.RxPacket{Packet: *pkt, SrcGID: src, DstGID: dst, IPHeader: iphdr, SrcPort: sport}
		on.handle(q, &rx, request)
		return
	}
	v := d.rxPool.Get().(*rxItem)
	if len(tp)+len(iphdr) > len(v.buf) {
		d.putRx(v)
		d.ctr.Inc(transport.RcvdDropped)
		return
	}
	n := copy(v.buf, tp)
	ipc := v.buf[n : n+copy(v.buf[n:], iphdr)]
	if err := v.rx.Packet.Parse(v.buf[:n]); err != nil {
		d.putRx(v)
		return
	}
	v.rx.SrcGID, v.rx.DstGID, v.rx.IPHeader, v.rx.SrcPort = src, dst, ipc, sport
	if q.rxQueued.Add(1) > inQueue {
		q.rxQueued.Add(-1)
		d.putRx(v) // the worker is that far behind: drop, as a full receive ring would
		q.tq.Counters().Inc(transport.RcvdDropped)
		d.ctr.Inc(transport.RcvdDropped)
		return
	}
	v.q, v.request = q, request
	q.w.enqueue(v)
}

func typeTransport(t transport.QPType) uint8 {
	switch t {
	case transport.QPTypeRC:
		return wire.TransportRC
	case transport.QPTypeUC:
		return wire.TransportUC
	}
	return wire.TransportUD
}
