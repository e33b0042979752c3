package wire

import "strconv"

// Opcode is the BTH OpCode: a 3-bit transport prefix and a 5-bit operation.
type Opcode uint8

// Transport prefixes (the top three bits of the opcode).
const (
	TransportRC  = 0x00
	TransportUC  = 0x20
	TransportRD  = 0x40
	TransportUD  = 0x60
	TransportCNP = 0x80

	transportMask = 0xE0
)

// Opcodes, named as include/rdma/ib_pack.h names them (without IB_OPCODE_).
const (
	RCSendFirst              Opcode = 0x00
	RCSendMiddle             Opcode = 0x01
	RCSendLast               Opcode = 0x02
	RCSendLastWithImmediate  Opcode = 0x03
	RCSendOnly               Opcode = 0x04
	RCSendOnlyWithImmediate  Opcode = 0x05
	RCRDMAWriteFirst         Opcode = 0x06
	RCRDMAWriteMiddle        Opcode = 0x07
	RCRDMAWriteLast          Opcode = 0x08
	RCRDMAWriteLastWithImm   Opcode = 0x09
	RCRDMAWriteOnly          Opcode = 0x0a
	RCRDMAWriteOnlyWithImm   Opcode = 0x0b
	RCRDMAReadRequest        Opcode = 0x0c
	RCRDMAReadResponseFirst  Opcode = 0x0d
	RCRDMAReadResponseMiddle Opcode = 0x0e
	RCRDMAReadResponseLast   Opcode = 0x0f
	RCRDMAReadResponseOnly   Opcode = 0x10
	RCAcknowledge            Opcode = 0x11
	RCAtomicAcknowledge      Opcode = 0x12
	RCCompareSwap            Opcode = 0x13
	RCFetchAdd               Opcode = 0x14
	RCSendLastWithInvalidate Opcode = 0x16
	RCSendOnlyWithInvalidate Opcode = 0x17
	RCFlush                  Opcode = 0x1c
	RCAtomicWrite            Opcode = 0x1d
	UCSendFirst              Opcode = 0x20
	UCSendMiddle             Opcode = 0x21
	UCSendLast               Opcode = 0x22
	UCSendLastWithImmediate  Opcode = 0x23
	UCSendOnly               Opcode = 0x24
	UCSendOnlyWithImmediate  Opcode = 0x25
	UCRDMAWriteFirst         Opcode = 0x26
	UCRDMAWriteMiddle        Opcode = 0x27
	UCRDMAWriteLast          Opcode = 0x28
	UCRDMAWriteLastWithImm   Opcode = 0x29
	UCRDMAWriteOnly          Opcode = 0x2a
	UCRDMAWriteOnlyWithImm   Opcode = 0x2b
	UDSendOnly               Opcode = 0x64
	UDSendOnlyWithImmediate  Opcode = 0x65
	CNP                      Opcode = 0x81
)

// Header names one extension header that can follow the BTH.
type Header uint8

const (
	HdrNone Header = iota
	HdrRDETH
	HdrDETH
	HdrRETH
	HdrAtomicETH
	HdrAETH
	HdrAtomicAckETH
	HdrImmDt
	HdrIETH
	HdrFETH
	HdrCNPReserved
)

var headerNames = [...]string{"", "RDETH", "DETH", "RETH", "AtomicETH", "AETH", "AtomicAckETH", "ImmDt", "IETH", "FETH", "CNPReserved"}
var headerLens = [...]int{0, RDETHLen, DETHLen, RETHLen, AtomicETHLen, AETHLen, AtomicAckETHLen, ImmDtLen, IETHLen, FETHLen, CNPReservedLen}

func (h Header) String() string {
	if int(h) < len(headerNames) {
		return headerNames[h]
	}
	return "Header(" + strconv.Itoa(int(h)) + ")"
}

// Len is the header's size in bytes.
func (h Header) Len() int {
	if int(h) < len(headerLens) {
		return headerLens[h]
	}
	return 0
}

// OpFlags describe what a packet of an opcode is and does; they mirror the
// RXE_*_MASK bits of kernel rxe's opcode table.
type OpFlags uint32

const (
	FlagPayload     OpFlags = 1 << iota // carries payload bytes
	FlagRequest                         // a request (requester → responder)
	FlagResponse                        // a response (ACK, atomic ACK, read response)
	FlagRecvWQE                         // consumes a receive WQE at the responder (RWR)
	FlagComplete                        // completes a receive WQE (COMP)
	FlagSend                            // part of a SEND
	FlagWrite                           // part of an RDMA WRITE
	FlagRead                            // RDMA READ request
	FlagAtomic                          // COMPARE_SWAP or FETCH_ADD
	FlagAtomicWrite                     // ATOMIC_WRITE
	FlagFlush                           // FLUSH
	FlagStart                           // first packet of a message (FIRST or ONLY)
	FlagMiddle                          // MIDDLE packet
	FlagEnd                             // last packet of a message (LAST or ONLY)
	FlagImm                             // carries ImmDt
	FlagInv                             // carries IETH
	FlagCNP                             // congestion notification
)

// MaxExtHeaders is the most extension headers any opcode carries.
const MaxExtHeaders = 2

// OpInfo is one row of the opcode table.
type OpInfo struct {
	Name    string // as kernel rxe spells it, e.g. RC_RDMA_WRITE_MIDDLE
	Flags   OpFlags
	Headers [MaxExtHeaders]Header // extension headers after the BTH, in wire order
	HdrLen  int                   // BTH plus extension headers
	// Offsets of each extension header from the start of the BTH (0 if absent).
	Offset [HdrCNPReserved + 1]int
}

// Has reports whether every flag in f is set.
func (i *OpInfo) Has(f OpFlags) bool { return i.Flags&f == f }

// HasHeader reports whether h follows the BTH.
func (i *OpInfo) HasHeader(h Header) bool { return i.Offset[h] != 0 }

var opTable [256]*OpInfo

func op(code Opcode, name string, flags OpFlags, hdrs ...Header) {
	info := &OpInfo{Name: name, Flags: flags, HdrLen: BTHLen}
	for i, h := range hdrs {
		info.Headers[i] = h
		info.Offset[h] = info.HdrLen
		info.HdrLen += h.Len()
		switch h {
		case HdrImmDt:
			info.Flags |= FlagImm
		case HdrIETH:
			info.Flags |= FlagInv
		}
	}
	opTable[code] = info
}

func init() {
	const (
		req   = FlagRequest
		pl    = FlagPayload
		first = FlagStart
		mid   = FlagMiddle
		last  = FlagEnd
		only  = FlagStart | FlagEnd
		snd   = FlagSend
		wr    = FlagWrite
		rwr   = FlagRecvWQE
		comp  = FlagComplete
		ack   = FlagResponse
	)
	for _, t := range []struct {
		base Opcode
		pfx  string
	}{{0x00, "RC_"}, {0x20, "UC_"}} {
		b, p := t.base, t.pfx
		op(b+0x00, p+"SEND_FIRST", req|pl|snd|rwr|first)
		op(b+0x01, p+"SEND_MIDDLE", req|pl|snd|mid)
		op(b+0x02, p+"SEND_LAST", req|pl|snd|comp|last)
		op(b+0x03, p+"SEND_LAST_WITH_IMMEDIATE", req|pl|snd|comp|last, HdrImmDt)
		op(b+0x04, p+"SEND_ONLY", req|pl|snd|rwr|comp|only)
		op(b+0x05, p+"SEND_ONLY_WITH_IMMEDIATE", req|pl|snd|rwr|comp|only, HdrImmDt)
		op(b+0x06, p+"RDMA_WRITE_FIRST", req|pl|wr|first, HdrRETH)
		op(b+0x07, p+"RDMA_WRITE_MIDDLE", req|pl|wr|mid)
		op(b+0x08, p+"RDMA_WRITE_LAST", req|pl|wr|last)
		op(b+0x09, p+"RDMA_WRITE_LAST_WITH_IMMEDIATE", req|pl|wr|rwr|comp|last, HdrImmDt)
		op(b+0x0a, p+"RDMA_WRITE_ONLY", req|pl|wr|only, HdrRETH)
		op(b+0x0b, p+"RDMA_WRITE_ONLY_WITH_IMMEDIATE", req|pl|wr|rwr|comp|only, HdrRETH, HdrImmDt)
	}
	op(RCRDMAReadRequest, "RC_RDMA_READ_REQUEST", req|FlagRead|only, HdrRETH)
	op(RCRDMAReadResponseFirst, "RC_RDMA_READ_RESPONSE_FIRST", ack|pl|first, HdrAETH)
	op(RCRDMAReadResponseMiddle, "RC_RDMA_READ_RESPONSE_MIDDLE", ack|pl|mid)
	op(RCRDMAReadResponseLast, "RC_RDMA_READ_RESPONSE_LAST", ack|pl|last, HdrAETH)
	op(RCRDMAReadResponseOnly, "RC_RDMA_READ_RESPONSE_ONLY", ack|pl|only, HdrAETH)
	op(RCAcknowledge, "RC_ACKNOWLEDGE", ack|only, HdrAETH)
	op(RCAtomicAcknowledge, "RC_ATOMIC_ACKNOWLEDGE", ack|only, HdrAETH, HdrAtomicAckETH)
	op(RCCompareSwap, "RC_COMPARE_SWAP", req|FlagAtomic|only, HdrAtomicETH)
	op(RCFetchAdd, "RC_FETCH_ADD", req|FlagAtomic|only, HdrAtomicETH)
	op(RCSendLastWithInvalidate, "RC_SEND_LAST_WITH_INVALIDATE", req|pl|snd|comp|last, HdrIETH)
	op(RCSendOnlyWithInvalidate, "RC_SEND_ONLY_WITH_INVALIDATE", req|pl|snd|rwr|comp|only, HdrIETH)
	op(RCFlush, "RC_FLUSH", req|FlagFlush|only, HdrFETH, HdrRETH)
	op(RCAtomicWrite, "RC_ATOMIC_WRITE", req|pl|FlagAtomicWrite|only, HdrRETH)
	op(UDSendOnly, "UD_SEND_ONLY", req|pl|snd|rwr|comp|only, HdrDETH)
	op(UDSendOnlyWithImmediate, "UD_SEND_ONLY_WITH_IMMEDIATE", req|pl|snd|rwr|comp|only, HdrDETH, HdrImmDt)
	op(CNP, "CNP", FlagCNP|only, HdrCNPReserved)
}

// Info returns the opcode's table row, or nil for an opcode vrnicd does not
// know (kernel rxe drops those before it looks further).
func (o Opcode) Info() *OpInfo { return opTable[o] }

// Valid reports whether o is in the table.
func (o Opcode) Valid() bool { return opTable[o] != nil }

// Transport is the opcode's transport prefix (TransportRC, TransportUC, ...).
func (o Opcode) Transport() uint8 { return uint8(o) & transportMask }

func (o Opcode) String() string {
	if i := opTable[o]; i != nil {
		return i.Name
	}
	return "OPCODE_0x" + strconv.FormatUint(uint64(o), 16)
}
