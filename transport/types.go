package transport

import (
	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/transport/wire"
	"github.com/vrnic/vrnicd/verbsock/ibv"
)

// The client-visible vocabulary (QP types and states, WR opcodes, send
// flags, SGEs, address vectors, completions) is defined in verbsock/ibv,
// the leaf package the client SDK shares without linking the engine; the
// names below are aliases of it.
type (
	QPType        = ibv.QPType
	QPState       = ibv.QPState
	WROpcode      = ibv.WROpcode
	SendFlags     = ibv.SendFlags
	SGE           = ibv.SGE
	AddressVector = ibv.AHAttr
	WCStatus      = ibv.WCStatus
	WCOpcode      = ibv.WCOpcode
	WCFlags       = ibv.WCFlags
	WC            = ibv.WC
)

const (
	QPTypeGSI = ibv.QPTypeGSI
	QPTypeRC  = ibv.QPTypeRC
	QPTypeUC  = ibv.QPTypeUC
	QPTypeUD  = ibv.QPTypeUD
)

const (
	StateReset = ibv.QPStateReset
	StateInit  = ibv.QPStateInit
	StateRTR   = ibv.QPStateRTR
	StateRTS   = ibv.QPStateRTS
	StateSQD   = ibv.QPStateSQD
	StateSQE   = ibv.QPStateSQE
	StateErr   = ibv.QPStateErr
)

// isDatagram reports whether the QP type is UD-like (UD or GSI).
func isDatagram(t QPType) bool { return t == QPTypeUD || t == QPTypeGSI }

// wireTransport is the opcode prefix of the QP type's packets.
func wireTransport(t QPType) uint8 {
	switch t {
	case QPTypeRC:
		return wire.TransportRC
	case QPTypeUC:
		return wire.TransportUC
	}
	return wire.TransportUD
}

const (
	WRRDMAWrite        = ibv.WRRDMAWrite
	WRRDMAWriteWithImm = ibv.WRRDMAWriteWithImm
	WRSend             = ibv.WRSend
	WRSendWithImm      = ibv.WRSendWithImm
	WRRDMARead         = ibv.WRRDMARead
	WRAtomicCmpAndSwp  = ibv.WRAtomicCmpAndSwp
	WRAtomicFetchAdd   = ibv.WRAtomicFetchAdd
	WRLocalInv         = ibv.WRLocalInv
	WRBindMW           = ibv.WRBindMW
	WRSendWithInv      = ibv.WRSendWithInv
	WRFlush            = ibv.WRFlush
	WRAtomicWrite      = ibv.WRAtomicWrite
	WRRegMR            = ibv.WRRegMR
)

// OpcodeAllowed reports whether a QP of type t accepts work requests of
// opcode o (ibv.OpcodeAllowed, the one definition the engine, the daemon's
// ring decoder and the client SDK share).
func OpcodeAllowed(t QPType, o WROpcode) bool { return ibv.OpcodeAllowed(t, o) }

// isLocal reports whether the opcode is executed by the send queue itself
// without going on the wire.
func isLocal(o WROpcode) bool { return o == WRLocalInv || o == WRRegMR || o == WRBindMW }

// isRdAtomic reports whether the opcode takes an initiator-depth credit
// (max_rd_atomic): the responder answers it from a saved resource.
func isRdAtomic(o WROpcode) bool {
	switch o {
	case WRRDMARead, WRAtomicCmpAndSwp, WRAtomicFetchAdd, WRAtomicWrite, WRFlush:
		return true
	}
	return false
}

const (
	SendFence     = ibv.SendFence
	SendSignaled  = ibv.SendSignaled
	SendSolicited = ibv.SendSolicited
	SendInline    = ibv.SendInline
)

// RegMRWR is the payload of a REG_MR work request (fast registration).
type RegMRWR struct {
	Key      uint32 // the MR's new key (index unchanged, key byte the consumer's choice)
	Pages    []mem.Page
	PageSize uint32
	IOVA     uint64
	Length   uint64
	Access   mem.Access
}

// BindMWWR is the payload of a BIND_MW work request.
type BindMWWR struct {
	MWKey  uint32 // the window's new rkey
	MRKey  uint32 // lkey of the MR the window lies in
	Addr   uint64
	Length uint64
	Access mem.Access
}

// SendWR is a send work request as the engine keeps it: copied once from the
// client and validated before Post.
type SendWR struct {
	ID     uint64
	Opcode WROpcode
	Flags  SendFlags
	SGL    []SGE
	Inline []byte // SendInline: the data itself, copied at post time

	// ImmData is the immediate data of *_WITH_IMM, or the rkey to invalidate
	// for SEND_WITH_INV and LOCAL_INV.
	ImmData uint32

	RemoteAddr uint64
	RKey       uint32
	CompareAdd uint64 // compare (CMP_AND_SWP) or add (FETCH_ADD)
	Swap       uint64

	// UD only.
	AH         *AddressVector
	RemoteQPN  uint32
	RemoteQKey uint32

	RegMR *RegMRWR
	Bind  *BindMWWR

	FlushType  uint8 // wire.FlushSel*
	FlushLevel uint8 // wire.FlushPlace*

	// Fault, if not WCSuccess, says the WR failed validation before it
	// reached the engine (a hostile or broken ring entry): it completes
	// with this status in SQ order and nothing of it is executed.
	Fault WCStatus
}

// length is the message length of the WR.
func (wr *SendWR) length() uint64 {
	if wr.Flags&SendInline != 0 {
		return uint64(len(wr.Inline))
	}
	var n uint64
	for _, s := range wr.SGL {
		n += uint64(s.Length)
	}
	return n
}

// RecvWR is a receive work request.
type RecvWR struct {
	ID  uint64
	SGL []SGE
	// Fault, if not WCSuccess, says the WR failed validation (a hostile or
	// broken ring entry): the message that would use it fails instead
	// (RC: remote operational error NAK; UC/UD: the WR completes with Fault).
	Fault WCStatus
}

const (
	WCSuccess        = ibv.WCSuccess
	WCLocLenErr      = ibv.WCLocLenErr
	WCLocQPOpErr     = ibv.WCLocQPOpErr
	WCLocEECOpErr    = ibv.WCLocEECOpErr
	WCLocProtErr     = ibv.WCLocProtErr
	WCWRFlushErr     = ibv.WCWRFlushErr
	WCMWBindErr      = ibv.WCMWBindErr
	WCBadRespErr     = ibv.WCBadRespErr
	WCLocAccessErr   = ibv.WCLocAccessErr
	WCRemInvReqErr   = ibv.WCRemInvReqErr
	WCRemAccessErr   = ibv.WCRemAccessErr
	WCRemOpErr       = ibv.WCRemOpErr
	WCRetryExcErr    = ibv.WCRetryExcErr
	WCRNRRetryExcErr = ibv.WCRNRRetryExcErr
	WCLocRDDViolErr  = ibv.WCLocRDDViolErr
	WCRemInvRDReqErr = ibv.WCRemInvRDReqErr
	WCRemAbortErr    = ibv.WCRemAbortErr
	WCInvEECNErr     = ibv.WCInvEECNErr
	WCInvEECStateErr = ibv.WCInvEECStateErr
	WCFatalErr       = ibv.WCFatalErr
	WCRespTimeoutErr = ibv.WCRespTimeoutErr
	WCGeneralErr     = ibv.WCGeneralErr
)

const (
	WCSend            = ibv.WCSend
	WCRDMAWrite       = ibv.WCRDMAWrite
	WCRDMARead        = ibv.WCRDMARead
	WCCompSwap        = ibv.WCCompSwap
	WCFetchAdd        = ibv.WCFetchAdd
	WCBindMW          = ibv.WCBindMW
	WCLocalInv        = ibv.WCLocalInv
	WCFlush           = ibv.WCFlush
	WCAtomicWrite     = ibv.WCAtomicWrite
	WCRegMR           = ibv.WCRegMR
	WCRecv            = ibv.WCRecv
	WCRecvRDMAWithImm = ibv.WCRecvRDMAWithImm
)

const (
	WCWithGRH = ibv.WCWithGRH
	WCWithImm = ibv.WCWithImm
	WCWithInv = ibv.WCWithInv
)

// wcOpcode maps a send WR opcode to its completion opcode.
func wcOpcode(o WROpcode) WCOpcode {
	switch o {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return WCRDMAWrite
	case WRSend, WRSendWithImm, WRSendWithInv:
		return WCSend
	case WRRDMARead:
		return WCRDMARead
	case WRAtomicCmpAndSwp:
		return WCCompSwap
	case WRAtomicFetchAdd:
		return WCFetchAdd
	case WRLocalInv:
		return WCLocalInv
	case WRBindMW:
		return WCBindMW
	case WRRegMR:
		return WCRegMR
	case WRFlush:
		return WCFlush
	case WRAtomicWrite:
		return WCAtomicWrite
	}
	return WCSend
}
