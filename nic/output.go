package nic

import (
	"errors"
	"net/netip"
	"sync"

	"github.com/vrnic/vrnicd/nic/gid"
	"github.com/vrnic/vrnicd/nic/netstack"
	"github.com/vrnic/vrnicd/transport"
)

// output is the engine's transport.Output: pooled buffers with room for the
// link headers, handed to the port in batches.
type output struct {
	d       *Device
	pool    sync.Pool // *[]byte of bufSize
	scratch sync.Pool // *txScratch
}

type txScratch struct {
	pkts  []netstack.TxPacket
	dests []netstack.Dest
}

func (o *output) Headroom() int { return netstack.Headroom }

func (o *output) Alloc(n int) []byte {
	if n+netstack.Headroom > bufSize {
		return make([]byte, netstack.Headroom+n)
	}
	b := o.pool.Get().(*[]byte)
	return (*b)[:netstack.Headroom+n]
}

func (o *output) free(b []byte) {
	if cap(b) == bufSize {
		b = b[:bufSize]
		o.pool.Put(&b)
	}
}

func (o *output) Send(pkts []transport.TxPacket) {
	o.send(pkts)
	for i := range pkts {
		o.free(pkts[i].Buf)
	}
}

// send hands pkts to the port (or loops them back) and leaves their
// buffers to the caller: neither keeps them.
func (o *output) send(pkts []transport.TxPacket) {
	d := o.d
	sc, _ := o.scratch.Get().(*txScratch)
	if sc == nil {
		sc = &txScratch{}
	}
	sc.pkts, sc.dests = sc.pkts[:0], sc.dests[:0]
	for i := range pkts {
		p := &pkts[i]
		if d.isLocal(p.AV.DGID) {
			d.loopback(p.Buf[p.Headroom:], gid.GID(p.AV.SGID), gid.GID(p.AV.DGID), p.AV.TrafficClass, p.AV.HopLimit, p.SrcPort)
			continue
		}
		if d.hasGroup(p.AV.DGID) {
			// The device's own QPs in the group get it too, as the IP
			// layer loops a multicast datagram back for kernel rxe.
			d.loopback(p.Buf[p.Headroom:], gid.GID(p.AV.SGID), gid.GID(p.AV.DGID), p.AV.TrafficClass, p.AV.HopLimit, p.SrcPort)
		}
		sc.dests = append(sc.dests, netstack.Dest{
			Src: netip.AddrFrom16(p.AV.SGID).Unmap(), Dst: netip.AddrFrom16(p.AV.DGID).Unmap(),
			SrcPort: p.SrcPort, TrafficClass: p.AV.TrafficClass, HopLimit: p.AV.HopLimit,
		})
	}
	j := 0
	for i := range pkts {
		p := &pkts[i]
		if d.isLocal(p.AV.DGID) {
			continue
		}
		sc.pkts = append(sc.pkts, netstack.TxPacket{Buf: p.Buf, Offset: p.Headroom, Dest: &sc.dests[j], QPN: p.SrcQPN})
		j++
	}
	if len(sc.pkts) > 0 {
		if port := d.port.Load(); port != nil {
			if _, err := port.s.Send(sc.pkts); err != nil {
				d.log.Debug("port refused packets", "err", err)
				if errors.Is(err, netstack.ErrTooBig) {
					d.tooBig(pkts) // dropped and counted; say whose
				}
			}
		}
	}
	o.scratch.Put(sc)
}

// ipSize is the IP packet p becomes: RoCEv2 over UDP over IPv4 or IPv6.
func ipSize(p *transport.TxPacket) int {
	n := len(p.Buf) - p.Headroom + 8 // UDP
	if netip.AddrFrom16(p.AV.DGID).Is4In6() {
		return n + 20
	}
	return n + 40
}

// tooBig says once per QP that its packets exceed the link's MTU: its path
// MTU is above the port's active MTU (set so, or the link's MTU went down
// under it). The port drops them, as kernel rxe's IP layer does, and
// counts them (tx_too_big); an RC QP ends in RETRY_EXC_ERR by its timer.
// It runs only when the port refused a batch for that reason.
func (d *Device) tooBig(pkts []transport.TxPacket) {
	for i := range pkts {
		p := &pkts[i]
		size := ipSize(p)
		if size <= d.LinkMTU() || d.isLocal(p.AV.DGID) {
			continue
		}
		if q, ok := d.QP(p.SrcQPN); ok && !q.mtuWarned.Swap(true) {
			d.log.Warn("QP's packets exceed the link's MTU and are dropped; use a path MTU up to the port's active MTU",
				"qpn", p.SrcQPN, "packet", size, "link_mtu", d.LinkMTU(), "active_mtu", d.ActiveMTU().Bytes())
		}
	}
}
