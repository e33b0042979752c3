package verbs

import (
	"fmt"
	"net/netip"
	"syscall"

	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/ibv"
)

// The client-visible vocabulary (attributes, work requests' parts,
// completions, opcodes, access flags, states), with the ibverbs names and
// numbers, is defined in package verbsock/ibv (verbsock for events and
// ports): one definition, a leaf of no engine package, that the engine
// (which aliases it), the daemon's rings and server and this SDK share.
// Each alias below says what its fields mean, so that go doc on this
// package is enough to use it.

// QPType is enum ibv_qp_type: QPTypeRC (reliable connected), QPTypeUC
// (unreliable connected) or QPTypeUD (unreliable datagram).
type QPType = ibv.QPType

// QPState is enum ibv_qp_state, QPStateReset … QPStateErr: RESET, INIT,
// RTR (ready to receive), RTS (ready to send), SQD (send queue drained),
// SQE (send queue error), ERR.
type QPState = ibv.QPState

// MTU is enum ibv_mtu, the path MTU: MTU256, MTU512, MTU1024, MTU2048,
// MTU4096 (1 … 5); its Bytes method gives the size.
type MTU = ibv.MTU

// AttrMask is enum ibv_qp_attr_mask: the QPAttr fields a ModifyQP sets,
// one QPAttr* bit each (QPAttrState for State, QPAttrAV for AV, …).
type AttrMask = ibv.AttrMask

// QPAttr is struct ibv_qp_attr: the attributes ModifyQP sets (those its
// AttrMask names) and QueryQP reports.
//
//   - State: the state to move to; CurState: the state the caller believes
//     the QP is in (checked when QPAttrCurState is set).
//   - PathMTU: the largest payload of one packet (RC, UC).
//   - QKey: the Q_Key of UD sends and the one UD receives must carry.
//   - RQPSN: the PSN expected of the first request received (to RTR);
//     SQPSN: the PSN of the first request sent (to RTS).
//   - DestQPN: the remote QP (RC, UC).
//   - AccessFlags: the remote operations the responder allows
//     (AccessRemoteWrite, AccessRemoteRead, AccessRemoteAtomic).
//   - AV: the primary path (an AHAttr): the destination GID and GRH fields.
//   - PKeyIndex: index in the port's P_Key table (0); Port: the port (1).
//   - MaxRdAtomic: RDMA READs and atomics outstanding as the requester;
//     MaxDestRdAtomic: those answered at once as the responder.
//   - MinRNRTimer: the 5-bit delay code of the RNR NAKs the QP sends
//     (IBA table 45).
//   - Timeout: the Local ACK Timeout, 4.096 µs × 2^Timeout; 0 waits forever.
//   - RetryCnt: retransmissions after a timeout or sequence NAK before
//     WCRetryExcErr (0-7); RNRRetry: retries after an RNR NAK before
//     WCRNRRetryExcErr (0-7, 7 = infinite).
//   - SQDrainNotify: post EventSQDrained when SQD has drained
//     (QPAttrEnSQDAsyncNotify).
type QPAttr = ibv.QPAttr

// QPCap is struct ibv_qp_cap, the queue sizes fixed at create time: what
// QPInitAttr asks for, and what the QP has.
//
//   - MaxSendWR, MaxRecvWR: send and receive WRs outstanding (posted, not
//     completed); no receive WRs with an SRQ.
//   - MaxSendSGE, MaxRecvSGE: SGEs in one send or receive WR.
//   - MaxInlineData: the bytes a SendInline WR may carry.
type QPCap = ibv.QPCap

// AHAttr is struct ibv_ah_attr with its grh, as RoCE uses it: where
// packets go and how (CreateAH's argument, QPAttr.AV).
//
//   - DGID: the destination GID (an IPv6 or IPv4-mapped address, see
//     GIDFromAddr).
//   - SGIDIndex: the source GID's index in the port's GID table; SGID: that
//     GID, filled in by the device.
//   - HopLimit: the IPv6 hop limit or IPv4 TTL; TrafficClass: the IPv6
//     traffic class or IPv4 TOS; FlowLabel: the IPv6 flow label (20 bits).
//   - SL: the service level (RoCEv2 has no wire field for it); Port: the
//     port (1).
type AHAttr = ibv.AHAttr

// WC is struct ibv_wc, a work completion: one per signaled or failed send
// WR, per receive WR consumed, and per WR flushed in the error state.
//
//   - WRID: the ID of the WR that completed.
//   - Status: WCSuccess or why the WR failed (a WCStatus).
//   - Opcode: what completed (a WCOpcode: WCSend … for send WRs, WCRecv and
//     WCRecvRDMAWithImm for receives).
//   - Flags: WCWithGRH, WCWithImm, WCWithInv.
//   - ByteLen: the bytes the WR moved; for a UD receive the message plus the
//     40-byte GRH ahead of it, as ibverbs counts.
//   - ImmData: the immediate data (WCWithImm, network order as on the
//     wire) or the invalidated rkey (WCWithInv).
//   - QPN: the local QP the WR was posted to; SrcQP: the sending QP (UD).
//   - PKeyIndex: 0, the port's one P_Key; VendorErr: 0, vrnicd has no
//     vendor syndromes.
//   - Solicited: the message asked for a solicited event (BTH SE), which
//     a solicited-only notification waits for.
type WC = ibv.WC

// WCStatus is enum ibv_wc_status: WCSuccess, or WCLocLenErr … WCGeneralErr
// (String gives ibverbs' name, e.g. "RETRY_EXC_ERR").
type WCStatus = ibv.WCStatus

// WCOpcode is enum ibv_wc_opcode: WCSend, WCRDMAWrite, WCRDMARead,
// WCCompSwap, WCFetchAdd, WCBindMW, WCLocalInv, WCFlush, WCAtomicWrite,
// WCRegMR for send WRs; WCRecv and WCRecvRDMAWithImm for receives.
type WCOpcode = ibv.WCOpcode

// WCFlags is enum ibv_wc_flags: WCWithGRH (a UD receive: ByteLen counts a
// GRH), WCWithImm (ImmData holds immediate data), WCWithInv (ImmData holds
// the rkey the SEND invalidated).
type WCFlags = ibv.WCFlags

// WROpcode is enum ibv_wr_opcode, a SendWR's Opcode: WRSend,
// WRSendWithImm, WRSendWithInv, WRRDMAWrite, WRRDMAWriteWithImm,
// WRRDMARead, WRAtomicCmpAndSwp, WRAtomicFetchAdd, WRAtomicWrite, WRFlush,
// WRLocalInv, WRBindMW, WRRegMR. RC takes them all; UC no READ, atomics or
// FLUSH; UD only the SENDs (ibv.OpcodeAllowed).
type WROpcode = ibv.WROpcode

// SendFlags is enum ibv_send_flags, a SendWR's Flags: SendFence (wait for
// earlier READs and atomics), SendSignaled (complete with a WC even without
// SQSigAll), SendSolicited (ask the receiver for a solicited event),
// SendInline (the data travels in the WR).
type SendFlags = ibv.SendFlags

// SGE is struct ibv_sge, one scatter/gather element: Length bytes at Addr
// (in the MR's address space, its IOVA) in the MR whose local key is LKey.
type SGE = ibv.SGE

// Access is enum ibv_access_flags, an MR's, MW's or QP's rights:
// AccessLocalWrite, AccessRemoteWrite, AccessRemoteRead,
// AccessRemoteAtomic, AccessMWBind, AccessZeroBased.
type Access = ibv.Access

// MWType is enum ibv_mw_type: MWType1 or MWType2B.
type MWType = ibv.MWType

// EventType is enum ibv_event_type, an AsyncEvent's type: EventCQErr …
// EventGIDChange, and EventLost when events were dropped because the
// client did not read them.
type EventType = verbsock.EventType

// PortAttr is struct ibv_port_attr (the fields vrnicd has): State
// (PortDown or PortActive), MaxMTU and ActiveMTU (MTU values), GIDTblLen,
// PortCapFlags, PKeyTblLen, LinkLayer (2, Ethernet), PhysState (5, link
// up) and MaxMsgSize (bytes).
type PortAttr = verbsock.PortAttr

// Limits are the daemon's quotas for this connection: MaxPD, MaxCQ, MaxQP,
// MaxSRQ, MaxMR, MaxMW and MaxAH objects and MaxMem mapped memfds at once,
// MaxMemBytes bytes of memfds mapped (rings and buffers), MaxMRBytes
// bytes registered in MRs and MaxMcast multicast memberships (QP
// attachments and rdma_cm joins).
type Limits = verbsock.Limits

// Error is a failed verb: errors.Is(err, syscall.EINVAL) and the like
// match its errno.
type Error = verbsock.Error

// The values of the vocabulary above, with the ibverbs numbers: QP types
// and states, MTUs, AttrMask bits, WR opcodes, send flags, WC statuses,
// opcodes and flags, access flags, MW types, async event types.
const (
	// QPType: IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD.
	QPTypeRC = ibv.QPTypeRC
	QPTypeUC = ibv.QPTypeUC
	QPTypeUD = ibv.QPTypeUD

	// QPState: IBV_QPS_RESET … IBV_QPS_ERR.
	QPStateReset = ibv.QPStateReset
	QPStateInit  = ibv.QPStateInit
	QPStateRTR   = ibv.QPStateRTR
	QPStateRTS   = ibv.QPStateRTS
	QPStateSQD   = ibv.QPStateSQD
	QPStateSQE   = ibv.QPStateSQE
	QPStateErr   = ibv.QPStateErr

	// MTU: IBV_MTU_256 … IBV_MTU_4096.
	MTU256  = ibv.MTU256
	MTU512  = ibv.MTU512
	MTU1024 = ibv.MTU1024
	MTU2048 = ibv.MTU2048
	MTU4096 = ibv.MTU4096

	// AttrMask: IBV_QP_STATE … IBV_QP_DEST_QPN, one a QPAttr field.
	QPAttrState            = ibv.QPAttrState
	QPAttrCurState         = ibv.QPAttrCurState
	QPAttrEnSQDAsyncNotify = ibv.QPAttrEnSQDAsyncNotify
	QPAttrAccessFlags      = ibv.QPAttrAccessFlags
	QPAttrPKeyIndex        = ibv.QPAttrPKeyIndex
	QPAttrPort             = ibv.QPAttrPort
	QPAttrQKey             = ibv.QPAttrQKey
	QPAttrAV               = ibv.QPAttrAV
	QPAttrPathMTU          = ibv.QPAttrPathMTU
	QPAttrTimeout          = ibv.QPAttrTimeout
	QPAttrRetryCnt         = ibv.QPAttrRetryCnt
	QPAttrRNRRetry         = ibv.QPAttrRNRRetry
	QPAttrRQPSN            = ibv.QPAttrRQPSN
	QPAttrMaxQPRdAtomic    = ibv.QPAttrMaxQPRdAtomic
	QPAttrAltPath          = ibv.QPAttrAltPath
	QPAttrMinRNRTimer      = ibv.QPAttrMinRNRTimer
	QPAttrSQPSN            = ibv.QPAttrSQPSN
	QPAttrMaxDestRdAtomic  = ibv.QPAttrMaxDestRdAtomic
	QPAttrPathMigState     = ibv.QPAttrPathMigState
	QPAttrCap              = ibv.QPAttrCap
	QPAttrDestQPN          = ibv.QPAttrDestQPN

	// WROpcode: IBV_WR_*.
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

	// SendFlags: IBV_SEND_FENCE, _SIGNALED, _SOLICITED, _INLINE.
	SendFence     = ibv.SendFence
	SendSignaled  = ibv.SendSignaled
	SendSolicited = ibv.SendSolicited
	SendInline    = ibv.SendInline

	// WCStatus: IBV_WC_SUCCESS and the errors.
	WCSuccess        = ibv.WCSuccess
	WCLocLenErr      = ibv.WCLocLenErr
	WCLocQPOpErr     = ibv.WCLocQPOpErr
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
	WCRemAbortErr    = ibv.WCRemAbortErr
	WCFatalErr       = ibv.WCFatalErr
	WCRespTimeoutErr = ibv.WCRespTimeoutErr
	WCGeneralErr     = ibv.WCGeneralErr

	// WCOpcode: IBV_WC_SEND … IBV_WC_RECV_RDMA_WITH_IMM.
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

	// WCFlags: IBV_WC_GRH, IBV_WC_WITH_IMM, IBV_WC_WITH_INV.
	WCWithGRH = ibv.WCWithGRH
	WCWithImm = ibv.WCWithImm
	WCWithInv = ibv.WCWithInv

	// Access: IBV_ACCESS_LOCAL_WRITE … IBV_ACCESS_ZERO_BASED.
	AccessLocalWrite   = ibv.AccessLocalWrite
	AccessRemoteWrite  = ibv.AccessRemoteWrite
	AccessRemoteRead   = ibv.AccessRemoteRead
	AccessRemoteAtomic = ibv.AccessRemoteAtomic
	AccessMWBind       = ibv.AccessMWBind
	AccessZeroBased    = ibv.AccessZeroBased

	// MWType: IBV_MW_TYPE_1, IBV_MW_TYPE_2 (type 2B).
	MWType1  = ibv.MWType1
	MWType2B = ibv.MWType2B

	// EventType: IBV_EVENT_*, and EventLost (vrnicd's own).
	EventCQErr       = verbsock.EventCQErr
	EventQPFatal     = verbsock.EventQPFatal
	EventQPReqErr    = verbsock.EventQPReqErr
	EventQPAccessErr = verbsock.EventQPAccessErr
	EventCommEst     = verbsock.EventCommEst
	EventSQDrained   = verbsock.EventSQDrained
	EventDeviceFatal = verbsock.EventDeviceFatal
	EventPortActive  = verbsock.EventPortActive
	EventPortErr     = verbsock.EventPortErr
	EventSRQErr      = verbsock.EventSRQErr
	EventSRQLimit    = verbsock.EventSRQLimit
	EventQPLastWQE   = verbsock.EventQPLastWQE
	EventGIDChange   = verbsock.EventGIDChange
	EventLost        = verbsock.EventLost
)

// Port states (enum ibv_port_state).
const (
	PortDown   = 1
	PortActive = 4
)

// DeviceAttr is ibv_device_attr.
type DeviceAttr struct {
	FWVer                                       string
	NodeGUID, SysImageGUID                      uint64
	MaxMRSize, PageSizeCap, MaxMsgSize          uint64
	VendorID, VendorPartID, HWVer               uint32
	MaxQP, MaxQPWR, DeviceCapFlags              uint32
	MaxSGE, MaxSGERd, MaxCQ, MaxCQE, MaxMR      uint32
	MaxPD, MaxQPRdAtom, MaxQPInitRdAtom         uint32
	MaxResRdAtom, AtomicCap, MaxMW, MaxAH       uint32
	MaxSRQ, MaxSRQWR, MaxSRQSGE, MaxPKeys       uint32
	LocalCAAckDelay, PhysPortCnt, MaxInlineData uint32
	MaxFastRegPageListLen                       uint32
	MaxMcastGrp, MaxMcastQPAttach               uint32
	MaxTotalMcastQPAttach                       uint32
}

func deviceAttr(w *verbsock.DeviceAttr) DeviceAttr {
	return DeviceAttr{
		FWVer: verbsock.CString(w.FWVer[:]), NodeGUID: w.NodeGUID, SysImageGUID: w.SysImageGUID, MaxMRSize: w.MaxMRSize,
		PageSizeCap: w.PageSizeCap, MaxMsgSize: w.MaxMsgSize, VendorID: w.VendorID, VendorPartID: w.VendorPartID,
		HWVer: w.HWVer, MaxQP: w.MaxQP, MaxQPWR: w.MaxQPWR, DeviceCapFlags: w.DeviceCapFlags, MaxSGE: w.MaxSGE,
		MaxSGERd: w.MaxSGERd, MaxCQ: w.MaxCQ, MaxCQE: w.MaxCQE, MaxMR: w.MaxMR, MaxPD: w.MaxPD,
		MaxQPRdAtom: w.MaxQPRdAtom, MaxQPInitRdAtom: w.MaxQPInitRdAtom, MaxResRdAtom: w.MaxResRdAtom,
		AtomicCap: w.AtomicCap, MaxMW: w.MaxMW, MaxAH: w.MaxAH, MaxSRQ: w.MaxSRQ, MaxSRQWR: w.MaxSRQWR,
		MaxSRQSGE: w.MaxSRQSGE, MaxPKeys: w.MaxPKeys, LocalCAAckDelay: w.LocalCAAckDelay, PhysPortCnt: w.PhysPortCnt,
		MaxInlineData: w.MaxInlineData, MaxFastRegPageListLen: w.MaxFastRegPageListLen,
		MaxMcastGrp: w.MaxMcastGrp, MaxMcastQPAttach: w.MaxMcastQPAttach, MaxTotalMcastQPAttach: w.MaxTotalMcastQPAttach,
	}
}

// GID is a port GID: for RoCEv2 an IPv6 address or an IPv4-mapped one.
type GID [16]byte

// Addr is the GID as an IP address (IPv4 unmapped).
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

func (g GID) String() string { return g.Addr().String() }

// IsZero reports an empty GID table slot.
func (g GID) IsZero() bool { return g == GID{} }

// GIDFromAddr is the GID of an IP address.
func GIDFromAddr(a netip.Addr) GID { return GID(netip.AddrFrom16(a.As16()).As16()) }

// verr is an error found on the client side, in the same form as the
// daemon's.
func verr(op verbsock.Op, errno syscall.Errno, format string, args ...any) error {
	return &verbsock.Error{Op: op, Errno: errno, Msg: fmt.Sprintf(format, args...)}
}
