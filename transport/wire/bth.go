package wire

import "encoding/binary"

// Header sizes in bytes, as IBA vol 1 ch. 9 and the RoCEv2 annex define them.
const (
	BTHLen          = 12
	RDETHLen        = 4
	DETHLen         = 8
	RETHLen         = 16
	AtomicETHLen    = 28
	AETHLen         = 4
	AtomicAckETHLen = 8
	ImmDtLen        = 4
	IETHLen         = 4
	FETHLen         = 4
	CNPReservedLen  = 16
	ICRCLen         = 4
)

// DefaultPKey is the full-member default partition key; kernel rxe sends
// nothing else.
const DefaultPKey = 0xFFFF

// QPNMask keeps the 24 bits of a QP number (BTH DestQP, DETH SrcQP).
const QPNMask = 0xFFFFFF

// MulticastQPN is the destination QPN of a multicast packet.
const MulticastQPN = 0xFFFFFF

// GSIQKey is the well-known Q_Key of QP1 (IBA 13.5.2.1).
const GSIQKey = 0x80010000

// RoCEv2Port is the UDP destination port of RoCEv2.
const RoCEv2Port = 4791

const (
	bthOpcode = 0
	bthFlags  = 1 // SE(7) M(6) PadCnt(5:4) TVer(3:0)
	bthPKey   = 2
	bthResv8a = 4 // FECN(7) BECN(6) resv6a; masked by the ICRC
	bthDestQP = 5
	bthAckReq = 8 // AckReq(7) resv7
	bthPSN    = 9

	bthSE     = 0x80
	bthMigReq = 0x40
	bthPadCnt = 0x30
	bthTVer   = 0x0f
	bthFECN   = 0x80
	bthBECN   = 0x40
	bthAck    = 0x80
)

// BTH is a view of the 12-byte Base Transport Header.
type BTH []byte

// BTHFields holds the BTH fields for Encode.
type BTHFields struct {
	Opcode Opcode
	SE     bool
	MigReq bool
	PadCnt uint8
	TVer   uint8
	PKey   uint16
	FECN   bool
	BECN   bool
	DestQP uint32
	AckReq bool
	PSN    uint32
}

func (b BTH) Opcode() Opcode     { return Opcode(b[bthOpcode]) }
func (b BTH) SE() bool           { return b[bthFlags]&bthSE != 0 }
func (b BTH) MigReq() bool       { return b[bthFlags]&bthMigReq != 0 }
func (b BTH) PadCnt() uint8      { return (b[bthFlags] & bthPadCnt) >> 4 }
func (b BTH) TVer() uint8        { return b[bthFlags] & bthTVer }
func (b BTH) PKey() uint16       { return binary.BigEndian.Uint16(b[bthPKey:]) }
func (b BTH) FECN() bool         { return b[bthResv8a]&bthFECN != 0 }
func (b BTH) BECN() bool         { return b[bthResv8a]&bthBECN != 0 }
func (b BTH) DestQP() uint32     { return be24(b[bthDestQP:]) }
func (b BTH) AckReq() bool       { return b[bthAckReq]&bthAck != 0 }
func (b BTH) PSN() uint32        { return be24(b[bthPSN:]) }
func (b BTH) SetOpcode(o Opcode) { b[bthOpcode] = byte(o) }
func (b BTH) SetSE(v bool)       { setBit(&b[bthFlags], bthSE, v) }
func (b BTH) SetMigReq(v bool)   { setBit(&b[bthFlags], bthMigReq, v) }
func (b BTH) SetPadCnt(n uint8) {
	b[bthFlags] = b[bthFlags]&^bthPadCnt | (n<<4)&bthPadCnt
}
func (b BTH) SetTVer(v uint8)      { b[bthFlags] = b[bthFlags]&^bthTVer | v&bthTVer }
func (b BTH) SetPKey(k uint16)     { binary.BigEndian.PutUint16(b[bthPKey:], k) }
func (b BTH) SetFECN(v bool)       { setBit(&b[bthResv8a], bthFECN, v) }
func (b BTH) SetBECN(v bool)       { setBit(&b[bthResv8a], bthBECN, v) }
func (b BTH) SetDestQP(qpn uint32) { putBE24(b[bthDestQP:], qpn) }
func (b BTH) SetAckReq(v bool)     { setBit(&b[bthAckReq], bthAck, v) }
func (b BTH) SetPSN(psn uint32)    { putBE24(b[bthPSN:], psn) }

// Encode writes every field of f, clearing the reserved bits.
func (b BTH) Encode(f *BTHFields) {
	_ = b[BTHLen-1]
	b[bthOpcode] = byte(f.Opcode)
	fl := (f.PadCnt << 4) & bthPadCnt
	fl |= f.TVer & bthTVer
	if f.SE {
		fl |= bthSE
	}
	if f.MigReq {
		fl |= bthMigReq
	}
	b[bthFlags] = fl
	binary.BigEndian.PutUint16(b[bthPKey:], f.PKey)
	var r byte
	if f.FECN {
		r |= bthFECN
	}
	if f.BECN {
		r |= bthBECN
	}
	b[bthResv8a] = r
	putBE24(b[bthDestQP:], f.DestQP)
	b[bthAckReq] = 0
	if f.AckReq {
		b[bthAckReq] = bthAck
	}
	putBE24(b[bthPSN:], f.PSN)
}

// Fields returns the decoded fields of b.
func (b BTH) Fields() BTHFields {
	return BTHFields{
		Opcode: b.Opcode(), SE: b.SE(), MigReq: b.MigReq(), PadCnt: b.PadCnt(),
		TVer: b.TVer(), PKey: b.PKey(), FECN: b.FECN(), BECN: b.BECN(),
		DestQP: b.DestQP(), AckReq: b.AckReq(), PSN: b.PSN(),
	}
}

func be24(b []byte) uint32 {
	_ = b[2]
	return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
}

func putBE24(b []byte, v uint32) {
	_ = b[2]
	b[0] = byte(v >> 16)
	b[1] = byte(v >> 8)
	b[2] = byte(v)
}

func setBit(p *byte, mask byte, v bool) {
	if v {
		*p |= mask
	} else {
		*p &^= mask
	}
}
