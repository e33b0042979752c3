package header

import "encoding/binary"

// EthernetHeaderLen is an Ethernet II header without a VLAN tag.
const EthernetHeaderLen = 14

// EtherTypes the device speaks.
const (
	EtherTypeIPv4 = 0x0800
	EtherTypeARP  = 0x0806
	EtherTypeIPv6 = 0x86dd
)

const (
	ethDst  = 0
	ethSrc  = 6
	ethType = 12
)

// Ethernet is a view of an Ethernet II header (at least EthernetHeaderLen
// bytes).
type Ethernet []byte

func (e Ethernet) Dst() [6]byte       { return [6]byte(e[ethDst:]) }
func (e Ethernet) Src() [6]byte       { return [6]byte(e[ethSrc:]) }
func (e Ethernet) Type() uint16       { return binary.BigEndian.Uint16(e[ethType:]) }
func (e Ethernet) SetDst(mac [6]byte) { copy(e[ethDst:ethDst+6], mac[:]) }
func (e Ethernet) SetSrc(mac [6]byte) { copy(e[ethSrc:ethSrc+6], mac[:]) }
func (e Ethernet) SetType(v uint16)   { binary.BigEndian.PutUint16(e[ethType:], v) }

// Encode writes the header.
func (e Ethernet) Encode(dst, src [6]byte, etype uint16) {
	e.SetDst(dst)
	e.SetSrc(src)
	e.SetType(etype)
}
