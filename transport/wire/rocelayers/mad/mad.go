// Package mad encodes and decodes InfiniBand management datagrams (IBA vol 1
// ch. 13.4) as they travel over RoCEv2 to and from QP1: the 24-byte common
// MAD header and the Communication Management attributes of ch. 12 (REQ, MRA,
// REJ, REP, RTU, DREQ, DREP, SIDR_REQ, SIDR_REP), plus the rdma_cm IP CM
// header that rdma_cm puts at the front of a REQ's private data.
//
// It depends on nothing but the standard library so that a connection
// manager can use it without the gopacket layers of package rocelayers, which
// wrap it for tools. Bit fields are MSB-first within their byte, as the
// kernel's include/rdma/ibta_vol1_c12.h locates them; encoders write reserved
// bits as zero, as the spec requires of senders.
package mad

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// Sizes in bytes.
const (
	Size      = 256 // a MAD on QP0/QP1 is always 256 bytes
	HeaderLen = 24  // common MAD header
	CMDataLen = 232 // every CM message fills the rest of the MAD
	GIDLen    = 16
)

// Header constants for CM MADs (IBA 12.6 and 13.4.2).
const (
	BaseVersion    = 1
	ClassCM        = 0x07
	CMClassVersion = 2
)

// Management classes that have names (IBA Table 135).
const (
	ClassSubnLID     = 0x01
	ClassSubnDR      = 0x81
	ClassSubnAdm     = 0x03
	ClassPerf        = 0x04
	ClassBM          = 0x05
	ClassDevMgt      = 0x06
	ClassSNMP        = 0x08
	ClassVendorRange = 0x09
)

// Methods (IBA Table 136). Bit 7 marks a response.
const (
	MethodGet         = 0x01
	MethodSet         = 0x02
	MethodSend        = 0x03
	MethodTrap        = 0x05
	MethodReport      = 0x06
	MethodTrapRepress = 0x07
	MethodResponse    = 0x80
	MethodGetResp     = MethodGet | MethodResponse
	MethodReportResp  = MethodReport | MethodResponse
)

// MAD status codes (IBA 13.4.7, Table 132): bits 4:2 of the status field.
const (
	StatusBusy                  = 0x0001
	StatusRedirect              = 0x0002
	StatusBadVersion            = 0x0004
	StatusUnsupportedMethod     = 0x0008
	StatusUnsupportedMethodAttr = 0x000C
	StatusInvalidAttrValue      = 0x001C
)

// CM attribute IDs (IBA Table 104).
const (
	AttrClassPortInfo         = 0x0001
	AttrConnectRequest        = 0x0010 // REQ
	AttrMsgRcptAck            = 0x0011 // MRA
	AttrConnectReject         = 0x0012 // REJ
	AttrConnectReply          = 0x0013 // REP
	AttrReadyToUse            = 0x0014 // RTU
	AttrDisconnectRequest     = 0x0015 // DREQ
	AttrDisconnectReply       = 0x0016 // DREP
	AttrServiceIDResReq       = 0x0017 // SIDR_REQ
	AttrServiceIDResReqResp   = 0x0018 // SIDR_REP
	AttrLoadAlternatePath     = 0x0019 // LAP
	AttrAlternatePathResponse = 0x001A // APR
)

var cmAttrNames = map[uint16]string{
	AttrClassPortInfo:         "ClassPortInfo",
	AttrConnectRequest:        "ConnectRequest",
	AttrMsgRcptAck:            "MsgRcptAck",
	AttrConnectReject:         "ConnectReject",
	AttrConnectReply:          "ConnectReply",
	AttrReadyToUse:            "ReadyToUse",
	AttrDisconnectRequest:     "DisconnectRequest",
	AttrDisconnectReply:       "DisconnectReply",
	AttrServiceIDResReq:       "ServiceIDResReq",
	AttrServiceIDResReqResp:   "ServiceIDResReqResp",
	AttrLoadAlternatePath:     "LoadAlternatePath",
	AttrAlternatePathResponse: "AlternatePathResponse",
}

// AttrName is the IBA name of an attribute of a class ("ConnectRequest"), or
// its number in hex when the class or attribute has no name here.
func AttrName(class uint8, id uint16) string {
	if class == ClassCM {
		if n, ok := cmAttrNames[id]; ok {
			return n
		}
	}
	return fmt.Sprintf("0x%04x", id)
}

var methodNames = map[uint8]string{
	MethodGet: "Get", MethodSet: "Set", MethodSend: "Send", MethodTrap: "Trap",
	MethodReport: "Report", MethodTrapRepress: "TrapRepress", MethodGetResp: "GetResp",
	MethodReportResp: "ReportResp",
}

// MethodName is the IBA name of a method ("Send"), or its number in hex.
func MethodName(m uint8) string {
	if n, ok := methodNames[m]; ok {
		return n
	}
	return "0x" + strconv.FormatUint(uint64(m), 16)
}

var classNames = map[uint8]string{
	ClassSubnLID: "SubnMgt", ClassSubnDR: "SubnMgtDR", ClassSubnAdm: "SubnAdm", ClassPerf: "Perf",
	ClassBM: "BM", ClassDevMgt: "DevMgt", ClassCM: "CM", ClassSNMP: "SNMP",
}

// ClassName is a short name of a management class ("CM"), or its number in hex.
func ClassName(c uint8) string {
	if n, ok := classNames[c]; ok {
		return n
	}
	return "0x" + strconv.FormatUint(uint64(c), 16)
}

// Errors.
var (
	ErrShort       = errors.New("mad: too short")
	ErrNotCM       = errors.New("mad: not a CM MAD")
	ErrUnknownAttr = errors.New("mad: unknown CM attribute")
)

// Header is the common MAD header (IBA 13.4.2).
type Header struct {
	BaseVersion       uint8  `json:"base_version"`
	MgmtClass         uint8  `json:"class"`
	ClassVersion      uint8  `json:"class_version"`
	Method            uint8  `json:"method"`
	Status            uint16 `json:"status"`
	ClassSpecific     uint16 `json:"class_specific"`
	TransactionID     uint64 `json:"tid"`
	AttributeID       uint16 `json:"attr_id"`
	Reserved          uint16 `json:"-"`
	AttributeModifier uint32 `json:"attr_mod"`
}

// Decode reads the header from the first HeaderLen bytes of b.
func (h *Header) Decode(b []byte) error {
	if len(b) < HeaderLen {
		return fmt.Errorf("%w: MAD header needs %d bytes, have %d", ErrShort, HeaderLen, len(b))
	}
	*h = Header{
		BaseVersion:       b[0],
		MgmtClass:         b[1],
		ClassVersion:      b[2],
		Method:            b[3],
		Status:            binary.BigEndian.Uint16(b[4:]),
		ClassSpecific:     binary.BigEndian.Uint16(b[6:]),
		TransactionID:     binary.BigEndian.Uint64(b[8:]),
		AttributeID:       binary.BigEndian.Uint16(b[16:]),
		Reserved:          binary.BigEndian.Uint16(b[18:]),
		AttributeModifier: binary.BigEndian.Uint32(b[20:]),
	}
	return nil
}

// Encode writes the header into the first HeaderLen bytes of b, which must
// be that long.
func (h *Header) Encode(b []byte) {
	_ = b[HeaderLen-1]
	b[0], b[1], b[2], b[3] = h.BaseVersion, h.MgmtClass, h.ClassVersion, h.Method
	binary.BigEndian.PutUint16(b[4:], h.Status)
	binary.BigEndian.PutUint16(b[6:], h.ClassSpecific)
	binary.BigEndian.PutUint64(b[8:], h.TransactionID)
	binary.BigEndian.PutUint16(b[16:], h.AttributeID)
	binary.BigEndian.PutUint16(b[18:], h.Reserved)
	binary.BigEndian.PutUint32(b[20:], h.AttributeModifier)
}

// CMHeader is the header of a CM MAD as kernel ib_cm sends it: version 1,
// class CM version 2, method Send, status 0.
func CMHeader(tid uint64, attr uint16) Header {
	return Header{BaseVersion: BaseVersion, MgmtClass: ClassCM, ClassVersion: CMClassVersion,
		Method: MethodSend, TransactionID: tid, AttributeID: attr}
}

// Message is one CM attribute's payload: the CMDataLen bytes after the header.
type Message interface {
	// AttributeID is the CM attribute the message travels as.
	AttributeID() uint16
	// Decode reads the message from b (at least CMDataLen bytes).
	Decode(b []byte) error
	// Encode writes the message into b (at least CMDataLen bytes), reserved
	// bits zero.
	Encode(b []byte)
	// Private is the message's private data area.
	Private() []byte
}

// NewMessage returns an empty message for a CM attribute, or nil if the
// attribute is not one this package decodes.
func NewMessage(attr uint16) Message {
	switch attr {
	case AttrConnectRequest:
		return new(REQ)
	case AttrMsgRcptAck:
		return new(MRA)
	case AttrConnectReject:
		return new(REJ)
	case AttrConnectReply:
		return new(REP)
	case AttrReadyToUse:
		return new(RTU)
	case AttrDisconnectRequest:
		return new(DREQ)
	case AttrDisconnectReply:
		return new(DREP)
	case AttrServiceIDResReq:
		return new(SIDRREQ)
	case AttrServiceIDResReqResp:
		return new(SIDRREP)
	}
	return nil
}

// DecodeCM decodes the CM message of a MAD's data area (the bytes after the
// header) for attribute attr.
func DecodeCM(attr uint16, data []byte) (Message, error) {
	m := NewMessage(attr)
	if m == nil {
		return nil, fmt.Errorf("%w 0x%04x", ErrUnknownAttr, attr)
	}
	if err := m.Decode(data); err != nil {
		return nil, err
	}
	return m, nil
}

// Decode decodes a whole MAD: the header and, for a CM MAD with a known
// attribute, its message. A MAD of another class returns a nil Message and no
// error.
func Decode(b []byte) (Header, Message, error) {
	var h Header
	if err := h.Decode(b); err != nil {
		return h, nil, err
	}
	if h.MgmtClass != ClassCM {
		return h, nil, nil
	}
	m, err := DecodeCM(h.AttributeID, b[HeaderLen:])
	return h, m, err
}

// EncodeCM writes a 256-byte CM MAD into b: h with its AttributeID set from
// msg, then msg. It returns Size, or an error if b is too short.
func EncodeCM(b []byte, h Header, msg Message) (int, error) {
	if len(b) < Size {
		return 0, fmt.Errorf("%w: a MAD needs %d bytes, buffer has %d", ErrShort, Size, len(b))
	}
	h.AttributeID = msg.AttributeID()
	h.Encode(b)
	msg.Encode(b[HeaderLen:Size])
	return Size, nil
}

// AppendCM appends a 256-byte CM MAD (as EncodeCM writes it) to b.
func AppendCM(b []byte, h Header, msg Message) []byte {
	n := len(b)
	b = append(b, make([]byte, Size)...)
	_, _ = EncodeCM(b[n:], h, msg) // cannot fail: Size bytes are there
	return b
}

func checkData(name string, b []byte) error {
	if len(b) < CMDataLen {
		return fmt.Errorf("%w: CM %s needs %d bytes, have %d", ErrShort, name, CMDataLen, len(b))
	}
	return nil
}
