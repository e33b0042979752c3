package transport

import (
	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/transport/wire"
)

// QPType is the QP transport service, numbered as libibverbs numbers
// enum ibv_qp_type (GSI, which libibverbs does not expose, as the kernel's
// IB_QPT_GSI).
type QPType uint8

const (
	QPTypeGSI QPType = 1
	QPTypeRC  QPType = 2
	QPTypeUC  QPType = 3
	QPTypeUD  QPType = 4
)

func (t QPType) String() string {
	switch t {
	case QPTypeGSI:
		return "GSI"
	case QPTypeRC:
		return "RC"
	case QPTypeUC:
		return "UC"
	case QPTypeUD:
		return "UD"
	}
	return "QPType(?)"
}

// datagram reports whether the QP type is UD-like (UD or GSI).
func (t QPType) datagram() bool { return t == QPTypeUD || t == QPTypeGSI }

// wireTransport is the opcode prefix of the QP type's packets.
func (t QPType) wireTransport() uint8 {
	switch t {
	case QPTypeRC:
		return wire.TransportRC
	case QPTypeUC:
		return wire.TransportUC
	}
	return wire.TransportUD
}

// QPState is a QP state, numbered as enum ibv_qp_state.
type QPState uint8

const (
	StateReset QPState = iota
	StateInit
	StateRTR
	StateRTS
	StateSQD
	StateSQE
	StateErr
)

var stateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s QPState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "QPState(?)"
}

// WROpcode is a send work request opcode, numbered as enum ibv_wr_opcode;
// WRRegMR, which only kernel ULPs post (IB_WR_REG_MR), gets a number of its own.
type WROpcode uint8

const (
	WRRDMAWrite        WROpcode = 0
	WRRDMAWriteWithImm WROpcode = 1
	WRSend             WROpcode = 2
	WRSendWithImm      WROpcode = 3
	WRRDMARead         WROpcode = 4
	WRAtomicCmpAndSwp  WROpcode = 5
	WRAtomicFetchAdd   WROpcode = 6
	WRLocalInv         WROpcode = 7
	WRBindMW           WROpcode = 8
	WRSendWithInv      WROpcode = 9
	WRFlush            WROpcode = 14
	WRAtomicWrite      WROpcode = 15
	WRRegMR            WROpcode = 32
)

var wrNames = map[WROpcode]string{
	WRRDMAWrite: "RDMA_WRITE", WRRDMAWriteWithImm: "RDMA_WRITE_WITH_IMM", WRSend: "SEND",
	WRSendWithImm: "SEND_WITH_IMM", WRRDMARead: "RDMA_READ", WRAtomicCmpAndSwp: "ATOMIC_CMP_AND_SWP",
	WRAtomicFetchAdd: "ATOMIC_FETCH_AND_ADD", WRLocalInv: "LOCAL_INV", WRBindMW: "BIND_MW",
	WRSendWithInv: "SEND_WITH_INV", WRFlush: "FLUSH", WRAtomicWrite: "ATOMIC_WRITE", WRRegMR: "REG_MR",
}

func (o WROpcode) String() string {
	if s, ok := wrNames[o]; ok {
		return s
	}
	return "WROpcode(?)"
}

// OpcodeAllowed reports whether a QP of type t accepts work requests of
// opcode o, as kernel rxe's post_send does (rxe_opcode.c's wr_opcode_info
// masks): RC every opcode, UC no READ, atomics or FLUSH, UD and GSI only
// SEND and SEND with immediate. It is the one definition the engine, the
// daemon's ring decoder and the client SDK share.
func OpcodeAllowed(t QPType, o WROpcode) bool {
	switch t {
	case QPTypeRC:
		switch o {
		case WRRDMAWrite, WRRDMAWriteWithImm, WRSend, WRSendWithImm, WRRDMARead, WRAtomicCmpAndSwp,
			WRAtomicFetchAdd, WRLocalInv, WRBindMW, WRSendWithInv, WRRegMR, WRFlush, WRAtomicWrite:
			return true
		}
	case QPTypeUC:
		switch o {
		case WRRDMAWrite, WRRDMAWriteWithImm, WRSend, WRSendWithImm, WRLocalInv, WRBindMW, WRRegMR:
			return true
		}
	case QPTypeUD, QPTypeGSI:
		return o == WRSend || o == WRSendWithImm
	}
	return false
}

// local reports whether the opcode is executed by the send queue itself
// without going on the wire.
func (o WROpcode) local() bool { return o == WRLocalInv || o == WRRegMR || o == WRBindMW }

// rdAtomic reports whether the opcode takes an initiator-depth credit
// (max_rd_atomic): the responder answers it from a saved resource.
func (o WROpcode) rdAtomic() bool {
	switch o {
	case WRRDMARead, WRAtomicCmpAndSwp, WRAtomicFetchAdd, WRAtomicWrite, WRFlush:
		return true
	}
	return false
}

// SendFlags are enum ibv_send_flags.
type SendFlags uint32

const (
	SendFence     SendFlags = 1
	SendSignaled  SendFlags = 2
	SendSolicited SendFlags = 4
	SendInline    SendFlags = 8
)

// SGE is one scatter/gather element (struct ibv_sge): Length bytes at
// Addr in the MR named by LKey.
type SGE struct {
	Addr   uint64 // addr: the first byte, in the MR's address space (its IOVA)
	Length uint32 // length: bytes
	LKey   uint32 // lkey: the local key of the MR the bytes lie in
}

// AddressVector is where a packet goes and how: the destination GID and the
// GRH fields, as struct ibv_ah_attr and its grh for RoCE (the QP
// attribute QPAttr.AV, an AH's attributes).
type AddressVector struct {
	DGID         [16]byte // grh.dgid: the destination GID (an IPv6 or IPv4-mapped address)
	SGID         [16]byte // the source GID, filled from SGIDIndex by the device
	SGIDIndex    uint8    // grh.sgid_index: the source GID's index in the port's GID table
	HopLimit     uint8    // grh.hop_limit: the IPv6 hop limit or IPv4 TTL
	TrafficClass uint8    // grh.traffic_class: the IPv6 traffic class or IPv4 TOS
	FlowLabel    uint32   // grh.flow_label: the IPv6 flow label (20 bits)
	SL           uint8    // sl: the service level (no wire field in RoCEv2)
	Port         uint8    // port_num: the device's port (1)
}

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

// WCStatus is a completion status, numbered as enum ibv_wc_status.
type WCStatus uint8

const (
	WCSuccess WCStatus = iota
	WCLocLenErr
	WCLocQPOpErr
	WCLocEECOpErr
	WCLocProtErr
	WCWRFlushErr
	WCMWBindErr
	WCBadRespErr
	WCLocAccessErr
	WCRemInvReqErr
	WCRemAccessErr
	WCRemOpErr
	WCRetryExcErr
	WCRNRRetryExcErr
	WCLocRDDViolErr
	WCRemInvRDReqErr
	WCRemAbortErr
	WCInvEECNErr
	WCInvEECStateErr
	WCFatalErr
	WCRespTimeoutErr
	WCGeneralErr
)

var statusNames = [...]string{"SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR",
	"WR_FLUSH_ERR", "MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR", "REM_INV_REQ_ERR", "REM_ACCESS_ERR",
	"REM_OP_ERR", "RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR", "REM_INV_RD_REQ_ERR",
	"REM_ABORT_ERR", "INV_EECN_ERR", "INV_EEC_STATE_ERR", "FATAL_ERR", "RESP_TIMEOUT_ERR", "GENERAL_ERR"}

func (s WCStatus) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "WCStatus(?)"
}

// WCOpcode is a completion opcode, numbered as enum ibv_wc_opcode; REG_MR
// gets a number of its own.
type WCOpcode uint8

const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCBindMW          WCOpcode = 5
	WCLocalInv        WCOpcode = 6
	WCFlush           WCOpcode = 8
	WCAtomicWrite     WCOpcode = 9
	WCRegMR           WCOpcode = 10
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

// WCFlags are enum ibv_wc_flags.
type WCFlags uint32

const (
	WCWithGRH WCFlags = 1
	WCWithImm WCFlags = 2
	WCWithInv WCFlags = 8
)

// WC is a work completion (struct ibv_wc): one per signaled or failed send WR, per
// receive WR consumed, and per WR flushed in the error state.
type WC struct {
	WRID   uint64   // wr_id: the ID of the WR that completed
	Status WCStatus // status: WCSuccess or why the WR failed
	Opcode WCOpcode // opcode: what completed (WCSend … for send WRs, WCRecv… for receives)
	Flags  WCFlags  // wc_flags: WCWithGRH, WCWithImm, WCWithInv
	// ByteLen is byte_len: the bytes the WR moved; for a UD receive the
	// message plus the 40-byte GRH ahead of it, as ibverbs counts.
	ByteLen uint32
	// ImmData is the immediate data (WCWithImm, network order as on the
	// wire) or the invalidated rkey (WCWithInv).
	ImmData   uint32
	QPN       uint32 // qp_num: the local QP the WR was posted to
	SrcQP     uint32 // src_qp: the sending QP (UD receives)
	PKeyIndex uint16 // pkey_index: 0, the port's one P_Key
	VendorErr uint32 // vendor_err: 0, vrnicd has no vendor syndromes
	// Solicited: the message asked for a solicited event (BTH SE), which
	// ibv_req_notify_cq(solicited_only) waits for.
	Solicited bool
}

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
