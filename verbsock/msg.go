package verbsock

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"syscall"
)

// Every payload is one fixed-size little-endian struct, encoded field by
// field with no padding (encoding/binary rules). A request whose payload is
// not exactly its struct's size is EINVAL.

// Empty is the payload of requests and replies that carry nothing.
type Empty struct{}

// Limits are the per-connection quotas the daemon enforces.
type Limits struct {
	MaxPD, MaxCQ, MaxQP, MaxSRQ, MaxMR, MaxMW, MaxAH, MaxMem uint32
	MaxMemBytes                                              uint64 // bytes of memfds mapped (rings and buffers)
	MaxMRBytes                                               uint64 // bytes registered in MRs
	// MaxMcast bounds multicast memberships: QP attachments (attach_mcast)
	// and rdma_cm joins (cm_join).
	MaxMcast uint32
	_        uint32
}

type HelloReq struct {
	Magic      uint32
	MinVersion uint16
	MaxVersion uint16
	Reserved   uint32
}

type HelloResp struct {
	Version  uint16
	Reserved uint16
	PageSize uint32
	ClientID uint32
	DevName  [32]byte
	Limits   Limits
}

// DeviceAttr is ibv_device_attr (the fields vrnicd has).
type DeviceAttr struct {
	FWVer                                                      [32]byte
	NodeGUID, SysImageGUID, MaxMRSize, PageSizeCap, MaxMsgSize uint64
	VendorID, VendorPartID, HWVer                              uint32
	MaxQP, MaxQPWR, DeviceCapFlags, MaxSGE, MaxSGERd           uint32
	MaxCQ, MaxCQE, MaxMR, MaxPD                                uint32
	MaxQPRdAtom, MaxQPInitRdAtom, MaxResRdAtom, AtomicCap      uint32
	MaxMW, MaxAH, MaxSRQ, MaxSRQWR, MaxSRQSGE, MaxPKeys        uint32
	LocalCAAckDelay, PhysPortCnt, MaxInlineData                uint32
	MaxFastRegPageListLen                                      uint32
	MaxMcastGrp, MaxMcastQPAttach, MaxTotalMcastQPAttach       uint32
}

type QueryPortReq struct{ Port uint32 }

// PortAttr is ibv_port_attr (the fields vrnicd has).
type PortAttr struct {
	State, MaxMTU, ActiveMTU, GIDTblLen, PortCapFlags uint32
	PKeyTblLen, LinkLayer, PhysState                  uint32
	MaxMsgSize                                        uint64
}

type QueryGIDReq struct{ Port, Index uint32 }

type QueryGIDResp struct {
	GID  [16]byte
	Type uint32 // 0: empty slot, 2: RoCEv2
}

// HandleReq names one object of the connection (dealloc, destroy, query).
type HandleReq struct{ Handle uint32 }

type AllocPDResp struct{ PD uint32 }

// MapMemReq carries one sealed memfd (SCM_RIGHTS).
type MapMemReq struct{ Reserved uint32 }

type MapMemResp struct {
	Mem  uint32
	Size uint64
}

type RegMRReq struct {
	PD, Mem              uint32
	Offset, Length, IOVA uint64
	Access               uint32
}

type RegMRResp struct{ MR, LKey, RKey uint32 }

// MaxRegMRSegs is how many segments one reg_mr_segs carries: the most that
// fit a frame, rounded down to a power of two.
const MaxRegMRSegs = 256

// RegMRSeg is one segment of a reg_mr_segs: Pages whole pages of memory
// object Mem from byte Offset (a multiple of the page size).
type RegMRSeg struct {
	Mem    uint32
	_      uint32
	Offset uint64
	Pages  uint64
}

// RegMRSegsReq registers an MR over the pages of Segs[:NumSegs], which
// follow each other in the MR's address space (a C ibv_reg_mr over memory
// several memfds back). Its first byte is FirstOffset bytes into the first
// segment and it is Length bytes long; the segments hold exactly the pages
// those bytes touch. Slots past NumSegs are zero.
type RegMRSegsReq struct {
	PD, Access                uint32
	IOVA, Length, FirstOffset uint64
	NumSegs                   uint32
	_                         uint32
	Segs                      [MaxRegMRSegs]RegMRSeg
}

type AllocMRReq struct{ PD, MaxPages uint32 }

type AllocMWReq struct{ PD, Type uint32 }

type AllocMWResp struct{ MW, RKey uint32 }

type BindMWReq struct {
	MW, MR       uint32
	Addr, Length uint64
	Access       uint32
}

type BindMWResp struct{ RKey uint32 }

// CQ flags.
const CQWithEvents uint32 = 1

// CreateCQReq carries the CQ ring memfd.
type CreateCQReq struct{ CQE, Flags uint32 }

// CreateCQResp carries the client's end of the completion channel if
// CQWithEvents was asked.
type CreateCQResp struct{ CQ, Entries uint32 }

// ResizeCQReq carries the new ring memfd.
type ResizeCQReq struct{ CQ, CQE uint32 }

type ResizeCQResp struct{ Entries uint32 }

type ReqNotifyCQReq struct{ CQ, SolicitedOnly uint32 }

// QPCap is ibv_qp_cap.
type QPCap struct {
	MaxSendWR, MaxRecvWR, MaxSendSGE, MaxRecvSGE, MaxInlineData uint32
}

// AV is an address vector: ibv_ah_attr with its GRH.
type AV struct {
	DGID, SGID                                  [16]byte
	FlowLabel                                   uint32
	SGIDIndex, HopLimit, TrafficClass, SL, Port uint8
	Reserved                                    [3]byte
}

// QPAttr is ibv_qp_attr (the fields RoCE uses).
type QPAttr struct {
	State, CurState, PathMTU, Port                     uint8
	QKey, RQPSN, SQPSN, DestQPN, AccessFlags           uint32
	PKeyIndex                                          uint16
	MaxRdAtomic, MaxDestRdAtomic, MinRNRTimer, Timeout uint8
	RetryCnt, RNRRetry, SQDrainNotify                  uint8
	Reserved                                           [3]byte
	AV                                                 AV
}

// CreateQPReq carries the SQ ring memfd and, without an SRQ, the RQ ring
// memfd.
type CreateQPReq struct {
	PD, SendCQ, RecvCQ, SRQ uint32
	Type, SigAll            uint8
	Flags                   uint16 // CreateQP* (ibv_qp_create_flags' values)
	Cap                     QPCap
}

// CreateQPReq.Flags: the ibv_qp_create_flags vrnicd has.
const (
	CreateQPBlockSelfMcastLB = 1 << 1 // IBV_QP_CREATE_BLOCK_SELF_MCAST_LB
)

// McastReq attaches a UD QP to a multicast group or detaches it
// (ibv_attach_mcast, ibv_detach_mcast); the LID is ignored on RoCE.
type McastReq struct {
	QP       uint32
	LID      uint16
	Reserved uint16
	GID      [16]byte
}

// CreateQPResp carries the client's end of the QP's doorbell.
type CreateQPResp struct {
	QP, QPN uint32
	Cap     QPCap
}

type ModifyQPReq struct {
	QP, Mask uint32
	Attr     QPAttr
}

type QueryQPReq struct{ QP, Mask uint32 }

type QueryQPResp struct {
	Attr     QPAttr
	Cap      QPCap
	Type     uint8
	SigAll   uint8
	Reserved uint16
}

// CreateSRQReq carries the SRQ ring memfd.
type CreateSRQReq struct{ PD, MaxWR, MaxSGE, Limit uint32 }

// CreateSRQResp carries the client's end of the SRQ's doorbell.
type CreateSRQResp struct{ SRQ, SRQN, MaxWR, MaxSGE uint32 }

// ModifySRQ masks (enum ibv_srq_attr_mask).
const (
	SRQMaxWR uint32 = 1
	SRQLimit uint32 = 2
)

type ModifySRQReq struct{ SRQ, Mask, MaxWR, Limit uint32 }

type QuerySRQResp struct{ MaxWR, MaxSGE, Limit uint32 }

// ResizeSRQReq moves an SRQ to a new ring of max_wr entries (the fd);
// ResizeSRQResp says how many WQEs it carried over (§6).
type ResizeSRQReq struct{ SRQ, MaxWR uint32 }

type ResizeSRQResp struct{ MaxWR, Used uint32 }

type CreateAHReq struct {
	PD uint32
	AV AV
}

type CreateAHResp struct{ AH uint32 }

// Event types: enum ibv_event_type.
type EventType uint32

const (
	EventCQErr       EventType = 0
	EventQPFatal     EventType = 1
	EventQPReqErr    EventType = 2
	EventQPAccessErr EventType = 3
	EventCommEst     EventType = 4
	EventSQDrained   EventType = 5
	EventDeviceFatal EventType = 8
	EventPortActive  EventType = 9
	EventPortErr     EventType = 10
	EventSRQErr      EventType = 14
	EventSRQLimit    EventType = 15
	EventQPLastWQE   EventType = 16
	EventGIDChange   EventType = 18
	EventLost        EventType = 0xffff // ours: events were dropped because the client did not read them
)

var eventNames = map[EventType]string{
	EventCQErr: "CQ_ERR", EventQPFatal: "QP_FATAL", EventQPReqErr: "QP_REQ_ERR", EventQPAccessErr: "QP_ACCESS_ERR",
	EventCommEst: "COMM_EST", EventSQDrained: "SQ_DRAINED", EventDeviceFatal: "DEVICE_FATAL",
	EventPortActive: "PORT_ACTIVE", EventPortErr: "PORT_ERR", EventSRQErr: "SRQ_ERR",
	EventSRQLimit: "SRQ_LIMIT_REACHED", EventQPLastWQE: "QP_LAST_WQE_REACHED", EventGIDChange: "GID_CHANGE",
	EventLost: "EVENTS_LOST",
}

func (t EventType) String() string {
	if s, ok := eventNames[t]; ok {
		return s
	}
	return fmt.Sprintf("EventType(%d)", uint32(t))
}

// Object is what an event is about.
type Object uint8

const (
	ObjNone Object = iota
	ObjQP
	ObjCQ
	ObjSRQ
	ObjPort
)

// ObjectOf says which kind of handle an event of type t carries.
func (t EventType) ObjectOf() Object {
	switch t {
	case EventQPFatal, EventQPReqErr, EventQPAccessErr, EventCommEst, EventSQDrained, EventQPLastWQE:
		return ObjQP
	case EventCQErr:
		return ObjCQ
	case EventSRQErr, EventSRQLimit:
		return ObjSRQ
	case EventPortActive, EventPortErr, EventGIDChange:
		return ObjPort
	}
	return ObjNone
}

// EventMsg is the payload of OpEvent. Handle names the QP, CQ or SRQ in
// the receiving connection's namespace; Port the port for port events;
// Count, for EventLost, how many events were dropped.
type EventMsg struct {
	Type   EventType
	Handle uint32
	Port   uint32
	Count  uint32
}

// OpSpec describes one operation: its payload types and the descriptors
// each direction carries.
type OpSpec struct {
	Name            string
	Req, Resp       func() any
	ReqFDs, RespFDs [2]int // [min, max]
}

func spec(req, resp func() any, reqFDs, respFDs [2]int) OpSpec {
	return OpSpec{Req: req, Resp: resp, ReqFDs: reqFDs, RespFDs: respFDs}
}

func mk[T any]() func() any { return func() any { return new(T) } }

var none = [2]int{0, 0}

// Specs lists every client request; OpEvent is server-only.
var Specs = map[Op]OpSpec{
	OpHello:       spec(mk[HelloReq](), mk[HelloResp](), none, none),
	OpQueryDevice: spec(mk[Empty](), mk[DeviceAttr](), none, none),
	OpQueryPort:   spec(mk[QueryPortReq](), mk[PortAttr](), none, none),
	OpQueryGID:    spec(mk[QueryGIDReq](), mk[QueryGIDResp](), none, none),
	OpAllocPD:     spec(mk[Empty](), mk[AllocPDResp](), none, none),
	OpDeallocPD:   spec(mk[HandleReq](), mk[Empty](), none, none),
	OpMapMem:      spec(mk[MapMemReq](), mk[MapMemResp](), [2]int{1, 1}, none),
	OpUnmapMem:    spec(mk[HandleReq](), mk[Empty](), none, none),
	OpRegMR:       spec(mk[RegMRReq](), mk[RegMRResp](), none, none),
	OpRegMRSegs:   spec(mk[RegMRSegsReq](), mk[RegMRResp](), none, none),
	OpImpair:      spec(mk[ImpairReq](), mk[ImpairResp](), none, none),
	OpAttachMcast: spec(mk[McastReq](), mk[Empty](), none, none),
	OpDetachMcast: spec(mk[McastReq](), mk[Empty](), none, none),
	OpDeregMR:     spec(mk[HandleReq](), mk[Empty](), none, none),
	OpAllocMR:     spec(mk[AllocMRReq](), mk[RegMRResp](), none, none),
	OpAllocMW:     spec(mk[AllocMWReq](), mk[AllocMWResp](), none, none),
	OpDeallocMW:   spec(mk[HandleReq](), mk[Empty](), none, none),
	OpBindMW:      spec(mk[BindMWReq](), mk[BindMWResp](), none, none),
	OpCreateCQ:    spec(mk[CreateCQReq](), mk[CreateCQResp](), [2]int{1, 1}, [2]int{0, 1}),
	OpDestroyCQ:   spec(mk[HandleReq](), mk[Empty](), none, none),
	OpResizeCQ:    spec(mk[ResizeCQReq](), mk[ResizeCQResp](), [2]int{1, 1}, none),
	OpReqNotifyCQ: spec(mk[ReqNotifyCQReq](), mk[Empty](), none, none),
	OpCreateQP:    spec(mk[CreateQPReq](), mk[CreateQPResp](), [2]int{1, 2}, [2]int{1, 1}),
	OpModifyQP:    spec(mk[ModifyQPReq](), mk[Empty](), none, none),
	OpQueryQP:     spec(mk[QueryQPReq](), mk[QueryQPResp](), none, none),
	OpDestroyQP:   spec(mk[HandleReq](), mk[Empty](), none, none),
	OpCreateSRQ:   spec(mk[CreateSRQReq](), mk[CreateSRQResp](), [2]int{1, 1}, [2]int{1, 1}),
	OpModifySRQ:   spec(mk[ModifySRQReq](), mk[Empty](), none, none),
	OpQuerySRQ:    spec(mk[HandleReq](), mk[QuerySRQResp](), none, none),
	OpDestroySRQ:  spec(mk[HandleReq](), mk[Empty](), none, none),
	OpCreateAH:    spec(mk[CreateAHReq](), mk[CreateAHResp](), none, none),
	OpDestroyAH:   spec(mk[HandleReq](), mk[Empty](), none, none),
	OpQueryStats:  spec(mk[PageReq](), mk[QueryStatsResp](), none, none),
	OpListQPs:     spec(mk[PageReq](), mk[ListQPsResp](), none, none),
	OpListCM:      spec(mk[PageReq](), mk[ListCMResp](), none, none),
	OpListRes:     spec(mk[ResReq](), mk[ListResResp](), none, none),
	OpListClients: spec(mk[PageReq](), mk[ListClientsResp](), none, none),
	OpQueryDaemon: spec(mk[Empty](), mk[DaemonInfo](), none, none),
	OpResizeSRQ:   spec(mk[ResizeSRQReq](), mk[ResizeSRQResp](), [2]int{1, 1}, none),
	OpCapture:     spec(mk[CaptureReq](), mk[CaptureResp](), none, [2]int{1, 1}),
}

func init() {
	for op, s := range Specs {
		s.Name = op.String()
		Specs[op] = s
	}
}

// Encode appends the little-endian encoding of a payload struct.
func Encode(dst []byte, v any) []byte {
	b, err := binary.Append(dst, binary.LittleEndian, v)
	if err != nil {
		panic(fmt.Sprintf("verbsock: encoding %T: %v", v, err)) // a programming error: every payload is fixed-size
	}
	return b
}

// Decode fills v from p, which must be exactly v's size.
func Decode(p []byte, v any) error {
	n := binary.Size(v)
	if n < 0 || len(p) != n {
		return Errf(syscall.EINVAL, "payload of %d bytes, want %d", len(p), n)
	}
	if n == 0 {
		return nil
	}
	if _, err := binary.Decode(p, binary.LittleEndian, v); err != nil {
		return Errf(syscall.EINVAL, "payload: %v", err)
	}
	return nil
}

// DecodeRequest checks a request frame against its operation's spec (known
// op, descriptor count, exact payload size) and decodes its payload. It is
// the first thing the server does with bytes from a client.
func DecodeRequest(h Header, payload []byte, nfds int) (any, error) {
	s, ok := Specs[h.Op]
	if !ok {
		return nil, Errf(syscall.EOPNOTSUPP, "unknown operation %d", uint16(h.Op))
	}
	if h.Flags != 0 || h.Status != 0 {
		return nil, Errf(syscall.EINVAL, "request with flags %#x status %d", h.Flags, h.Status)
	}
	if int(h.NFDs) != nfds {
		return nil, Errf(syscall.EBADF, "header says %d descriptors, %d attached", h.NFDs, nfds)
	}
	if nfds < s.ReqFDs[0] || nfds > s.ReqFDs[1] {
		return nil, Errf(syscall.EBADF, "%v takes %d..%d descriptors, got %d", h.Op, s.ReqFDs[0], s.ReqFDs[1], nfds)
	}
	v := s.Req()
	if err := Decode(payload, v); err != nil {
		return nil, err
	}
	if err := checkReserved(payload, v); err != nil {
		return nil, err
	}
	return v, nil
}

// checkReserved refuses a request whose blank (_) fields are not zero:
// encoding/binary skips them on decode, so without this check a client
// could hide bytes the daemon never looks at, and a later version could
// not give them a meaning. Re-encoding writes zeros there; any difference
// is a reserved byte set.
func checkReserved(payload []byte, v any) error {
	var buf [512]byte
	enc := Encode(buf[:0], v)
	for i := range enc {
		if enc[i] != payload[i] {
			return Errf(syscall.EINVAL, "reserved byte %d is %#x, must be 0", i, payload[i])
		}
	}
	return nil
}

// CString is the text of a NUL-padded fixed field.
func CString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
