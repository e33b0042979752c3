package verbs

import (
	"fmt"
	"net/netip"
	"syscall"

	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/verbsock"
)

// The attribute, status and opcode types are the engine's own, with the
// ibverbs names and numbers.
type (
	QPType    = transport.QPType   // enum ibv_qp_type
	QPState   = transport.QPState  // enum ibv_qp_state
	MTU       = transport.MTU      // enum ibv_mtu
	AttrMask  = transport.AttrMask // enum ibv_qp_attr_mask
	QPAttr    = transport.QPAttr   // struct ibv_qp_attr
	QPCap     = transport.QPCap    // struct ibv_qp_cap
	AHAttr    = transport.AddressVector
	WC        = transport.WC        // struct ibv_wc
	WCStatus  = transport.WCStatus  // enum ibv_wc_status
	WCOpcode  = transport.WCOpcode  // enum ibv_wc_opcode
	WCFlags   = transport.WCFlags   // enum ibv_wc_flags
	WROpcode  = transport.WROpcode  // enum ibv_wr_opcode
	SendFlags = transport.SendFlags // enum ibv_send_flags
	SGE       = transport.SGE       // struct ibv_sge
	Access    = mem.Access          // enum ibv_access_flags
	MWType    = mem.MWType          // enum ibv_mw_type
	EventType = verbsock.EventType  // enum ibv_event_type
	PortAttr  = verbsock.PortAttr   // struct ibv_port_attr
	Limits    = verbsock.Limits     // the daemon's quotas for this connection
	// Error is a failed verb: errors.Is(err, syscall.EINVAL) and the like
	// match its errno.
	Error = verbsock.Error
)

const (
	QPTypeRC = transport.QPTypeRC
	QPTypeUC = transport.QPTypeUC
	QPTypeUD = transport.QPTypeUD

	QPStateReset = transport.StateReset
	QPStateInit  = transport.StateInit
	QPStateRTR   = transport.StateRTR
	QPStateRTS   = transport.StateRTS
	QPStateSQD   = transport.StateSQD
	QPStateSQE   = transport.StateSQE
	QPStateErr   = transport.StateErr

	MTU256  = transport.MTU256
	MTU512  = transport.MTU512
	MTU1024 = transport.MTU1024
	MTU2048 = transport.MTU2048
	MTU4096 = transport.MTU4096

	QPAttrState            = transport.AttrState
	QPAttrCurState         = transport.AttrCurState
	QPAttrEnSQDAsyncNotify = transport.AttrEnSQDAsyncNotify
	QPAttrAccessFlags      = transport.AttrAccessFlags
	QPAttrPKeyIndex        = transport.AttrPKeyIndex
	QPAttrPort             = transport.AttrPort
	QPAttrQKey             = transport.AttrQKey
	QPAttrAV               = transport.AttrAV
	QPAttrPathMTU          = transport.AttrPathMTU
	QPAttrTimeout          = transport.AttrTimeout
	QPAttrRetryCnt         = transport.AttrRetryCnt
	QPAttrRNRRetry         = transport.AttrRNRRetry
	QPAttrRQPSN            = transport.AttrRQPSN
	QPAttrMaxQPRdAtomic    = transport.AttrMaxQPRdAtomic
	QPAttrAltPath          = transport.AttrAltPath
	QPAttrMinRNRTimer      = transport.AttrMinRNRTimer
	QPAttrSQPSN            = transport.AttrSQPSN
	QPAttrMaxDestRdAtomic  = transport.AttrMaxDestRdAtomic
	QPAttrPathMigState     = transport.AttrPathMigState
	QPAttrCap              = transport.AttrCap
	QPAttrDestQPN          = transport.AttrDestQPN

	WRRDMAWrite        = transport.WRRDMAWrite
	WRRDMAWriteWithImm = transport.WRRDMAWriteWithImm
	WRSend             = transport.WRSend
	WRSendWithImm      = transport.WRSendWithImm
	WRRDMARead         = transport.WRRDMARead
	WRAtomicCmpAndSwp  = transport.WRAtomicCmpAndSwp
	WRAtomicFetchAdd   = transport.WRAtomicFetchAdd
	WRLocalInv         = transport.WRLocalInv
	WRBindMW           = transport.WRBindMW
	WRSendWithInv      = transport.WRSendWithInv
	WRFlush            = transport.WRFlush
	WRAtomicWrite      = transport.WRAtomicWrite
	WRRegMR            = transport.WRRegMR

	SendFence     = transport.SendFence
	SendSignaled  = transport.SendSignaled
	SendSolicited = transport.SendSolicited
	SendInline    = transport.SendInline

	WCSuccess        = transport.WCSuccess
	WCLocLenErr      = transport.WCLocLenErr
	WCLocQPOpErr     = transport.WCLocQPOpErr
	WCLocProtErr     = transport.WCLocProtErr
	WCWRFlushErr     = transport.WCWRFlushErr
	WCMWBindErr      = transport.WCMWBindErr
	WCBadRespErr     = transport.WCBadRespErr
	WCLocAccessErr   = transport.WCLocAccessErr
	WCRemInvReqErr   = transport.WCRemInvReqErr
	WCRemAccessErr   = transport.WCRemAccessErr
	WCRemOpErr       = transport.WCRemOpErr
	WCRetryExcErr    = transport.WCRetryExcErr
	WCRNRRetryExcErr = transport.WCRNRRetryExcErr
	WCRemAbortErr    = transport.WCRemAbortErr
	WCFatalErr       = transport.WCFatalErr
	WCRespTimeoutErr = transport.WCRespTimeoutErr
	WCGeneralErr     = transport.WCGeneralErr

	WCSend            = transport.WCSend
	WCRDMAWrite       = transport.WCRDMAWrite
	WCRDMARead        = transport.WCRDMARead
	WCCompSwap        = transport.WCCompSwap
	WCFetchAdd        = transport.WCFetchAdd
	WCBindMW          = transport.WCBindMW
	WCLocalInv        = transport.WCLocalInv
	WCFlush           = transport.WCFlush
	WCAtomicWrite     = transport.WCAtomicWrite
	WCRegMR           = transport.WCRegMR
	WCRecv            = transport.WCRecv
	WCRecvRDMAWithImm = transport.WCRecvRDMAWithImm

	WCWithGRH = transport.WCWithGRH
	WCWithImm = transport.WCWithImm
	WCWithInv = transport.WCWithInv

	AccessLocalWrite   = mem.LocalWrite
	AccessRemoteWrite  = mem.RemoteWrite
	AccessRemoteRead   = mem.RemoteRead
	AccessRemoteAtomic = mem.RemoteAtomic
	AccessMWBind       = mem.MWBind
	AccessZeroBased    = mem.ZeroBased

	MWType1  = mem.MWType1
	MWType2B = mem.MWType2B

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
