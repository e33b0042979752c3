// Package rocelayers is a gopacket codec for RoCEv2 transport packets: layer
// types for the BTH, every extension header and QP1's MADs, registered on UDP
// port 4791, so gopacket.NewPacket and DecodingLayerParser see RoCE inside
// Ethernet/IP/UDP. It serves tools, tests and debugging; the data path uses
// the zero-allocation views of package wire, which these layers wrap (the
// opcode table and field views are wire's, not copies).
//
// What follows the BTH is not said by any header but by the BTH's opcode
// (IBA 9.2): RETH may be followed by ImmDt or by payload, AETH by
// AtomicAckETH or by payload. An extension-header layer therefore needs the
// BTH it belongs to. Layers holds one of each layer, bound together: decode
// with its DecodingLayers, or with gopacket.NewPacket, which does the same
// internally. An extension layer decoded on its own treats whatever follows
// it as payload.
//
// The BTH layer splits the UDP payload into the headers and payload it passes
// on, the pad bytes and the 4-byte ICRC trailer, which it keeps. Every layer
// keeps its reserved bits, so a decoded packet serializes back byte for byte.
package rocelayers

import (
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/vrnic/vrnicd/transport/wire"
)

// Layer type numbers: 1791 and up (after UDP port 4791), inside gopacket's
// 1000-1999 range for application layer types. Other packages of this module
// must not register these numbers.
const (
	layerTypeBase = 1791
)

// Layer types, registered in init.
var (
	LayerTypeBTH          gopacket.LayerType
	LayerTypeRDETH        gopacket.LayerType
	LayerTypeDETH         gopacket.LayerType
	LayerTypeRETH         gopacket.LayerType
	LayerTypeAtomicETH    gopacket.LayerType
	LayerTypeAETH         gopacket.LayerType
	LayerTypeAtomicAckETH gopacket.LayerType
	LayerTypeImmDt        gopacket.LayerType
	LayerTypeIETH         gopacket.LayerType
	LayerTypeFETH         gopacket.LayerType
	LayerTypeCNPReserved  gopacket.LayerType
	LayerTypeMAD          gopacket.LayerType
)

// headerLayer maps a wire extension header to its layer type.
var headerLayer [wire.HdrCNPReserved + 1]gopacket.LayerType

// Registration happens in init, not in the var declarations: the decoders
// refer back to the layer types, which a var initializer may not.
func init() {
	reg := func(off int, name string) gopacket.LayerType {
		var t gopacket.LayerType
		t = gopacket.RegisterLayerType(layerTypeBase+off, gopacket.LayerTypeMetadata{
			Name:    name,
			Decoder: gopacket.DecodeFunc(func(data []byte, p gopacket.PacketBuilder) error { return decodeAs(t, data, p) }),
		})
		return t
	}
	LayerTypeBTH = reg(0, "BTH")
	LayerTypeRDETH = reg(1, "RDETH")
	LayerTypeDETH = reg(2, "DETH")
	LayerTypeRETH = reg(3, "RETH")
	LayerTypeAtomicETH = reg(4, "AtomicETH")
	LayerTypeAETH = reg(5, "AETH")
	LayerTypeAtomicAckETH = reg(6, "AtomicAckETH")
	LayerTypeImmDt = reg(7, "ImmDt")
	LayerTypeIETH = reg(8, "IETH")
	LayerTypeFETH = reg(9, "FETH")
	LayerTypeCNPReserved = reg(10, "CNPReserved")
	LayerTypeMAD = reg(11, "MAD")

	headerLayer = [...]gopacket.LayerType{
		wire.HdrNone:         gopacket.LayerTypePayload,
		wire.HdrRDETH:        LayerTypeRDETH,
		wire.HdrDETH:         LayerTypeDETH,
		wire.HdrRETH:         LayerTypeRETH,
		wire.HdrAtomicETH:    LayerTypeAtomicETH,
		wire.HdrAETH:         LayerTypeAETH,
		wire.HdrAtomicAckETH: LayerTypeAtomicAckETH,
		wire.HdrImmDt:        LayerTypeImmDt,
		wire.HdrIETH:         LayerTypeIETH,
		wire.HdrFETH:         LayerTypeFETH,
		wire.HdrCNPReserved:  LayerTypeCNPReserved,
	}

	layers.RegisterUDPPortLayerType(wire.RoCEv2Port, LayerTypeBTH)
}

// Layers is one of each RoCEv2 layer, bound so that each extension header
// knows its BTH. Decoded layers alias the decoded buffer.
type Layers struct {
	BTH          BTH
	RDETH        RDETH
	DETH         DETH
	RETH         RETH
	AtomicETH    AtomicETH
	AETH         AETH
	AtomicAckETH AtomicAckETH
	ImmDt        ImmDt
	IETH         IETH
	FETH         FETH
	CNPReserved  CNPReserved
	MAD          MAD
	Payload      gopacket.Payload
}

// DecodingLayers binds l and returns its layers for a DecodingLayerParser:
//
//	var eth layers.Ethernet; var ip4 layers.IPv4; var udp layers.UDP; var rl rocelayers.Layers
//	p := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet,
//		append([]gopacket.DecodingLayer{&eth, &ip4, &udp}, rl.DecodingLayers()...)...)
func (l *Layers) DecodingLayers() []gopacket.DecodingLayer {
	l.bind()
	return []gopacket.DecodingLayer{&l.BTH, &l.RDETH, &l.DETH, &l.RETH, &l.AtomicETH, &l.AETH,
		&l.AtomicAckETH, &l.ImmDt, &l.IETH, &l.FETH, &l.CNPReserved, &l.MAD, &l.Payload}
}

func (l *Layers) bind() {
	b := &l.BTH
	l.RDETH.bth, l.DETH.bth, l.RETH.bth, l.AtomicETH.bth, l.AETH.bth = b, b, b, b, b
	l.AtomicAckETH.bth, l.ImmDt.bth, l.IETH.bth, l.FETH.bth, l.CNPReserved.bth = b, b, b, b, b
}

// layer returns l's layer of type t, or nil for a type l does not hold.
func (l *Layers) layer(t gopacket.LayerType) gopacket.DecodingLayer {
	switch t {
	case LayerTypeBTH:
		return &l.BTH
	case LayerTypeRDETH:
		return &l.RDETH
	case LayerTypeDETH:
		return &l.DETH
	case LayerTypeRETH:
		return &l.RETH
	case LayerTypeAtomicETH:
		return &l.AtomicETH
	case LayerTypeAETH:
		return &l.AETH
	case LayerTypeAtomicAckETH:
		return &l.AtomicAckETH
	case LayerTypeImmDt:
		return &l.ImmDt
	case LayerTypeIETH:
		return &l.IETH
	case LayerTypeFETH:
		return &l.FETH
	case LayerTypeCNPReserved:
		return &l.CNPReserved
	case LayerTypeMAD:
		return &l.MAD
	}
	return nil
}

// Serializable returns the decoded RoCE layers of l in wire order, for
// gopacket.SerializeLayers, given the types a DecodingLayerParser
// reported.
func (l *Layers) Serializable(decoded []gopacket.LayerType) []gopacket.SerializableLayer {
	var out []gopacket.SerializableLayer
	for _, t := range decoded {
		if t == gopacket.LayerTypePayload {
			out = append(out, &l.Payload)
			continue
		}
		if dl, ok := l.layer(t).(gopacket.SerializableLayer); ok {
			out = append(out, dl)
		}
	}
	return out
}

// decodeAs is the gopacket.Decoder of every layer type here: a fresh bound
// Layers per packet (gopacket.NewPacket allocates per packet anyway), then
// each layer chains to the next through the same set.
func decodeAs(t gopacket.LayerType, data []byte, p gopacket.PacketBuilder) error {
	l := new(Layers)
	l.bind()
	return chain{l, t}.Decode(data, p)
}

type chain struct {
	l *Layers
	t gopacket.LayerType
}

func (c chain) Decode(data []byte, p gopacket.PacketBuilder) error {
	dl := c.l.layer(c.t)
	if dl == nil {
		return p.NextDecoder(c.t)
	}
	if err := dl.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(dl.(gopacket.Layer))
	next := dl.NextLayerType()
	if next == gopacket.LayerTypeZero {
		return nil
	}
	return p.NextDecoder(chain{c.l, next})
}
