package nic

import (
	"encoding/binary"
	"net/netip"

	"github.com/vrnic/vrnicd/nic/gid"
	"github.com/vrnic/vrnicd/nic/netstack"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/wire"
)

// bufSize holds the largest packet: 4096 bytes of payload, the biggest
// header set, pad, ICRC and the link headers in front.
const bufSize = 4096 + 128 + netstack.Headroom

// rxItem is a received packet copied out of the link's buffer, on its way
// to a QP owner.
type rxItem struct {
	buf []byte
	rx  transport.RxPacket
}

func (d *Device) putRx(it *rxItem) {
	it.rx = transport.RxPacket{}
	d.rxPool.Put(it)
}

// Deliver takes a batch of received RoCEv2 packets (netstack's Deliver).
func (d *Device) Deliver(pkts []netstack.RxPacket) {
	for i := range pkts {
		p := &pkts[i]
		d.ingress(p.Transport, p.IPHeader, gid.FromAddr(p.Src), gid.FromAddr(p.Dst), p.SrcPort)
	}
}

// ingress checks one packet as rxe_recv.c does and hands it to its QP.
func (d *Device) ingress(tp, iphdr []byte, src, dst gid.GID, sport uint16) {
	var pkt wire.Packet
	if err := pkt.Parse(tp); err != nil {
		d.ctr.Inc(transport.RcvdDropped)
		return
	}
	bth := pkt.BTH
	qpn := bth.DestQP()
	// TVer 0; P_Key must match the default full-member key (low 15 bits).
	if bth.TVer() != 0 || bth.PKey()&0x7fff != 0x7fff || qpn == 0 || qpn == wire.MulticastQPN {
		d.ctr.Inc(transport.RcvdDropped)
		return
	}
	if qpn == GSIQPN {
		d.gsiInput(&pkt, iphdr, src, dst)
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
	typ := q.tq.Type()
	if bth.Opcode().Transport() != typeTransport(typ) {
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
	ch := q.reqIn
	if pkt.Op.Flags&wire.FlagRequest == 0 {
		ch = q.respIn
	}
	select {
	case ch <- v:
	default:
		d.putRx(v) // the owner is that far behind: drop, as a full receive ring would
		q.tq.Counters().Inc(transport.RcvdDropped)
		d.ctr.Inc(transport.RcvdDropped)
	}
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

// loopback synthesises the IP header a packet between two of the device's
// own GIDs would have had, and delivers it without the wire (rxe does the
// same for packets to its own MAC).
func (d *Device) loopback(tp []byte, src, dst gid.GID, tclass, hop uint8, sport uint16) {
	var h [wire.IPv6HeaderLen]byte
	var iphdr []byte
	if netip.AddrFrom16(dst).Is4In6() {
		iphdr = h[:wire.IPv4HeaderLen]
		iphdr[0], iphdr[1] = 0x45, tclass
		binary.BigEndian.PutUint16(iphdr[2:], uint16(wire.IPv4HeaderLen+wire.UDPHeaderLen+len(tp)))
		binary.BigEndian.PutUint16(iphdr[6:], 0x4000)
		iphdr[8], iphdr[9] = hop, 17
		copy(iphdr[12:16], src[12:])
		copy(iphdr[16:20], dst[12:])
		binary.BigEndian.PutUint16(iphdr[10:], wire.Checksum(iphdr))
	} else {
		iphdr = h[:]
		binary.BigEndian.PutUint32(iphdr[0:], 6<<28|uint32(tclass)<<20)
		binary.BigEndian.PutUint16(iphdr[4:], uint16(wire.UDPHeaderLen+len(tp)))
		iphdr[6], iphdr[7] = 17, hop
		copy(iphdr[8:24], src[:])
		copy(iphdr[24:40], dst[:])
	}
	d.ingress(tp, iphdr, src, dst, sport)
}
