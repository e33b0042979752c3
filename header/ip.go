package header

import (
	"encoding/binary"
	"net/netip"
)

// IP protocol numbers (IANA) the device speaks.
const (
	IPProtoICMP   = 1
	IPProtoUDP    = 17
	IPProtoICMPv6 = 58
)

// Header sizes: IPv4 without options, IPv6 without extension headers
// (the only ones RoCEv2's ICRC covers), UDP.
const (
	IPv4HeaderLen = 20
	IPv6HeaderLen = 40
	UDPHeaderLen  = 8
)

// IPv4 header fields (RFC 791 §3.1).
const (
	ipv4VerIHL   = 0
	ipv4TOS      = 1
	ipv4TotalLen = 2
	ipv4ID       = 4
	ipv4Frag     = 6 // flags(15:13) fragment offset(12:0)
	ipv4TTL      = 8
	ipv4Proto    = 9
	ipv4Checksum = 10
	ipv4Src      = 12
	ipv4Dst      = 16

	// The flags and the fragment offset in their 16-bit word (Flags).
	IPv4DontFragment  = 0x4000
	IPv4MoreFragments = 0x2000
	IPv4FragOffset    = 0x1fff // in units of 8 bytes
)

// IPv4 is a view of an IPv4 header (at least IPv4HeaderLen bytes; with
// options, IHL says how many).
type IPv4 []byte

// IPv4Fields holds the fields Encode writes: a header without options,
// version 4, IHL 5.
type IPv4Fields struct {
	TOS      uint8
	TotalLen uint16 // header and payload
	ID       uint16
	Flags    uint16 // flags and fragment offset, e.g. IPv4DontFragment
	TTL      uint8
	Protocol uint8
	Src, Dst [4]byte
}

func (h IPv4) Version() uint8       { return h[ipv4VerIHL] >> 4 }
func (h IPv4) HeaderLen() int       { return int(h[ipv4VerIHL]&0xf) * 4 }
func (h IPv4) TOS() uint8           { return h[ipv4TOS] }
func (h IPv4) TotalLen() uint16     { return binary.BigEndian.Uint16(h[ipv4TotalLen:]) }
func (h IPv4) ID() uint16           { return binary.BigEndian.Uint16(h[ipv4ID:]) }
func (h IPv4) Flags() uint16        { return binary.BigEndian.Uint16(h[ipv4Frag:]) }
func (h IPv4) TTL() uint8           { return h[ipv4TTL] }
func (h IPv4) Protocol() uint8      { return h[ipv4Proto] }
func (h IPv4) Checksum() uint16     { return binary.BigEndian.Uint16(h[ipv4Checksum:]) }
func (h IPv4) Src() netip.Addr      { return netip.AddrFrom4([4]byte(h[ipv4Src:])) }
func (h IPv4) Dst() netip.Addr      { return netip.AddrFrom4([4]byte(h[ipv4Dst:])) }
func (h IPv4) SetTOS(v uint8)       { h[ipv4TOS] = v }
func (h IPv4) SetTotalLen(v uint16) { binary.BigEndian.PutUint16(h[ipv4TotalLen:], v) }
func (h IPv4) SetTTL(v uint8)       { h[ipv4TTL] = v }
func (h IPv4) SetChecksum(v uint16) { binary.BigEndian.PutUint16(h[ipv4Checksum:], v) }
func (h IPv4) SetSrc(a [4]byte)     { copy(h[ipv4Src:ipv4Src+4], a[:]) }
func (h IPv4) SetDst(a [4]byte)     { copy(h[ipv4Dst:ipv4Dst+4], a[:]) }

// Encode writes f as a 20-byte header and its header checksum.
func (h IPv4) Encode(f *IPv4Fields) {
	h[ipv4VerIHL] = 4<<4 | IPv4HeaderLen/4
	h[ipv4TOS] = f.TOS
	binary.BigEndian.PutUint16(h[ipv4TotalLen:], f.TotalLen)
	binary.BigEndian.PutUint16(h[ipv4ID:], f.ID)
	binary.BigEndian.PutUint16(h[ipv4Frag:], f.Flags)
	h[ipv4TTL] = f.TTL
	h[ipv4Proto] = f.Protocol
	h.SetSrc(f.Src)
	h.SetDst(f.Dst)
	h.UpdateChecksum()
}

// UpdateChecksum recomputes the header checksum over HeaderLen bytes, as
// after a change of TTL or addresses.
func (h IPv4) UpdateChecksum() {
	h.SetChecksum(0)
	h.SetChecksum(Checksum(h[:h.HeaderLen()]))
}

// ChecksumValid says the header checksum is right.
func (h IPv4) ChecksumValid() bool { return Checksum(h[:h.HeaderLen()]) == 0 }

// IPv6 header fields (RFC 8200 §3).
const (
	ipv6VerTCFlow = 0 // version(31:28) traffic class(27:20) flow label(19:0)
	ipv6PayLen    = 4
	ipv6Next      = 6
	ipv6Hop       = 7
	ipv6Src       = 8
	ipv6Dst       = 24
)

// IPv6 is a view of the 40-byte IPv6 header.
type IPv6 []byte

// IPv6Fields holds the fields Encode writes.
type IPv6Fields struct {
	TrafficClass uint8
	FlowLabel    uint32 // 20 bits
	PayloadLen   uint16
	NextHeader   uint8
	HopLimit     uint8
	Src, Dst     [16]byte
}

func (h IPv6) Version() uint8         { return h[ipv6VerTCFlow] >> 4 }
func (h IPv6) TrafficClass() uint8    { return uint8(binary.BigEndian.Uint32(h[ipv6VerTCFlow:]) >> 20) }
func (h IPv6) FlowLabel() uint32      { return binary.BigEndian.Uint32(h[ipv6VerTCFlow:]) & 0xfffff }
func (h IPv6) PayloadLen() uint16     { return binary.BigEndian.Uint16(h[ipv6PayLen:]) }
func (h IPv6) NextHeader() uint8      { return h[ipv6Next] }
func (h IPv6) HopLimit() uint8        { return h[ipv6Hop] }
func (h IPv6) Src() netip.Addr        { return netip.AddrFrom16([16]byte(h[ipv6Src:])) }
func (h IPv6) Dst() netip.Addr        { return netip.AddrFrom16([16]byte(h[ipv6Dst:])) }
func (h IPv6) SetPayloadLen(v uint16) { binary.BigEndian.PutUint16(h[ipv6PayLen:], v) }
func (h IPv6) SetHopLimit(v uint8)    { h[ipv6Hop] = v }
func (h IPv6) SetSrc(a [16]byte)      { copy(h[ipv6Src:ipv6Src+16], a[:]) }
func (h IPv6) SetDst(a [16]byte)      { copy(h[ipv6Dst:ipv6Dst+16], a[:]) }

// Encode writes f as the header.
func (h IPv6) Encode(f *IPv6Fields) {
	binary.BigEndian.PutUint32(h[ipv6VerTCFlow:], 6<<28|uint32(f.TrafficClass)<<20|f.FlowLabel&0xfffff)
	binary.BigEndian.PutUint16(h[ipv6PayLen:], f.PayloadLen)
	h[ipv6Next] = f.NextHeader
	h[ipv6Hop] = f.HopLimit
	h.SetSrc(f.Src)
	h.SetDst(f.Dst)
}

// UDP header fields (RFC 768).
const (
	udpSrcPort  = 0
	udpDstPort  = 2
	udpLength   = 4
	udpChecksum = 6
)

// UDP is a view of the 8-byte UDP header.
type UDP []byte

func (u UDP) SrcPort() uint16      { return binary.BigEndian.Uint16(u[udpSrcPort:]) }
func (u UDP) DstPort() uint16      { return binary.BigEndian.Uint16(u[udpDstPort:]) }
func (u UDP) Length() uint16       { return binary.BigEndian.Uint16(u[udpLength:]) }
func (u UDP) Checksum() uint16     { return binary.BigEndian.Uint16(u[udpChecksum:]) }
func (u UDP) SetSrcPort(v uint16)  { binary.BigEndian.PutUint16(u[udpSrcPort:], v) }
func (u UDP) SetDstPort(v uint16)  { binary.BigEndian.PutUint16(u[udpDstPort:], v) }
func (u UDP) SetLength(v uint16)   { binary.BigEndian.PutUint16(u[udpLength:], v) }
func (u UDP) SetChecksum(v uint16) { binary.BigEndian.PutUint16(u[udpChecksum:], v) }

// Encode writes the ports and the length (header and payload) with a zero
// checksum, which means none over IPv4 and which RoCEv2 allows over both
// (kernel rxe sends it).
func (u UDP) Encode(src, dst, length uint16) {
	u.SetSrcPort(src)
	u.SetDstPort(dst)
	u.SetLength(length)
	u.SetChecksum(0)
}

// UDPChecksum is the checksum to put in the header of udp (header and
// payload, checksum field zero) between src and dst: a computed 0 goes as
// 0xFFFF, 0 being "no checksum" (RFC 768).
func UDPChecksum(src, dst netip.Addr, udp []byte) uint16 {
	c := L4Checksum(src, dst, IPProtoUDP, udp)
	if c == 0 {
		c = 0xffff
	}
	return c
}
