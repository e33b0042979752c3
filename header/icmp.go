package header

import (
	"encoding/binary"
	"net/netip"
)

// ICMP message types and codes the device answers or sends (RFC 792,
// RFC 4443, RFC 4861).
const (
	ICMPv4EchoReply       = 0
	ICMPv4DestUnreachable = 3
	ICMPv4EchoRequest     = 8
	ICMPv4PortUnreachable = 3 // code of ICMPv4DestUnreachable

	ICMPv6DestUnreachable = 1
	ICMPv6EchoRequest     = 128
	ICMPv6EchoReply       = 129
	ICMPv6NeighborSolicit = 135
	ICMPv6NeighborAdvert  = 136
	ICMPv6PortUnreachable = 4 // code of ICMPv6DestUnreachable
)

// ICMP message sizes: the header every type has (type, code, checksum and
// the 4 bytes the type defines), and an NS or NA before its options.
const (
	ICMPHeaderLen = 8
	NDHeaderLen   = 24
)

// Neighbor Discovery option types (RFC 4861 §4.6) and the NA flags
// (§4.4).
const (
	NDOptSourceLinkAddr = 1
	NDOptTargetLinkAddr = 2

	NARouter    = 0x80
	NASolicited = 0x40
	NAOverride  = 0x20
)

const (
	icmpType     = 0
	icmpCode     = 1
	icmpChecksum = 2
	icmpIdent    = 4 // echo
	icmpSeq      = 6 // echo
	ndFlags      = 4 // NA
	ndTarget     = 8
)

// ICMPv4 is a view of an ICMP message (at least ICMPHeaderLen bytes). Its
// checksum covers the message alone.
type ICMPv4 []byte

func (m ICMPv4) Type() uint8          { return m[icmpType] }
func (m ICMPv4) Code() uint8          { return m[icmpCode] }
func (m ICMPv4) Checksum() uint16     { return binary.BigEndian.Uint16(m[icmpChecksum:]) }
func (m ICMPv4) Ident() uint16        { return binary.BigEndian.Uint16(m[icmpIdent:]) }
func (m ICMPv4) Seq() uint16          { return binary.BigEndian.Uint16(m[icmpSeq:]) }
func (m ICMPv4) SetType(v uint8)      { m[icmpType] = v }
func (m ICMPv4) SetCode(v uint8)      { m[icmpCode] = v }
func (m ICMPv4) SetChecksum(v uint16) { binary.BigEndian.PutUint16(m[icmpChecksum:], v) }
func (m ICMPv4) SetIdent(v uint16)    { binary.BigEndian.PutUint16(m[icmpIdent:], v) }
func (m ICMPv4) SetSeq(v uint16)      { binary.BigEndian.PutUint16(m[icmpSeq:], v) }

// UpdateChecksum recomputes the checksum over the whole message.
func (m ICMPv4) UpdateChecksum() {
	m.SetChecksum(0)
	m.SetChecksum(Checksum(m))
}

// ICMPv6 is a view of an ICMPv6 message (at least 4 bytes; echo and ND
// accessors need what their type has). Its checksum covers the IPv6
// pseudo-header too.
type ICMPv6 []byte

func (m ICMPv6) Type() uint8          { return m[icmpType] }
func (m ICMPv6) Code() uint8          { return m[icmpCode] }
func (m ICMPv6) Checksum() uint16     { return binary.BigEndian.Uint16(m[icmpChecksum:]) }
func (m ICMPv6) SetType(v uint8)      { m[icmpType] = v }
func (m ICMPv6) SetCode(v uint8)      { m[icmpCode] = v }
func (m ICMPv6) SetChecksum(v uint16) { binary.BigEndian.PutUint16(m[icmpChecksum:], v) }

// NAFlags is an NA's R, S and O bits (NARouter, NASolicited, NAOverride).
func (m ICMPv6) NAFlags() uint8     { return m[ndFlags] }
func (m ICMPv6) SetNAFlags(v uint8) { m[ndFlags] = v }

// Target is an NS's or NA's target address.
func (m ICMPv6) Target() netip.Addr   { return netip.AddrFrom16([16]byte(m[ndTarget:])) }
func (m ICMPv6) SetTarget(a [16]byte) { copy(m[ndTarget:ndTarget+16], a[:]) }

// NDOptions is the options of an NS or NA.
func (m ICMPv6) NDOptions() []byte { return m[NDHeaderLen:] }

// ChecksumValid says the checksum is right for a message from src to dst.
func (m ICMPv6) ChecksumValid(src, dst netip.Addr) bool {
	return L4Checksum(src, dst, IPProtoICMPv6, m) == 0
}

// UpdateChecksum recomputes the checksum for a message from src to dst.
func (m ICMPv6) UpdateChecksum(src, dst netip.Addr) {
	m.SetChecksum(0)
	m.SetChecksum(L4Checksum(src, dst, IPProtoICMPv6, m))
}

// NDLinkAddr finds a link-layer address option of type typ
// (NDOptSourceLinkAddr or NDOptTargetLinkAddr) in ND options; bad reports
// an option of length zero or past the end, for which RFC 4861 §4.6 says
// to drop the packet.
func NDLinkAddr(opts []byte, typ uint8) (mac [6]byte, found, bad bool) {
	for len(opts) > 0 {
		if len(opts) < 2 || opts[1] == 0 || int(opts[1])*8 > len(opts) {
			return mac, false, true
		}
		l := int(opts[1]) * 8
		if opts[0] == typ && l >= 8 {
			copy(mac[:], opts[2:8])
			found = true
		}
		opts = opts[l:]
	}
	return mac, found, false
}

// PutNDLinkAddr writes a link-layer address option of type typ (8 bytes)
// into b.
func PutNDLinkAddr(b []byte, typ uint8, mac [6]byte) {
	b[0], b[1] = typ, 1
	copy(b[2:8], mac[:])
}
