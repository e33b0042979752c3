package wire

import "encoding/binary"

// RETH is a view of the RDMA Extended Transport Header: VA, R_Key, DMA length.
type RETH []byte

// RETHFields holds the RETH fields for Encode.
type RETHFields struct {
	VA     uint64
	RKey   uint32
	Length uint32
}

func (h RETH) VA() uint64         { return binary.BigEndian.Uint64(h[0:]) }
func (h RETH) RKey() uint32       { return binary.BigEndian.Uint32(h[8:]) }
func (h RETH) Length() uint32     { return binary.BigEndian.Uint32(h[12:]) }
func (h RETH) SetVA(v uint64)     { binary.BigEndian.PutUint64(h[0:], v) }
func (h RETH) SetRKey(k uint32)   { binary.BigEndian.PutUint32(h[8:], k) }
func (h RETH) SetLength(n uint32) { binary.BigEndian.PutUint32(h[12:], n) }
func (h RETH) Fields() RETHFields { return RETHFields{h.VA(), h.RKey(), h.Length()} }
func (h RETH) Encode(f *RETHFields) {
	_ = h[RETHLen-1]
	h.SetVA(f.VA)
	h.SetRKey(f.RKey)
	h.SetLength(f.Length)
}

// AtomicETH is a view of the Atomic Extended Transport Header (28 bytes, packed).
type AtomicETH []byte

// AtomicETHFields holds the AtomicETH fields for Encode.
type AtomicETHFields struct {
	VA      uint64
	RKey    uint32
	SwapAdd uint64
	Compare uint64
}

func (h AtomicETH) VA() uint64          { return binary.BigEndian.Uint64(h[0:]) }
func (h AtomicETH) RKey() uint32        { return binary.BigEndian.Uint32(h[8:]) }
func (h AtomicETH) SwapAdd() uint64     { return binary.BigEndian.Uint64(h[12:]) }
func (h AtomicETH) Compare() uint64     { return binary.BigEndian.Uint64(h[20:]) }
func (h AtomicETH) SetVA(v uint64)      { binary.BigEndian.PutUint64(h[0:], v) }
func (h AtomicETH) SetRKey(k uint32)    { binary.BigEndian.PutUint32(h[8:], k) }
func (h AtomicETH) SetSwapAdd(v uint64) { binary.BigEndian.PutUint64(h[12:], v) }
func (h AtomicETH) SetCompare(v uint64) { binary.BigEndian.PutUint64(h[20:], v) }
func (h AtomicETH) Fields() AtomicETHFields {
	return AtomicETHFields{h.VA(), h.RKey(), h.SwapAdd(), h.Compare()}
}
func (h AtomicETH) Encode(f *AtomicETHFields) {
	_ = h[AtomicETHLen-1]
	h.SetVA(f.VA)
	h.SetRKey(f.RKey)
	h.SetSwapAdd(f.SwapAdd)
	h.SetCompare(f.Compare)
}

// AETH syndrome types (bits 6:5 of the syndrome), IBA 9.7.5.1.
const (
	AETHTypeMask = 0x60
	AETHAck      = 0x00
	AETHRNRNak   = 0x20
	AETHReserved = 0x40
	AETHNak      = 0x60

	// AETHInvalidCredits is the credit field "no credit information": kernel
	// rxe always sends it and ignores the peer's.
	AETHInvalidCredits = 0x1F
)

// NAK codes, the full syndrome byte of a NAK.
const (
	NakPSNSeqError      = 0x60
	NakInvalidRequest   = 0x61
	NakRemoteAccess     = 0x62
	NakRemoteOperation  = 0x63
	NakInvalidRDRequest = 0x64
)

// MSNMask keeps the 24 bits of a message sequence number (AETH MSN): the
// responder's count of messages it has completed, modulo 2^24.
const MSNMask = 0xFFFFFF

// AETH is a view of the ACK Extended Transport Header: syndrome and MSN.
type AETH []byte

// AETHFields holds the AETH fields for Encode.
type AETHFields struct {
	Syndrome uint8
	MSN      uint32
}

func (h AETH) Syndrome() uint8      { return h[0] }
func (h AETH) MSN() uint32          { return be24(h[1:]) }
func (h AETH) SetSyndrome(s uint8)  { h[0] = s }
func (h AETH) SetMSN(m uint32)      { putBE24(h[1:], m) }
func (h AETH) Fields() AETHFields   { return AETHFields{h.Syndrome(), h.MSN()} }
func (h AETH) Encode(f *AETHFields) { h.SetSyndrome(f.Syndrome); h.SetMSN(f.MSN) }

// SyndromeType is the syndrome masked to its type bits: AETHAck, AETHRNRNak,
// AETHReserved or AETHNak.
func SyndromeType(s uint8) uint8 { return s & AETHTypeMask }

// SyndromeValue is the low five bits: credits, RNR timer code or NAK code.
func SyndromeValue(s uint8) uint8 { return s & 0x1F }

// AtomicAckETH is a view of the Atomic Acknowledge ETH: the original remote data.
type AtomicAckETH []byte

func (h AtomicAckETH) Orig() uint64       { return binary.BigEndian.Uint64(h) }
func (h AtomicAckETH) SetOrig(v uint64)   { binary.BigEndian.PutUint64(h, v) }
func (h AtomicAckETH) Encode(orig uint64) { h.SetOrig(orig) }

// DETH is a view of the Datagram Extended Transport Header: Q_Key and source QP.
type DETH []byte

// DETHFields holds the DETH fields for Encode.
type DETHFields struct {
	QKey  uint32
	SrcQP uint32
}

func (h DETH) QKey() uint32       { return binary.BigEndian.Uint32(h[0:]) }
func (h DETH) SrcQP() uint32      { return be24(h[5:]) }
func (h DETH) SetQKey(k uint32)   { binary.BigEndian.PutUint32(h[0:], k) }
func (h DETH) SetSrcQP(q uint32)  { putBE24(h[5:], q) }
func (h DETH) Fields() DETHFields { return DETHFields{h.QKey(), h.SrcQP()} }
func (h DETH) Encode(f *DETHFields) {
	_ = h[DETHLen-1]
	h.SetQKey(f.QKey)
	h[4] = 0
	h.SetSrcQP(f.SrcQP)
}

// RDETH is a view of the Reliable Datagram ETH (EE context). Kernel rxe has
// no RD; the view exists so RD packets decode.
type RDETH []byte

func (h RDETH) EEC() uint32     { return be24(h[1:]) }
func (h RDETH) SetEEC(v uint32) { h[0] = 0; putBE24(h[1:], v) }

// ImmDt is a view of the 4-byte immediate data, opaque and in network order.
type ImmDt []byte

func (h ImmDt) Imm() uint32     { return binary.BigEndian.Uint32(h) }
func (h ImmDt) SetImm(v uint32) { binary.BigEndian.PutUint32(h, v) }
func (h ImmDt) Encode(v uint32) { h.SetImm(v) }

// IETH is a view of the Invalidate ETH: the R_Key the responder invalidates.
type IETH []byte

func (h IETH) RKey() uint32     { return binary.BigEndian.Uint32(h) }
func (h IETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(h, k) }
func (h IETH) Encode(k uint32)  { h.SetRKey(k) }

// FLUSH selectivity levels and placement types (IBA 1.5, FETH).
const (
	FlushSelGlobal = 0 // flush everything the QP wrote
	FlushSelMR     = 1 // flush the range of the RETH's MR

	FlushPlaceGlobalVisibility = 1
	FlushPlacePersistence      = 2
)

// FETH is a view of the Flush ETH: 26 reserved bits, SEL (bits 5:4), PLT (3:0).
type FETH []byte

// FETHFields holds the FETH fields for Encode.
type FETHFields struct {
	Selectivity uint8
	Placement   uint8
}

func (h FETH) Selectivity() uint8 { return (h[3] >> 4) & 0x3 }
func (h FETH) Placement() uint8   { return h[3] & 0xF }
func (h FETH) Fields() FETHFields { return FETHFields{h.Selectivity(), h.Placement()} }
func (h FETH) Encode(f *FETHFields) {
	_ = h[FETHLen-1]
	h[0], h[1], h[2] = 0, 0, 0
	h[3] = (f.Selectivity&0x3)<<4 | f.Placement&0xF
}
