package wire

import (
	"encoding/binary"
	"errors"
)

// Errors of Packet.Parse.
var (
	ErrTruncated     = errors.New("wire: truncated RoCEv2 packet")
	ErrUnknownOpcode = errors.New("wire: unknown opcode")
	ErrPadCnt        = errors.New("wire: PadCnt larger than the payload")
)

// Packet is a parsed view of one RoCEv2 transport packet: the UDP payload from
// the BTH through the ICRC. Every field aliases the parsed buffer; views of
// headers the opcode does not carry are nil.
type Packet struct {
	Op           *OpInfo
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
	Payload      []byte // after every transport header, without pad and ICRC
	Pad          []byte // PadCnt bytes
	ICRC         []byte // the four ICRC bytes as on the wire
}

// Parse splits b (BTH ... ICRC) into p's views. It checks only structure:
// a known opcode, room for its headers and the ICRC, and PadCnt within the
// payload. Semantic checks (TVer, P_Key, lengths against the MTU) belong to
// the receiver. Parse does not allocate.
func (p *Packet) Parse(b []byte) error {
	*p = Packet{}
	if len(b) < BTHLen+ICRCLen {
		return ErrTruncated
	}
	bth := BTH(b[:BTHLen])
	info := bth.Opcode().Info()
	if info == nil {
		return ErrUnknownOpcode
	}
	if len(b) < info.HdrLen+ICRCLen {
		return ErrTruncated
	}
	p.Op = info
	p.BTH = bth
	for _, h := range info.Headers {
		if h == HdrNone {
			break
		}
		off := info.Offset[h]
		v := b[off : off+h.Len() : off+h.Len()]
		switch h {
		case HdrRDETH:
			p.RDETH = RDETH(v)
		case HdrDETH:
			p.DETH = DETH(v)
		case HdrRETH:
			p.RETH = RETH(v)
		case HdrAtomicETH:
			p.AtomicETH = AtomicETH(v)
		case HdrAETH:
			p.AETH = AETH(v)
		case HdrAtomicAckETH:
			p.AtomicAckETH = AtomicAckETH(v)
		case HdrImmDt:
			p.ImmDt = ImmDt(v)
		case HdrIETH:
			p.IETH = IETH(v)
		case HdrFETH:
			p.FETH = FETH(v)
		}
	}
	end := len(b) - ICRCLen
	pad := int(bth.PadCnt())
	if end-info.HdrLen < pad {
		return ErrPadCnt
	}
	p.Payload = b[info.HdrLen : end-pad : end-pad]
	p.Pad = b[end-pad : end : end]
	p.ICRC = b[end:]
	return nil
}

// ICRCValue is the received ICRC as a number (little-endian on the wire).
func (p *Packet) ICRCValue() uint32 { return binary.LittleEndian.Uint32(p.ICRC) }

// PadFor returns the PadCnt for a payload of n bytes.
func PadFor(n int) uint8 { return uint8(-n & 3) }

// Len is the size of the transport packet (BTH ... ICRC) for an opcode and
// payload length.
func Len(info *OpInfo, payload int) int {
	return info.HdrLen + payload + int(PadFor(payload)) + ICRCLen
}

// PacketFields describes a whole transport packet for Encode. Extension
// header fields are used only when the opcode carries that header.
type PacketFields struct {
	BTH          BTHFields
	DETH         DETHFields
	RETH         RETHFields
	AtomicETH    AtomicETHFields
	AETH         AETHFields
	AtomicAckETH uint64
	Imm          uint32
	IETH         uint32
	FETH         FETHFields
	RDETH        uint32
	Payload      []byte
}

// EncodedLen is the number of bytes Encode writes, ICRC included.
func (f *PacketFields) EncodedLen() int {
	info := f.BTH.Opcode.Info()
	if info == nil {
		return 0
	}
	return Len(info, len(f.Payload))
}

// Encode writes the BTH (with PadCnt derived from the payload), the opcode's
// extension headers, the payload and zero pad bytes into b, and zeroes the
// ICRC field, which the caller fills once the IP and UDP headers are in front
// (PutICRC). It returns the bytes written, or 0 if the opcode is unknown or b
// is too short.
func (f *PacketFields) Encode(b []byte) int {
	info := f.BTH.Opcode.Info()
	if info == nil {
		return 0
	}
	n := Len(info, len(f.Payload))
	if len(b) < n {
		return 0
	}
	bth := f.BTH
	bth.PadCnt = PadFor(len(f.Payload))
	BTH(b).Encode(&bth)
	for _, h := range info.Headers {
		if h == HdrNone {
			break
		}
		v := b[info.Offset[h]:]
		switch h {
		case HdrRDETH:
			RDETH(v).SetEEC(f.RDETH)
		case HdrDETH:
			DETH(v).Encode(&f.DETH)
		case HdrRETH:
			RETH(v).Encode(&f.RETH)
		case HdrAtomicETH:
			AtomicETH(v).Encode(&f.AtomicETH)
		case HdrAETH:
			AETH(v).Encode(&f.AETH)
		case HdrAtomicAckETH:
			AtomicAckETH(v).Encode(f.AtomicAckETH)
		case HdrImmDt:
			ImmDt(v).Encode(f.Imm)
		case HdrIETH:
			IETH(v).Encode(f.IETH)
		case HdrFETH:
			FETH(v).Encode(&f.FETH)
		case HdrCNPReserved:
			clear(v[:CNPReservedLen])
		}
	}
	off := info.HdrLen + copy(b[info.HdrLen:], f.Payload)
	clear(b[off:n])
	return n
}

// Fields returns the decoded fields of a parsed packet; Payload aliases p's.
func (p *Packet) Fields() PacketFields {
	f := PacketFields{BTH: p.BTH.Fields(), Payload: p.Payload}
	if p.DETH != nil {
		f.DETH = p.DETH.Fields()
	}
	if p.RETH != nil {
		f.RETH = p.RETH.Fields()
	}
	if p.AtomicETH != nil {
		f.AtomicETH = p.AtomicETH.Fields()
	}
	if p.AETH != nil {
		f.AETH = p.AETH.Fields()
	}
	if p.AtomicAckETH != nil {
		f.AtomicAckETH = p.AtomicAckETH.Orig()
	}
	if p.ImmDt != nil {
		f.Imm = p.ImmDt.Imm()
	}
	if p.IETH != nil {
		f.IETH = p.IETH.RKey()
	}
	if p.FETH != nil {
		f.FETH = p.FETH.Fields()
	}
	if p.RDETH != nil {
		f.RDETH = p.RDETH.EEC()
	}
	return f
}

// EncodeHeaders writes the BTH (PadCnt derived from payloadLen) and the
// opcode's extension headers from f, zeroes the pad bytes and the ICRC
// field, and returns the packet length; the caller puts payloadLen bytes at
// b[HdrLen:]. This lets a sender gather payload straight from memory into
// the packet. It returns 0 if the opcode is unknown or b is too short.
func (f *PacketFields) EncodeHeaders(b []byte, payloadLen int) int {
	info := f.BTH.Opcode.Info()
	if info == nil || payloadLen < 0 {
		return 0
	}
	n := Len(info, payloadLen)
	if len(b) < n {
		return 0
	}
	p := f.Payload
	f.Payload = nil
	f.Encode(b[:info.HdrLen+ICRCLen]) // headers; its payload-less tail is rewritten below
	f.Payload = p
	BTH(b).SetPadCnt(PadFor(payloadLen))
	clear(b[info.HdrLen+payloadLen : n])
	return n
}
