package netstack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/vrnic/vrnicd/header"
	"github.com/vrnic/vrnicd/nic/link"
	"github.com/vrnic/vrnicd/transport/wire"
)

// RoCEv2 framing constants.
const (
	// RoCEPort is the UDP destination port of RoCEv2.
	RoCEPort = 4791
	// HeaderLenIPv4 and HeaderLenIPv6 are the bytes Send writes in front of
	// a transport packet: Ethernet + IP + UDP.
	HeaderLenIPv4 = link.EthernetHeaderLen + header.IPv4HeaderLen + header.UDPHeaderLen // 42
	HeaderLenIPv6 = link.EthernetHeaderLen + header.IPv6HeaderLen + header.UDPHeaderLen // 62
	// Headroom is enough room for either family; leave it in front of
	// every transport packet.
	Headroom = HeaderLenIPv6
)

// Errors of Send.
var (
	ErrBadDest     = errors.New("netstack: bad destination")
	ErrNoHeadroom  = errors.New("netstack: not enough headroom before the transport packet")
	ErrTooBig      = errors.New("netstack: packet exceeds the link MTU")
	ErrLinkDown    = errors.New("netstack: the link is down")
	ErrShortPacket = errors.New("netstack: transport packet shorter than BTH+ICRC")
)

// Dest describes where RoCEv2 packets go: a QP's path (address vector).
type Dest struct {
	// Src and Dst are IPv4 or IPv6 addresses, both of one family
	// (IPv4-mapped IPv6 counts as IPv4). An invalid Src picks one of the
	// stack's addresses of Dst's family.
	Src, Dst netip.Addr
	// SrcPort is the UDP source port (rxe: 0xC000 | hash, per QP).
	SrcPort uint16
	// TrafficClass is the IPv4 TOS / IPv6 traffic class (DSCP+ECN).
	TrafficClass uint8
	// HopLimit is the IPv4 TTL / IPv6 hop limit; 0 uses Config.HopLimit.
	HopLimit uint8
	// FlowLabel (IPv6, 20 bits). Kernel rxe sends 0 whatever the AV says;
	// the ICRC does not cover it.
	FlowLabel uint32
}

// DestFromGIDs builds a Dest from a source and destination GID (IPv4-mapped
// GIDs become IPv4).
func DestFromGIDs(sgid, dgid [16]byte) Dest {
	return Dest{Src: netip.AddrFrom16(sgid).Unmap(), Dst: netip.AddrFrom16(dgid).Unmap()}
}

// TxPacket is one RoCEv2 packet to send.
type TxPacket struct {
	// Buf[Offset:] is the transport packet, BTH through ICRC; the four
	// ICRC bytes must be present (their content is overwritten). Send
	// writes the headers into Buf[Offset-HeaderLen:Offset].
	Buf    []byte
	Offset int
	Dest   *Dest
	QPN    uint32 // the sending QP (an impairment for one QP picks its frames)
}

// Send prepends Ethernet/IP/UDP to each packet in its headroom, computes the
// ICRC (and the IPv6 UDP checksum unless ZeroUDP6Checksum), and writes the
// frames to the link in batches. IPv4 headers have no options, DF set, ID 0
// and UDP checksum 0, like kernel rxe's.
//
// Packets to an unresolved neighbour are copied into its bounded queue and
// go out when it resolves (or are dropped and counted). Send never keeps the
// caller's buffers: they may be reused as soon as it returns.
//
// It returns how many packets were sent or queued. Invalid packets are
// skipped and counted in TxErrors; the first such error is returned with the
// count, as is a link write error. Send is safe for concurrent use.
func (s *Stack) Send(pkts []TxPacket) (int, error) {
	if s.down.Load() {
		// As a NIC whose port is down: nothing leaves, nothing waits
		// (an RC requester resends on its timer).
		s.ctr.TxLinkDown.Add(uint64(len(pkts)))
		return 0, ErrLinkDown
	}
	sp := s.txPool.Get().(*[][]byte)
	frames := (*sp)[:0]
	var pending [][]byte
	var firstErr error
	accepted := 0
	set := s.addrs.Load()
	ti := s.txImpairer()
	for i := 0; i < len(pkts); {
		d := pkts[i].Dest
		if d == nil {
			s.ctr.TxErrors.Add(1)
			firstErr = cmpErr(firstErr, fmt.Errorf("%w: nil Dest", ErrBadDest))
			i++
			continue
		}
		dst := d.Dst.WithZone("").Unmap()
		// One neighbour lookup for each run of packets to the same host.
		j := i + 1
		for j < len(pkts) && pkts[j].Dest != nil && pkts[j].Dest.Dst.WithZone("").Unmap() == dst {
			j++
		}
		mac, resolved := s.dstMAC(dst)
		pending = pending[:0]
		for k := i; k < j; k++ {
			f, err := s.build(&pkts[k], set)
			if err != nil {
				s.ctr.TxErrors.Add(1)
				firstErr = cmpErr(firstErr, err)
				continue
			}
			accepted++
			if resolved {
				copy(f, mac[:])
				if ti != nil {
					ti.add(f, pkts[k].QPN)
					continue
				}
				frames = append(frames, f)
			} else {
				pending = append(pending, f)
			}
		}
		if len(pending) > 0 {
			if mac, ok := s.neigh.enqueue(dst, pending); ok {
				for _, f := range pending {
					copy(f, mac[:])
					frames = append(frames, f)
				}
			}
		}
		i = j
	}
	if ti != nil {
		frames = append(frames, ti.done()...)
	}
	if err := s.writeRoCE(frames); err != nil {
		firstErr = cmpErr(firstErr, err)
	}
	clear(frames)
	*sp = frames[:0]
	s.txPool.Put(sp)
	return accepted, firstErr
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// dstMAC returns the Ethernet destination for an IP: computed for
// multicast, else from the neighbour cache.
func (s *Stack) dstMAC(ip netip.Addr) ([6]byte, bool) {
	if ip.IsMulticast() {
		return multicastMAC(ip), true
	}
	if !ip.IsValid() {
		return [6]byte{}, false
	}
	return s.neigh.lookup(ip)
}

func multicastMAC(ip netip.Addr) [6]byte {
	if ip.Is4() {
		a := ip.As4()
		return [6]byte{0x01, 0x00, 0x5e, a[1] & 0x7f, a[2], a[3]}
	}
	a := ip.As16()
	return [6]byte{0x33, 0x33, a[12], a[13], a[14], a[15]}
}

// build writes the headers of one packet and returns the whole frame with
// the Ethernet destination still unset.
func (s *Stack) build(p *TxPacket, set *addrSet) ([]byte, error) {
	d := p.Dest
	if p.Offset < 0 || p.Offset > len(p.Buf) {
		return nil, ErrNoHeadroom
	}
	tp := p.Buf[p.Offset:]
	if len(tp) < wire.BTHLen+wire.ICRCLen {
		return nil, ErrShortPacket
	}
	dst := d.Dst.WithZone("").Unmap()
	src := d.Src.WithZone("").Unmap()
	if !dst.IsValid() || dst.IsUnspecified() {
		return nil, fmt.Errorf("%w: destination %v", ErrBadDest, d.Dst)
	}
	if !src.IsValid() {
		var ok bool
		if src, ok = set.source(dst); !ok {
			return nil, fmt.Errorf("%w: no local address of %v's family", ErrBadDest, dst)
		}
	}
	if src.Is4() != dst.Is4() {
		return nil, fmt.Errorf("%w: %v and %v differ in family", ErrBadDest, src, dst)
	}
	ipLen := header.IPv6HeaderLen
	if dst.Is4() {
		ipLen = header.IPv4HeaderLen
	}
	hdr := link.EthernetHeaderLen + ipLen + header.UDPHeaderLen
	if p.Offset < hdr {
		return nil, ErrNoHeadroom
	}
	ipTotal := ipLen + header.UDPHeaderLen + len(tp)
	if mtu := s.link.MTU(); ipTotal > mtu { // the link follows its interface's
		s.ctr.TxTooBig.Add(1)
		return nil, fmt.Errorf("%w: %d > %d", ErrTooBig, ipTotal, mtu)
	}
	hop := d.HopLimit
	if hop == 0 {
		hop = s.cfg.HopLimit
	}
	f := p.Buf[p.Offset-hdr:]
	copy(f[6:12], s.mac[:])
	ip := f[link.EthernetHeaderLen:]
	if dst.Is4() {
		binary.BigEndian.PutUint16(f[12:], header.EtherTypeIPv4)
		header.IPv4(ip).Encode(&header.IPv4Fields{TOS: d.TrafficClass, TotalLen: uint16(ipTotal),
			Flags: header.IPv4DontFragment, TTL: hop, Protocol: header.IPProtoUDP, Src: src.As4(), Dst: dst.As4()})
	} else {
		binary.BigEndian.PutUint16(f[12:], header.EtherTypeIPv6)
		header.IPv6(ip).Encode(&header.IPv6Fields{TrafficClass: d.TrafficClass, FlowLabel: d.FlowLabel,
			PayloadLen: uint16(header.UDPHeaderLen + len(tp)), NextHeader: header.IPProtoUDP, HopLimit: hop,
			Src: src.As16(), Dst: dst.As16()})
	}
	udp := header.UDP(ip[ipLen:])
	udp.Encode(d.SrcPort, RoCEPort, uint16(header.UDPHeaderLen+len(tp)))
	if err := wire.PutICRC(ip[:ipTotal]); err != nil {
		return nil, err
	}
	if dst.Is6() && !s.cfg.ZeroUDP6Checksum {
		udp.SetChecksum(header.UDPChecksum(src, dst, udp[:header.UDPHeaderLen+len(tp)]))
	}
	return f[:link.EthernetHeaderLen+ipTotal], nil
}

// writeRoCE taps and writes finished RoCE frames in link-sized batches.
func (s *Stack) writeRoCE(frames [][]byte) error {
	if s.cfg.Tap != nil {
		for _, f := range frames {
			_ = s.cfg.Tap.WriteFrame(f)
		}
	}
	b := max(s.link.BatchSize(), 1)
	for len(frames) > 0 {
		chunk := frames[:min(b, len(frames))]
		n, err := s.link.Write(chunk, 0)
		s.ctr.FramesOut.Add(uint64(n))
		s.ctr.RoCEOut.Add(uint64(n))
		if err != nil {
			s.ctr.TxErrors.Add(uint64(len(frames) - n))
			return err
		}
		frames = frames[len(chunk):]
	}
	return nil
}

// flushQueued sends frames that waited for a neighbour.
func (s *Stack) flushQueued(frames [][]byte, mac [6]byte) {
	for _, f := range frames {
		copy(f, mac[:])
	}
	if err := s.writeRoCE(frames); err != nil {
		s.log.Debug("flush of queued frames failed", "err", err)
	}
}
