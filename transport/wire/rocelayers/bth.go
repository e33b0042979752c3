package rocelayers

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/vrnic/vrnicd/transport/wire"
)

// BTH is the Base Transport Header layer. It owns the whole UDP payload:
// Contents is the 12-byte BTH, Payload the extension headers and payload
// that follow (without pad and ICRC), Pad and ICRC the trailer.
type BTH struct {
	layers.BaseLayer
	wire.BTHFields
	Resv6a uint8  // bits 5:0 of byte 4 (the ICRC masks the whole byte)
	Resv7  uint8  // bits 6:0 of byte 8
	Pad    []byte // the PadCnt pad bytes between payload and ICRC
	ICRC   uint32 // the ICRC as the wire carries it (little-endian)

	op *wire.OpInfo
}

func (b *BTH) LayerType() gopacket.LayerType  { return LayerTypeBTH }
func (b *BTH) CanDecode() gopacket.LayerClass { return LayerTypeBTH }

// Op is the opcode's row of the wire opcode table, nil before a decode.
func (b *BTH) Op() *wire.OpInfo { return b.op }

// DecodeFromBytes splits data (the UDP payload) with wire.Packet.Parse.
func (b *BTH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	var p wire.Packet
	if err := p.Parse(data); err != nil {
		b.op = nil
		switch {
		case errors.Is(err, wire.ErrTruncated):
			df.SetTruncated()
			if len(data) > 0 && wire.Opcode(data[0]).Valid() {
				op := wire.Opcode(data[0]).Info()
				return fmt.Errorf("%w: %d bytes, %s needs %d", err, len(data), op.Name, op.HdrLen+wire.ICRCLen)
			}
			return fmt.Errorf("%w: %d bytes", err, len(data))
		case errors.Is(err, wire.ErrUnknownOpcode):
			return fmt.Errorf("%w 0x%02x", err, data[0])
		case errors.Is(err, wire.ErrPadCnt):
			return fmt.Errorf("%w: PadCnt %d, %d bytes after the headers", err, (data[1]>>4)&3, len(data)-wire.ICRCLen-p.Op.HdrLen)
		}
		return err
	}
	b.BTHFields = p.BTH.Fields()
	b.Resv6a = data[4] & 0x3f
	b.Resv7 = data[8] & 0x7f
	end := len(data) - wire.ICRCLen - len(p.Pad)
	b.BaseLayer = layers.BaseLayer{Contents: data[:wire.BTHLen], Payload: data[wire.BTHLen:end]}
	b.Pad = p.Pad
	b.ICRC = p.ICRCValue()
	b.op = p.Op
	return nil
}

// NextLayerType is the opcode's first extension header, or the payload.
func (b *BTH) NextLayerType() gopacket.LayerType {
	if b.op == nil {
		return gopacket.LayerTypeZero
	}
	return headerLayer[b.op.Headers[0]]
}

// PayloadLen is the number of payload bytes after every transport header,
// pad and ICRC excluded.
func (b *BTH) PayloadLen() int {
	if b.op == nil {
		return 0
	}
	return len(b.Payload) - (b.op.HdrLen - wire.BTHLen)
}

// next is the layer after extension header h of b's opcode. d is the DETH,
// when h is one: a UD SEND to or from QP1 with the GSI Q_Key carries a MAD.
func (b *BTH) next(h wire.Header, d *DETH) gopacket.LayerType {
	if b == nil || b.op == nil {
		return gopacket.LayerTypePayload
	}
	hs := &b.op.Headers
	for i, x := range hs {
		if x != h {
			continue
		}
		if i+1 < len(hs) && hs[i+1] != wire.HdrNone {
			return headerLayer[hs[i+1]]
		}
		if d != nil && b.Opcode == wire.UDSendOnly && d.QKey == wire.GSIQKey && (b.DestQP == 1 || d.SrcQP == 1) {
			return LayerTypeMAD
		}
		return gopacket.LayerTypePayload
	}
	return gopacket.LayerTypePayload
}

// SerializeTo prepends the BTH and appends pad and ICRC to what the inner
// layers wrote (the extension headers and payload). With FixLengths the
// PadCnt follows the payload length and the pad is zeros; otherwise PadCnt
// and Pad are written as they are. The ICRC field is written as it is:
// ComputeChecksums cannot fill it here, because it covers the IP and UDP
// headers that outer layers prepend later. Seal the finished frame with
// SealFrame.
func (b *BTH) SerializeTo(buf gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	op := b.Opcode.Info()
	if op == nil {
		return fmt.Errorf("rocelayers: BTH: %w 0x%02x", wire.ErrUnknownOpcode, uint8(b.Opcode))
	}
	inner := len(buf.Bytes())
	ext := op.HdrLen - wire.BTHLen
	if inner < ext {
		return fmt.Errorf("rocelayers: BTH: %s needs %d bytes of extension headers, %d follow", op.Name, ext, inner)
	}
	f := b.BTHFields
	if opts.FixLengths {
		f.PadCnt = wire.PadFor(inner - ext)
		b.PadCnt = f.PadCnt
	}
	pad := int(f.PadCnt & 3)
	tail, err := buf.AppendBytes(pad + wire.ICRCLen)
	if err != nil {
		return err
	}
	if !opts.FixLengths && len(b.Pad) == pad {
		copy(tail, b.Pad)
	} else {
		clear(tail[:pad])
	}
	binary.LittleEndian.PutUint32(tail[pad:], b.ICRC)
	h, err := buf.PrependBytes(wire.BTHLen)
	if err != nil {
		return err
	}
	wire.BTH(h).Encode(&f)
	h[4] |= b.Resv6a & 0x3f
	h[8] |= b.Resv7 & 0x7f
	return nil
}
