package ibv

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

// QPState is a QP state, numbered as enum ibv_qp_state.
type QPState uint8

const (
	QPStateReset QPState = iota
	QPStateInit
	QPStateRTR
	QPStateRTS
	QPStateSQD
	QPStateSQE
	QPStateErr
)

var stateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s QPState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "QPState(?)"
}

// AttrMask selects the QP attributes a modify sets, numbered as enum
// ibv_qp_attr_mask: one QPAttr* bit a QPAttr field.
type AttrMask uint32

const (
	QPAttrState            AttrMask = 1 << 0
	QPAttrCurState         AttrMask = 1 << 1
	QPAttrEnSQDAsyncNotify AttrMask = 1 << 2
	QPAttrAccessFlags      AttrMask = 1 << 3
	QPAttrPKeyIndex        AttrMask = 1 << 4
	QPAttrPort             AttrMask = 1 << 5
	QPAttrQKey             AttrMask = 1 << 6
	QPAttrAV               AttrMask = 1 << 7
	QPAttrPathMTU          AttrMask = 1 << 8
	QPAttrTimeout          AttrMask = 1 << 9
	QPAttrRetryCnt         AttrMask = 1 << 10
	QPAttrRNRRetry         AttrMask = 1 << 11
	QPAttrRQPSN            AttrMask = 1 << 12
	QPAttrMaxQPRdAtomic    AttrMask = 1 << 13
	QPAttrAltPath          AttrMask = 1 << 14
	QPAttrMinRNRTimer      AttrMask = 1 << 15
	QPAttrSQPSN            AttrMask = 1 << 16
	QPAttrMaxDestRdAtomic  AttrMask = 1 << 17
	QPAttrPathMigState     AttrMask = 1 << 18
	QPAttrCap              AttrMask = 1 << 19
	QPAttrDestQPN          AttrMask = 1 << 20
)

// MTU is an IB path MTU, numbered as enum ibv_mtu (1 = 256 … 5 = 4096).
type MTU uint8

const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes is the MTU in bytes, 0 if the value is not a valid MTU.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// QPAttr holds the modifiable QP attributes (struct ibv_qp_attr): a
// modify sets the fields its AttrMask names, a query reports them all.
type QPAttr struct {
	State    QPState // qp_state: the state to move to (QPAttrState)
	CurState QPState // cur_qp_state: the state the caller believes the QP is in (QPAttrCurState)
	PathMTU  MTU     // path_mtu: the largest payload of a packet, MTU256 … MTU4096 (RC, UC)
	QKey     uint32  // qkey: the Q_Key of UD sends and the one receives must carry (UD)
	RQPSN    uint32  // rq_psn: the PSN expected of the first request received (RTR)
	SQPSN    uint32  // sq_psn: the PSN of the first request sent (RTS)
	DestQPN  uint32  // dest_qp_num: the remote QP (RC, UC)
	// AccessFlags is qp_access_flags: the remote operations the responder
	// allows (AccessRemoteWrite, AccessRemoteRead, AccessRemoteAtomic).
	AccessFlags Access
	AV          AHAttr // ah_attr: the primary path, where packets go (RC, UC)
	PKeyIndex   uint16 // pkey_index: index in the port's P_Key table
	Port        uint8  // port_num: the device's port (1)
	// MaxRdAtomic is max_rd_atomic: RDMA READs and atomics the QP may have
	// outstanding as the requester.
	MaxRdAtomic uint8
	// MaxDestRdAtomic is max_dest_rd_atomic: those it answers at once as
	// the responder (the resources it keeps for duplicates).
	MaxDestRdAtomic uint8
	MinRNRTimer     uint8 // min_rnr_timer: the 5-bit delay code of the RNR NAKs it sends (IBA table 45)
	Timeout         uint8 // timeout: Local ACK Timeout, 4.096 µs × 2^Timeout; 0 waits forever
	RetryCnt        uint8 // retry_cnt: retransmissions after a timeout or sequence NAK before WCRetryExcErr (0-7)
	RNRRetry        uint8 // rnr_retry: retries after an RNR NAK before WCRNRRetryExcErr (0-7; 7 = infinite)
	SQDrainNotify   bool  // en_sqd_async_notify: an SQ-drained event when SQD has drained (QPAttrEnSQDAsyncNotify)
}

// QPCap are the queue sizes fixed at create time (struct ibv_qp_cap): what
// the consumer asks for, and on return what the QP has.
type QPCap struct {
	MaxSendWR     uint32 // max_send_wr: send WRs outstanding (posted and not completed)
	MaxRecvWR     uint32 // max_recv_wr: receive WRs outstanding (none with an SRQ)
	MaxSendSGE    uint32 // max_send_sge: SGEs in one send WR
	MaxRecvSGE    uint32 // max_recv_sge: SGEs in one receive WR
	MaxInlineData uint32 // max_inline_data: bytes a SendInline WR may carry
}

// AHAttr is an address vector: where a packet goes and how, the
// destination GID and the GRH fields, as struct ibv_ah_attr and its grh
// for RoCE (the QP attribute QPAttr.AV, an AH's attributes).
type AHAttr struct {
	DGID         [16]byte // grh.dgid: the destination GID (an IPv6 or IPv4-mapped address)
	SGID         [16]byte // the source GID, filled from SGIDIndex by the device
	SGIDIndex    uint8    // grh.sgid_index: the source GID's index in the port's GID table
	HopLimit     uint8    // grh.hop_limit: the IPv6 hop limit or IPv4 TTL
	TrafficClass uint8    // grh.traffic_class: the IPv6 traffic class or IPv4 TOS
	FlowLabel    uint32   // grh.flow_label: the IPv6 flow label (20 bits)
	SL           uint8    // sl: the service level (no wire field in RoCEv2)
	Port         uint8    // port_num: the device's port (1)
}
