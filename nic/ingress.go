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

// rxTo is where ingress sends a packet.
type rxTo uint8

const (
	rxDropped rxTo = iota // dropped, and counted, by ingress
	rxGSI                 // to the GSI (QP1)
	rxClosed              // to no QP: a lingering closed QP may answer it
	rxGroup               // to every admitted member of a multicast group
	rxQP                  // to one QP
)

// verdict is what ingress decided for a packet; the caller acts on it
// (receive), so that ingress needs to know nothing of workers.
type verdict struct {
	to      rxTo
	request bool  // rxQP, rxGroup: a request (the receive side), else a response
	q       *QP   // rxQP
	group   []*QP // rxGroup: the group's members, each to be admitted (admit)
}

// Deliver takes a batch of received RoCEv2 packets (netstack's Deliver)
// from a goroutine that is no worker: every packet is copied to its QP's
// worker.
func (d *Device) Deliver(pkts []netstack.RxPacket) {
	for i := range pkts {
		p := &pkts[i]
		d.receive(nil, p.Transport, p.IPHeader, gid.FromAddr(p.Src), gid.FromAddr(p.Dst), p.SrcPort)
	}
}

// receive runs ingress on one packet and acts on its verdict: the packet
// of a QP the calling worker (on; nil: none) owns meets the engine at
// once, in the caller's buffer; any other QP's is copied to its worker.
func (d *Device) receive(on *worker, tp, iphdr []byte, src, dst gid.GID, sport uint16) {
	var rx transport.RxPacket
	v := d.ingress(&rx, tp, iphdr, src, dst, sport)
	switch v.to {
	case rxGSI:
		d.gsiInput(&rx.Packet, iphdr, src, dst)
	case rxClosed:
		if !d.answerClosed(rx.BTH.DestQP(), &rx) {
			d.ctr.Inc(transport.RcvdDropped)
		}
	case rxQP:
		d.give(on, v.q, &rx, tp, v.request)
	case rxGroup:
		self := d.isLocal(src)
		for _, q := range v.group {
			if d.admit(q, &rx.Packet, src, dst, self) {
				m := rx // each member its own view, as each had its own skb in rxe
				d.give(on, q, &m, tp, v.request)
			}
		}
	}
}

// give hands q its packet: handled at once if on owns q, else copied to
// q's worker.
func (d *Device) give(on *worker, q *QP, rx *transport.RxPacket, tp []byte, request bool) {
	if on != nil && q.w == on {
		on.handle(q, rx, request)
		return
	}
	d.enqueueRx(q, rx, tp, request)
}

// ingress parses one packet into rx and checks it as rxe_recv.c does
// (opcode, TVer, P_Key, destination QP; for a QP's own packet also its
// type and path), and reports where it goes. It acts on nothing but the
// counters of what it drops.
func (d *Device) ingress(rx *transport.RxPacket, tp, iphdr []byte, src, dst gid.GID, sport uint16) verdict {
	*rx = transport.RxPacket{SrcGID: src, DstGID: dst, IPHeader: iphdr, SrcPort: sport}
	if err := rx.Parse(tp); err != nil {
		d.ctr.Inc(transport.RcvdDropped)
		return verdict{}
	}
	bth := rx.BTH
	qpn := bth.DestQP()
	// TVer 0; P_Key must match the default full-member key (low 15 bits).
	if bth.TVer() != 0 || bth.PKey()&0x7fff != 0x7fff || qpn == 0 {
		d.ctr.Inc(transport.RcvdDropped)
		return verdict{}
	}
	request := rx.Op.Flags&wire.FlagRequest != 0
	switch qpn {
	case GSIQPN:
		return verdict{to: rxGSI}
	case wire.MulticastQPN:
		// rxe_rcv_mcast_pkt: a UD packet, to a group with members.
		members := d.mcast.load()[dst]
		if len(members) == 0 || bth.Opcode().Transport() != wire.TransportUD {
			d.ctr.Inc(transport.RcvdDropped)
			return verdict{}
		}
		return verdict{to: rxGroup, group: members, request: request}
	}
	d.mu.RLock()
	q := d.qps[qpn]
	d.mu.RUnlock()
	if q == nil {
		return verdict{to: rxClosed}
	}
	if !d.admit(q, &rx.Packet, src, dst, false) {
		return verdict{}
	}
	return verdict{to: rxQP, q: q, request: request}
}

// admit checks a packet against a QP it is for (rxe's check_type_state and
// check_addr), counting a drop. self: the packet came from one of the
// device's own GIDs, which a multicast member made with BlockSelfMcastLB
// does not take from itself (not counted: it is not a drop).
func (d *Device) admit(q *QP, pkt *wire.Packet, src, dst gid.GID, self bool) bool {
	if self && q.blockSelfMcast && pkt.DETH != nil && pkt.DETH.SrcQP() == q.QPN() {
		return false
	}
	typ := q.tq.Type()
	if pkt.BTH.Opcode().Transport() != typeTransport(typ) {
		q.tq.Counters().Inc(transport.RcvdDropped)
		d.ctr.Inc(transport.RcvdDropped)
		return false
	}
	if typ == transport.QPTypeRC || typ == transport.QPTypeUC {
		// The packet must come from the QP's path (rxe: check_addr).
		a, _ := q.tq.Query()
		if a.AV.DGID != src || a.AV.SGID != dst {
			q.tq.Counters().Inc(transport.RcvdDropped)
			d.ctr.Inc(transport.RcvdDropped)
			return false
		}
	}
	return true
}

// enqueueRx copies a packet out of the caller's buffer (tp, and the IP
// header rx holds) to q's worker.
func (d *Device) enqueueRx(q *QP, rx *transport.RxPacket, tp []byte, request bool) {
	v := d.rxPool.Get().(*rxItem)
	if len(tp)+len(rx.IPHeader) > len(v.buf) {
		d.putRx(v)
		d.ctr.Inc(transport.RcvdDropped)
		return
	}
	n := copy(v.buf, tp)
	ipc := v.buf[n : n+copy(v.buf[n:], rx.IPHeader)]
	if err := v.rx.Packet.Parse(v.buf[:n]); err != nil {
		d.putRx(v)
		return
	}
	v.rx.SrcGID, v.rx.DstGID, v.rx.IPHeader, v.rx.SrcPort = rx.SrcGID, rx.DstGID, ipc, rx.SrcPort
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
