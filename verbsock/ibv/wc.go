package ibv

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
