package rocelayers

import (
	"encoding/binary"
	"fmt"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/vrnic/vrnicd/transport/wire"
)

// Extension header layers. Each decodes its fixed-size header through the
// wire view, passes the rest on as its payload and learns what follows from
// the BTH it is bound to (see Layers).

func short(name string, need, have int, df gopacket.DecodeFeedback) error {
	df.SetTruncated()
	return fmt.Errorf("rocelayers: %s needs %d bytes, %d left", name, need, have)
}

func split(data []byte, n int) layers.BaseLayer {
	return layers.BaseLayer{Contents: data[:n:n], Payload: data[n:]}
}

// RETH is the RDMA Extended Transport Header layer.
type RETH struct {
	layers.BaseLayer
	wire.RETHFields
	bth *BTH
}

func (h *RETH) LayerType() gopacket.LayerType     { return LayerTypeRETH }
func (h *RETH) CanDecode() gopacket.LayerClass    { return LayerTypeRETH }
func (h *RETH) NextLayerType() gopacket.LayerType { return h.bth.next(wire.HdrRETH, nil) }
func (h *RETH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < wire.RETHLen {
		return short("RETH", wire.RETHLen, len(data), df)
	}
	h.RETHFields = wire.RETH(data).Fields()
	h.BaseLayer = split(data, wire.RETHLen)
	return nil
}
func (h *RETH) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	v, err := b.PrependBytes(wire.RETHLen)
	if err != nil {
		return err
	}
	wire.RETH(v).Encode(&h.RETHFields)
	return nil
}

// AETH is the ACK Extended Transport Header layer.
type AETH struct {
	layers.BaseLayer
	wire.AETHFields
	bth *BTH
}

func (h *AETH) LayerType() gopacket.LayerType     { return LayerTypeAETH }
func (h *AETH) CanDecode() gopacket.LayerClass    { return LayerTypeAETH }
func (h *AETH) NextLayerType() gopacket.LayerType { return h.bth.next(wire.HdrAETH, nil) }
func (h *AETH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < wire.AETHLen {
		return short("AETH", wire.AETHLen, len(data), df)
	}
	h.AETHFields = wire.AETH(data).Fields()
	h.BaseLayer = split(data, wire.AETHLen)
	return nil
}
func (h *AETH) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	v, err := b.PrependBytes(wire.AETHLen)
	if err != nil {
		return err
	}
	wire.AETH(v).Encode(&h.AETHFields)
	return nil
}

// AtomicETH is the Atomic Extended Transport Header layer.
type AtomicETH struct {
	layers.BaseLayer
	wire.AtomicETHFields
	bth *BTH
}

func (h *AtomicETH) LayerType() gopacket.LayerType     { return LayerTypeAtomicETH }
func (h *AtomicETH) CanDecode() gopacket.LayerClass    { return LayerTypeAtomicETH }
func (h *AtomicETH) NextLayerType() gopacket.LayerType { return h.bth.next(wire.HdrAtomicETH, nil) }
func (h *AtomicETH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < wire.AtomicETHLen {
		return short("AtomicETH", wire.AtomicETHLen, len(data), df)
	}
	h.AtomicETHFields = wire.AtomicETH(data).Fields()
	h.BaseLayer = split(data, wire.AtomicETHLen)
	return nil
}
func (h *AtomicETH) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	v, err := b.PrependBytes(wire.AtomicETHLen)
	if err != nil {
		return err
	}
	wire.AtomicETH(v).Encode(&h.AtomicETHFields)
	return nil
}

// AtomicAckETH is the Atomic Acknowledge ETH layer.
type AtomicAckETH struct {
	layers.BaseLayer
	Orig uint64 // the remote data before the atomic operation
	bth  *BTH
}

func (h *AtomicAckETH) LayerType() gopacket.LayerType  { return LayerTypeAtomicAckETH }
func (h *AtomicAckETH) CanDecode() gopacket.LayerClass { return LayerTypeAtomicAckETH }
func (h *AtomicAckETH) NextLayerType() gopacket.LayerType {
	return h.bth.next(wire.HdrAtomicAckETH, nil)
}
func (h *AtomicAckETH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < wire.AtomicAckETHLen {
		return short("AtomicAckETH", wire.AtomicAckETHLen, len(data), df)
	}
	h.Orig = wire.AtomicAckETH(data).Orig()
	h.BaseLayer = split(data, wire.AtomicAckETHLen)
	return nil
}
func (h *AtomicAckETH) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	v, err := b.PrependBytes(wire.AtomicAckETHLen)
	if err != nil {
		return err
	}
	wire.AtomicAckETH(v).Encode(h.Orig)
	return nil
}

// DETH is the Datagram Extended Transport Header layer.
type DETH struct {
	layers.BaseLayer
	wire.DETHFields
	Reserved uint8 // byte 4
	bth      *BTH
}

func (h *DETH) LayerType() gopacket.LayerType     { return LayerTypeDETH }
func (h *DETH) CanDecode() gopacket.LayerClass    { return LayerTypeDETH }
func (h *DETH) NextLayerType() gopacket.LayerType { return h.bth.next(wire.HdrDETH, h) }
func (h *DETH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < wire.DETHLen {
		return short("DETH", wire.DETHLen, len(data), df)
	}
	h.DETHFields = wire.DETH(data).Fields()
	h.Reserved = data[4]
	h.BaseLayer = split(data, wire.DETHLen)
	return nil
}
func (h *DETH) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	v, err := b.PrependBytes(wire.DETHLen)
	if err != nil {
		return err
	}
	wire.DETH(v).Encode(&h.DETHFields)
	v[4] = h.Reserved
	return nil
}

// RDETH is the Reliable Datagram ETH layer. No opcode of the wire table
// (kernel rxe has no RD) carries it; the layer decodes it stand-alone.
type RDETH struct {
	layers.BaseLayer
	EEC      uint32 // 24 bits
	Reserved uint8  // byte 0
	bth      *BTH
}

func (h *RDETH) LayerType() gopacket.LayerType     { return LayerTypeRDETH }
func (h *RDETH) CanDecode() gopacket.LayerClass    { return LayerTypeRDETH }
func (h *RDETH) NextLayerType() gopacket.LayerType { return h.bth.next(wire.HdrRDETH, nil) }
func (h *RDETH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < wire.RDETHLen {
		return short("RDETH", wire.RDETHLen, len(data), df)
	}
	h.EEC = wire.RDETH(data).EEC()
	h.Reserved = data[0]
	h.BaseLayer = split(data, wire.RDETHLen)
	return nil
}
func (h *RDETH) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	v, err := b.PrependBytes(wire.RDETHLen)
	if err != nil {
		return err
	}
	wire.RDETH(v).SetEEC(h.EEC)
	v[0] = h.Reserved
	return nil
}

// ImmDt is the immediate data layer.
type ImmDt struct {
	layers.BaseLayer
	Imm uint32 // opaque; shown in network order
	bth *BTH
}

func (h *ImmDt) LayerType() gopacket.LayerType     { return LayerTypeImmDt }
func (h *ImmDt) CanDecode() gopacket.LayerClass    { return LayerTypeImmDt }
func (h *ImmDt) NextLayerType() gopacket.LayerType { return h.bth.next(wire.HdrImmDt, nil) }
func (h *ImmDt) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < wire.ImmDtLen {
		return short("ImmDt", wire.ImmDtLen, len(data), df)
	}
	h.Imm = wire.ImmDt(data).Imm()
	h.BaseLayer = split(data, wire.ImmDtLen)
	return nil
}
func (h *ImmDt) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	v, err := b.PrependBytes(wire.ImmDtLen)
	if err != nil {
		return err
	}
	wire.ImmDt(v).Encode(h.Imm)
	return nil
}

// IETH is the Invalidate ETH layer.
type IETH struct {
	layers.BaseLayer
	RKey uint32 // the R_Key the responder invalidates
	bth  *BTH
}

func (h *IETH) LayerType() gopacket.LayerType     { return LayerTypeIETH }
func (h *IETH) CanDecode() gopacket.LayerClass    { return LayerTypeIETH }
func (h *IETH) NextLayerType() gopacket.LayerType { return h.bth.next(wire.HdrIETH, nil) }
func (h *IETH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < wire.IETHLen {
		return short("IETH", wire.IETHLen, len(data), df)
	}
	h.RKey = wire.IETH(data).RKey()
	h.BaseLayer = split(data, wire.IETHLen)
	return nil
}
func (h *IETH) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	v, err := b.PrependBytes(wire.IETHLen)
	if err != nil {
		return err
	}
	wire.IETH(v).Encode(h.RKey)
	return nil
}

// FETH is the Flush ETH layer.
type FETH struct {
	layers.BaseLayer
	wire.FETHFields
	Reserved uint32 // the top 26 bits, in place (the low 6 bits are zero)
	bth      *BTH
}

const fethFieldBits = 0x3F

func (h *FETH) LayerType() gopacket.LayerType     { return LayerTypeFETH }
func (h *FETH) CanDecode() gopacket.LayerClass    { return LayerTypeFETH }
func (h *FETH) NextLayerType() gopacket.LayerType { return h.bth.next(wire.HdrFETH, nil) }
func (h *FETH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < wire.FETHLen {
		return short("FETH", wire.FETHLen, len(data), df)
	}
	h.FETHFields = wire.FETH(data).Fields()
	h.Reserved = binary.BigEndian.Uint32(data) &^ fethFieldBits
	h.BaseLayer = split(data, wire.FETHLen)
	return nil
}
func (h *FETH) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	v, err := b.PrependBytes(wire.FETHLen)
	if err != nil {
		return err
	}
	wire.FETH(v).Encode(&h.FETHFields)
	r := h.Reserved &^ fethFieldBits
	v[0], v[1], v[2], v[3] = byte(r>>24), byte(r>>16), byte(r>>8), v[3]|byte(r)
	return nil
}

// CNPReserved is the 16 reserved bytes that follow the BTH of a CNP.
type CNPReserved struct {
	layers.BaseLayer
	Reserved [wire.CNPReservedLen]byte
	bth      *BTH
}

func (h *CNPReserved) LayerType() gopacket.LayerType  { return LayerTypeCNPReserved }
func (h *CNPReserved) CanDecode() gopacket.LayerClass { return LayerTypeCNPReserved }
func (h *CNPReserved) NextLayerType() gopacket.LayerType {
	return h.bth.next(wire.HdrCNPReserved, nil)
}
func (h *CNPReserved) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < wire.CNPReservedLen {
		return short("CNP reserved", wire.CNPReservedLen, len(data), df)
	}
	copy(h.Reserved[:], data)
	h.BaseLayer = split(data, wire.CNPReservedLen)
	return nil
}
func (h *CNPReserved) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	v, err := b.PrependBytes(wire.CNPReservedLen)
	if err != nil {
		return err
	}
	copy(v, h.Reserved[:])
	return nil
}
