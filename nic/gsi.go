package nic

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"

	"github.com/vrnic/vrnicd/header"
	"github.com/vrnic/vrnicd/nic/gid"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/wire"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
)

// GSIQPN is QP1, the General Services Interface of the port (IBA 13.5.1):
// the CM's MADs arrive there and leave from there.
const GSIQPN = 1

// gsiSrcPort is the UDP source port of QP1's packets: rxe gives every QP
// 0xC000 + hash_32(qpn, 14) at create time, 0xd872 for QP1 (as the kernel
// rping capture shows).
const gsiSrcPort = 0xC000 + uint16((GSIQPN*0x61C88647)>>(32-14))

// gsiHopLimit is the hop limit of a MAD reply: the kernel builds the reply's
// address handle from the work completion and the route (ib_init_ah_attr_from_wc),
// which gives an IP route's default TTL, 64.
const gsiHopLimit = 64

// MAD is one management datagram through QP1: received (From the peer's
// address, To ours, SrcQP the sender's QP) or to send (To the peer's QP1
// unless DestQP says otherwise; From our address, or zero to let the device
// pick one of the destination's family).
type MAD struct {
	From, To     netip.Addr
	SrcQP        uint32 // received: DETH source QP; the reply's destination QP
	DestQP       uint32 // to send: 0 means QP1
	TrafficClass uint8
	Data         [mad.Size]byte
}

// MADHandler takes a received CM MAD. It runs on the device's receive path:
// it must copy what it keeps and never block.
type MADHandler func(m *MAD)

// gsi is the device's QP1: the handler of the CM class, QP1's PSN and the
// counters per MAD class and CM message kind.
type gsi struct {
	cm  atomic.Pointer[MADHandler]
	psn atomic.Uint32
	ctr gsiCounters
}

// cmKinds are the CM attributes counted one by one (IBA Table 104); SIDR's
// request and reply share a pair.
var cmKinds = [...]struct {
	name string
	attr []uint16
}{
	{"req", []uint16{mad.AttrConnectRequest}}, {"rep", []uint16{mad.AttrConnectReply}},
	{"rtu", []uint16{mad.AttrReadyToUse}}, {"rej", []uint16{mad.AttrConnectReject}},
	{"mra", []uint16{mad.AttrMsgRcptAck}}, {"dreq", []uint16{mad.AttrDisconnectRequest}},
	{"drep", []uint16{mad.AttrDisconnectReply}},
	{"sidr", []uint16{mad.AttrServiceIDResReq, mad.AttrServiceIDResReqResp}},
}

// gsiCounters count QP1's traffic: CM MADs by kind and direction, MADs of
// other classes, and what QP1 refused.
type gsiCounters struct {
	cmIn, cmOut [len(cmKinds)]atomic.Uint64
	otherIn     atomic.Uint64 // MADs of classes vrnicd does not serve
	otherOut    atomic.Uint64 // their "unsupported" answers
	dropped     atomic.Uint64 // not a UD SEND of a 256-byte MAD with the GSI Q_Key, bad version or class, no handler
}

func cmKind(attr uint16) int {
	for i, k := range cmKinds {
		for _, a := range k.attr {
			if a == attr {
				return i
			}
		}
	}
	return -1
}

// count adds one MAD of b's class and attribute to in or out.
func (c *gsiCounters) count(b []byte, in bool) {
	if b[1] != mad.ClassCM {
		if in {
			c.otherIn.Add(1)
		} else {
			c.otherOut.Add(1)
		}
		return
	}
	if k := cmKind(binary.BigEndian.Uint16(b[16:])); k >= 0 {
		if in {
			c.cmIn[k].Add(1)
		} else {
			c.cmOut[k].Add(1)
		}
	}
}

// GSICounters calls yield with QP1's counters, in a fixed order: cm_rx_KIND
// and cm_tx_KIND per CM message kind, then gsi_rx_other, gsi_tx_other and
// gsi_dropped. Their shape is server.CounterFunc's.
func (d *Device) GSICounters(yield func(name string, v uint64)) {
	c := &d.gsi.ctr
	for i, k := range cmKinds {
		yield("cm_rx_"+k.name, c.cmIn[i].Load())
		yield("cm_tx_"+k.name, c.cmOut[i].Load())
	}
	yield("gsi_rx_other", c.otherIn.Load())
	yield("gsi_tx_other", c.otherOut.Load())
	yield("gsi_dropped", c.dropped.Load())
}

// SetCMHandler gives QP1's CM-class MADs to h (nil: none; they are dropped).
func (d *Device) SetCMHandler(h MADHandler) {
	if h == nil {
		d.gsi.cm.Store(nil)
		return
	}
	d.gsi.cm.Store(&h)
}

// gsiInput takes a packet for QP1: a UD SEND_ONLY carrying a 256-byte MAD
// with the GSI Q_Key (IBA 13.5.2.1; rxe's check_keys for QP1). A CM MAD
// goes to the CM handler; any other class gets the MAD layer's answer.
func (d *Device) gsiInput(p *wire.Packet, iphdr []byte, src, dst gid.GID) {
	g := &d.gsi
	if p.BTH.Opcode() != wire.UDSendOnly || p.DETH == nil || p.DETH.QKey() != wire.GSIQKey || len(p.Payload) != mad.Size {
		g.ctr.dropped.Add(1)
		d.ctr.Inc(transport.RcvdDropped)
		return
	}
	b := p.Payload
	class := b[1]
	// ib_mad's validate_mad: base version 1, and the subnet management
	// classes belong to QP0, never QP1.
	if b[0] != mad.BaseVersion || class == mad.ClassSubnLID || class == mad.ClassSubnDR {
		g.ctr.dropped.Add(1)
		return
	}
	g.ctr.count(b, true)
	m := MAD{From: src.Addr(), To: dst.Addr(), SrcQP: p.DETH.SrcQP(), TrafficClass: ipTrafficClass(iphdr)}
	copy(m.Data[:], b)
	if class == mad.ClassCM {
		if h := g.cm.Load(); h != nil {
			(*h)(&m)
			return
		}
	}
	d.answerUnsupported(&m)
}

// answerUnsupported answers a Get or Set nothing serves as the kernel's MAD
// layer does (mad.c generate_unmatched_resp): the MAD back as GetResp with
// status "unsupported method/attribute combination" (IBA 13.4.7). Other
// methods, responses included, get nothing.
func (d *Device) answerUnsupported(m *MAD) {
	method := m.Data[3]
	if method != mad.MethodGet && method != mad.MethodSet {
		return
	}
	r := MAD{From: m.To, To: m.From, DestQP: m.SrcQP, TrafficClass: m.TrafficClass, Data: m.Data}
	r.Data[3] = mad.MethodGetResp
	binary.BigEndian.PutUint16(r.Data[4:], mad.StatusUnsupportedMethodAttr)
	if err := d.SendMAD(&r); err != nil {
		d.log.Debug("GSI answer not sent", "to", r.To, "err", err)
	}
}

// ipTrafficClass is the TOS / traffic class of an IPv4 or IPv6 header.
func ipTrafficClass(h []byte) uint8 {
	if len(h) >= header.IPv6HeaderLen && h[0]>>4 == 6 {
		return uint8(binary.BigEndian.Uint32(h) >> 20)
	}
	if len(h) >= 2 {
		return h[1]
	}
	return 0
}

// ErrMAD is returned for a MAD SendMAD cannot send.
var ErrMAD = errors.New("nic: MAD not sent")

// SendMAD sends m from QP1 as a UD SEND_ONLY: DETH source QP 1, Q_Key
// 0x80010000, P_Key 0xFFFF, QP1's UDP source port, to m.To's QP1 (or
// m.DestQP), from m.From or, when zero, the port's first GID of m.To's
// family. The neighbour is resolved by the port as for any packet.
func (d *Device) SendMAD(m *MAD) error {
	to := m.To.Unmap()
	if !to.IsValid() || to.IsUnspecified() || to.IsMulticast() {
		return fmt.Errorf("%w: destination %v", ErrMAD, m.To)
	}
	from := m.From.Unmap()
	if !from.IsValid() {
		var ok bool
		if from, ok = d.SourceFor(to); !ok {
			return fmt.Errorf("%w: no local address of %v's family", ErrMAD, to)
		}
	}
	if from.Is4() != to.Is4() {
		return fmt.Errorf("%w: %v to %v", ErrMAD, from, to)
	}
	if _, ok := d.gids.IndexOf(from); !ok {
		return fmt.Errorf("%w: %v is not one of the port's addresses", ErrMAD, from)
	}
	p := d.port.Load()
	if p == nil {
		return ErrNoPort
	}
	dqp := m.DestQP
	if dqp == 0 {
		dqp = GSIQPN
	}
	f := wire.PacketFields{
		BTH:     wire.BTHFields{Opcode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: dqp, PSN: d.gsi.psn.Add(1) & wire.PSNMask},
		DETH:    wire.DETHFields{QKey: wire.GSIQKey, SrcQP: GSIQPN},
		Payload: m.Data[:],
	}
	av := &transport.AddressVector{DGID: gid.FromAddr(to), SGID: gid.FromAddr(from), HopLimit: gsiHopLimit,
		TrafficClass: m.TrafficClass, Port: 1}
	if !d.isLocal(av.DGID) {
		p.s.Resolve(to)
	}
	h := d.out.Headroom()
	buf := d.out.Alloc(f.EncodedLen())
	if f.Encode(buf[h:]) == 0 {
		d.out.free(buf)
		return fmt.Errorf("%w: encoding failed", ErrMAD)
	}
	d.gsi.ctr.count(m.Data[:], false)
	d.out.Send([]transport.TxPacket{{Buf: buf, Headroom: h, AV: av, SrcPort: gsiSrcPort, SrcQPN: GSIQPN}})
	return nil
}

// SourceFor picks the port's first GID of to's family that is not link-local
// unless to is.
func (d *Device) SourceFor(to netip.Addr) (netip.Addr, bool) {
	var fallback netip.Addr
	for _, e := range d.gids.Entries() {
		a := e.GID.Addr()
		if e.GID.IsZero() || a.Is4() != to.Is4() {
			continue
		}
		if a.IsLinkLocalUnicast() == to.IsLinkLocalUnicast() {
			return a, true
		}
		if !fallback.IsValid() {
			fallback = a
		}
	}
	return fallback, fallback.IsValid()
}

// neighborTable is a port that keeps a neighbour table (*netstack.Stack).
type neighborTable interface {
	Neighbor(ip netip.Addr) (net.HardwareAddr, bool)
}

// NeighborKnown reports whether packets to ip can leave at once: it is one
// of the port's own addresses, or a neighbour the port has resolved (a port
// without a neighbour table counts as knowing every one).
func (d *Device) NeighborKnown(ip netip.Addr) bool {
	if d.isLocal(gid.FromAddr(ip)) {
		return true
	}
	p := d.port.Load()
	if p == nil {
		return false
	}
	if n, ok := p.s.(neighborTable); ok {
		_, known := n.Neighbor(ip)
		return known
	}
	return true
}

// ResolveNeighbor starts resolving ip's link address on the port (ARP or
// ND), as rdma_resolve_addr does.
func (d *Device) ResolveNeighbor(ip netip.Addr) {
	if p := d.port.Load(); p != nil && !d.isLocal(gid.FromAddr(ip)) {
		p.s.Resolve(ip)
	}
}
