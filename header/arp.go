package header

import (
	"encoding/binary"
	"net/netip"
)

// ARPLen is an ARP message for IPv4 over Ethernet (RFC 826), the only kind
// the device sends or reads.
const ARPLen = 28

// ARP operations, and the hardware type of Ethernet.
const (
	ARPRequest = 1
	ARPReply   = 2

	ARPHardwareEthernet = 1
)

// ARP message fields for IPv4 over Ethernet: hardware type, protocol type,
// their address lengths, the operation, then sender and target, each a MAC
// and an IPv4 address.
const (
	arpHType = 0
	arpPType = 2
	arpHLen  = 4
	arpPLen  = 5
	arpOp    = 6
	arpSHA   = 8
	arpSPA   = 14
	arpTHA   = 18
	arpTPA   = 24
)

// ARP is a view of an ARP message (at least ARPLen bytes).
type ARP []byte

// ARPFields holds the fields Encode writes; the types and lengths are
// Ethernet's and IPv4's.
type ARPFields struct {
	Op                   uint16
	SenderMAC, TargetMAC [6]byte
	SenderIP, TargetIP   [4]byte
}

func (a ARP) HardwareType() uint16   { return binary.BigEndian.Uint16(a[arpHType:]) }
func (a ARP) ProtocolType() uint16   { return binary.BigEndian.Uint16(a[arpPType:]) }
func (a ARP) Op() uint16             { return binary.BigEndian.Uint16(a[arpOp:]) }
func (a ARP) SenderMAC() [6]byte     { return [6]byte(a[arpSHA:]) }
func (a ARP) SenderIP() netip.Addr   { return netip.AddrFrom4([4]byte(a[arpSPA:])) }
func (a ARP) TargetMAC() [6]byte     { return [6]byte(a[arpTHA:]) }
func (a ARP) TargetIP() netip.Addr   { return netip.AddrFrom4([4]byte(a[arpTPA:])) }
func (a ARP) SetOp(v uint16)         { binary.BigEndian.PutUint16(a[arpOp:], v) }
func (a ARP) SetSenderMAC(m [6]byte) { copy(a[arpSHA:arpSHA+6], m[:]) }
func (a ARP) SetSenderIP(ip [4]byte) { copy(a[arpSPA:arpSPA+4], ip[:]) }
func (a ARP) SetTargetMAC(m [6]byte) { copy(a[arpTHA:arpTHA+6], m[:]) }
func (a ARP) SetTargetIP(ip [4]byte) { copy(a[arpTPA:arpTPA+4], ip[:]) }

// IsIPv4OverEthernet reports whether a is long enough and says Ethernet
// and IPv4 with their address lengths: the only ARP the accessors read
// right.
func (a ARP) IsIPv4OverEthernet() bool {
	return len(a) >= ARPLen && a.HardwareType() == ARPHardwareEthernet && a.ProtocolType() == EtherTypeIPv4 &&
		a[arpHLen] == 6 && a[arpPLen] == 4
}

// Encode writes f as an IPv4-over-Ethernet message.
func (a ARP) Encode(f *ARPFields) {
	binary.BigEndian.PutUint16(a[arpHType:], ARPHardwareEthernet)
	binary.BigEndian.PutUint16(a[arpPType:], EtherTypeIPv4)
	a[arpHLen], a[arpPLen] = 6, 4
	a.SetOp(f.Op)
	a.SetSenderMAC(f.SenderMAC)
	a.SetSenderIP(f.SenderIP)
	a.SetTargetMAC(f.TargetMAC)
	a.SetTargetIP(f.TargetIP)
}
