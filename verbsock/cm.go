package verbsock

import "strconv"

// rdma_cm operations (PROTOCOL.md §11): listen, connect, accept, reject,
// disconnect and destroy of connection-manager IDs, address resolution,
// and the CM events the server sends as OpCMEvent frames. They live apart from the verbs of
// proto.go, numbered from 0x40.
const (
	OpCMListen      Op = 0x40
	OpCMUnlisten    Op = 0x41
	OpCMConnect     Op = 0x42
	OpCMAccept      Op = 0x43
	OpCMReject      Op = 0x44
	OpCMDisconnect  Op = 0x45
	OpCMDestroy     Op = 0x46
	OpCMEvent       Op = 0x47 // server → client only, with FlagEvent
	OpCMResolveUD   Op = 0x48 // UD over SIDR: SIDR_REQ to an RDMA_PS_UDP service
	OpCMAcceptUD    Op = 0x49 // UD over SIDR: SIDR_REP with a UD QP
	OpCMResolveAddr Op = 0x4A // rdma_resolve_addr: source address, destination's link address

	// Event channels: each is a socket of its own that the daemon writes the
	// CM events of the objects on it to (rdma_create_event_channel).
	OpCMChannel          Op = 0x4B
	OpCMCloseChannel     Op = 0x4C
	OpCMMigrate          Op = 0x4D // rdma_migrate_id: an object's events go to another channel
	OpCMResolveAddrAsync Op = 0x4E // rdma_resolve_addr answered by an event
	OpCMEstablish        Op = 0x4F // rdma_establish: the RTU of a CMManualQP connection
	OpCMJoin             Op = 0x50 // rdma_join_multicast
	OpCMLeave            Op = 0x51 // rdma_leave_multicast
)

var cmOpNames = map[Op]string{
	OpCMListen: "cm_listen", OpCMUnlisten: "cm_unlisten", OpCMConnect: "cm_connect", OpCMAccept: "cm_accept",
	OpCMReject: "cm_reject", OpCMDisconnect: "cm_disconnect", OpCMDestroy: "cm_destroy", OpCMEvent: "cm_event",
	OpCMResolveUD: "cm_resolve_ud", OpCMAcceptUD: "cm_accept_ud", OpCMResolveAddr: "cm_resolve_addr",
	OpCMChannel: "cm_channel", OpCMCloseChannel: "cm_close_channel", OpCMMigrate: "cm_migrate",
	OpCMResolveAddrAsync: "cm_resolve_addr_async", OpCMEstablish: "cm_establish", OpCMJoin: "cm_join", OpCMLeave: "cm_leave",
}

// Private data sizes rdma_cm gives its consumers over IB/RoCE (cma.c):
// REQ 56 bytes after the 36-byte cma_hdr, REP 196, REJ 148. CMPrivateMax
// holds any of them, and a DREQ's first bytes.
const (
	CMConnectPrivateLen = 56
	CMAcceptPrivateLen  = 196
	CMRejectPrivateLen  = 148
	CMPrivateMax        = 196

	// UD over SIDR: a SIDR_REQ has 216 bytes, 180 after the cma_hdr; a
	// SIDR_REP 136.
	CMResolveUDPrivateLen = 180
	CMAcceptUDPrivateLen  = 136
)

// PortSpaceUDP is RDMA_PS_UDP, the port space of UD over SIDR.
const PortSpaceUDP = 0x0111

// CMListenReq listens on an rdma_cm port of a port space (0: RDMA_PS_TCP,
// 0x0106) at Addr (an IPv4-mapped or IPv6 address; all zeros: any of the
// device's). Context comes back in the listener's events, on Channel (0:
// the client's socket).
type CMListenReq struct {
	Context   uint64
	Addr      [16]byte
	PortSpace uint16
	Port      uint16
	Channel   uint32
}

type CMListenResp struct{ Listener uint32 }

// CMConnParams are struct rdma_conn_param's fields, and Flags.
type CMConnParams struct {
	RespRes     uint8 // responder_resources
	InitDepth   uint8 // initiator_depth
	RetryCount  uint8 // retry_count, 0-7
	RNRRetry    uint8 // rnr_retry_count, 0-7
	PrivateLen  uint8
	Flags       uint8 // CMManualQP
	_           [2]byte
	PrivateData [CMPrivateMax]byte
	PSN         uint32 // with CMManualQP: our starting PSN (the QP's rq_psn), 24 bits
}

// CMManualQP: the client moves the QP itself, as librdmacm's consumers do
// whose id has no QP (rdma_connect and rdma_accept with conn_param's
// qp_num, rdma_init_qp_attr, rdma_establish): the daemon never modifies
// it. On connect the REP comes as CONNECT_RESPONSE and cm_establish sends
// the RTU; on accept the QP must be in RTS already.
const CMManualQP = 1

// CMConnectReq connects QP (a handle of this connection, RC or UC, in RESET
// or INIT) to Dst:DstPort from Src:SrcPort (zero: the device picks the
// address; port 0: an ephemeral one). Context comes back in its events,
// on Channel (0: the client's socket).
type CMConnectReq struct {
	Context   uint64
	QP        uint32
	PortSpace uint16
	DstPort   uint16
	Dst       [16]byte
	Src       [16]byte
	SrcPort   uint16
	_         uint16
	Channel   uint32
	Params    CMConnParams
}

type CMConnectResp struct{ Conn uint32 }

// CMAcceptReq accepts connect request Conn with QP; Context (0: keep the
// listener's) comes back in its events from then on.
type CMAcceptReq struct {
	Context uint64
	Conn    uint32
	QP      uint32
	Params  CMConnParams
}

// CMRejectReq rejects connect request Conn (REJ reason 28).
type CMRejectReq struct {
	Conn       uint32
	PrivateLen uint8
	_          [3]byte
	Private    [CMRejectPrivateLen]byte
}

// CMResolveUDReq resolves the UD peer listening on Dst:DstPort (port space
// 0 or PortSpaceUDP) from Src:SrcPort (as CMConnectReq's) with a SIDR_REQ
// carrying PrivateLen bytes of Private after the cma_hdr. The answer is an
// event of the new connection on Channel (0: the client's socket):
// ESTABLISHED with the peer's QPN, Q_Key and address vector, or
// UNREACHABLE (status: the SIDR status, or -ETIMEDOUT).
type CMResolveUDReq struct {
	Context    uint64
	Dst        [16]byte
	Src        [16]byte
	DstPort    uint16
	SrcPort    uint16
	PortSpace  uint16
	PrivateLen uint8
	_          uint8
	Private    [CMResolveUDPrivateLen]byte
	Channel    uint32
}

// CMAcceptUDReq answers the SIDR request Conn (a CONNECT_REQUEST of a
// PortSpaceUDP listener) with QP, a UD QP of this connection, and its
// Q_Key; the request is over then. cm_reject refuses one (SIDR status 2).
type CMAcceptUDReq struct {
	Conn       uint32
	QP         uint32
	PrivateLen uint8
	_          [3]byte
	Private    [CMAcceptUDPrivateLen]byte
}

// CMResolveAddrReq is rdma_resolve_addr: it picks the source address for
// Dst (Src when not zero, which must be one of the device's addresses and
// of Dst's family; zero: the device's address of Dst's family, as
// cm_connect picks it) and resolves Dst's link address (ARP or ND) as
// cm_connect does first, for at most TimeoutMS (0: the agent's resolution
// timeout, which also bounds it). Nothing is kept: no handle, no event.
type CMResolveAddrReq struct {
	Dst       [16]byte
	Src       [16]byte
	TimeoutMS uint32
	_         uint32
}

// CMResolveAddrResp is the resolved source (rdma_get_local_addr): the
// device's address a connection to the destination uses and the index of
// its GID in port 1's table.
type CMResolveAddrResp struct {
	Src       [16]byte
	SGIDIndex uint32
	_         uint32
}

// CMChannelResp names a new event channel; the reply carries the
// client's end of its socket (SOCK_SEQPACKET), where OpCMEvent frames of
// the objects on the channel arrive and nothing else.
type CMChannelResp struct{ Channel uint32 }

// CMMigrateReq moves listener or connection Handle's events from now on to
// Channel (0: the client's socket).
type CMMigrateReq struct {
	Handle  uint32
	Channel uint32
}

// CMResolveAddrAsyncReq is CMResolveAddrReq answered by an event instead
// of the reply: the reply comes at once (errors found without the network:
// EINVAL, EADDRNOTAVAIL), and ADDR_RESOLVED (Local: the source address,
// AH.SGIDIndex its GID's index) or ADDR_ERROR (status -ETIMEDOUT: nobody
// answered) later on Channel, with Context and no connection.
type CMResolveAddrAsyncReq struct {
	Context   uint64
	Channel   uint32
	TimeoutMS uint32
	Dst       [16]byte
	Src       [16]byte
}

// CMJoinReq is rdma_join_multicast_ex on RoCEv2: Group an IPv4 multicast
// address (IPv6: the kernel's ENOTSUPP, errno 524), Src the source (zero:
// the port's IPv4 address), Flags rdma_cm's join flags (CMJoinSendOnly: a
// send-only full member, which the port does not join on the link).
type CMJoinReq struct {
	Group [16]byte
	Src   [16]byte
	Flags uint32
	_     uint32
}

// CMJoin* are CMJoinReq.Flags (enum rdma_cm_mc_join_flags).
const (
	CMJoinFullMember = 0
	CMJoinSendOnly   = 1
)

// CMJoinResp is the join: its handle for cm_leave and what its
// MULTICAST_JOIN event gives (event->param.ud): the path to the group in
// AH (its DGID the MGID), QPN 0xFFFFFF and the Q_Key.
type CMJoinResp struct {
	Handle uint32
	QPN    uint32
	QKey   uint32
	_      uint32
	MGID   [16]byte
	Local  [16]byte
	AH     AV
}

// CMEventType is enum rdma_cm_event_type.
type CMEventType uint32

const (
	CMEventAddrResolved    CMEventType = 0
	CMEventAddrError       CMEventType = 1
	CMEventRouteError      CMEventType = 3
	CMEventConnectRequest  CMEventType = 4
	CMEventConnectResponse CMEventType = 5
	CMEventConnectError    CMEventType = 6
	CMEventUnreachable     CMEventType = 7
	CMEventRejected        CMEventType = 8
	CMEventEstablished     CMEventType = 9
	CMEventDisconnected    CMEventType = 10
	CMEventTimewaitExit    CMEventType = 15
)

var cmEventNames = map[CMEventType]string{
	CMEventAddrResolved: "ADDR_RESOLVED", CMEventAddrError: "ADDR_ERROR", CMEventRouteError: "ROUTE_ERROR", CMEventConnectRequest: "CONNECT_REQUEST", CMEventConnectResponse: "CONNECT_RESPONSE",
	CMEventConnectError: "CONNECT_ERROR", CMEventUnreachable: "UNREACHABLE", CMEventRejected: "REJECTED",
	CMEventEstablished: "ESTABLISHED", CMEventDisconnected: "DISCONNECTED", CMEventTimewaitExit: "TIMEWAIT_EXIT",
}

func (t CMEventType) String() string {
	if s, ok := cmEventNames[t]; ok {
		return s
	}
	return "CMEventType(" + strconv.FormatUint(uint64(t), 10) + ")"
}

// CMEventMsg is the payload of OpCMEvent. Conn is the connection's handle
// (for CONNECT_REQUEST a new one), Listener the listener's for a connect
// request; Status is rdma_cm's (REJECTED: the REJ reason, UNREACHABLE:
// -ETIMEDOUT or a SIDR status). Peer and Local are the two ends' addresses;
// the QP fields are what the exchange agreed (the peer's for a connect
// request). For an RC or UC connection AH is the path (rdma_init_qp_attr's
// ah_attr at RTR), with Timeout, RQPSN and SQPSN what the QP takes at RTR
// and RTS. A resolved UD peer (ESTABLISHED of cm_resolve_ud, rdma_cm's
// event->param.ud) has its QPN in RemoteQPN, its Q_Key in QKey and the
// path to it in AH.
type CMEventMsg struct {
	Type       CMEventType
	Status     int32
	Context    uint64
	Conn       uint32
	Listener   uint32
	Peer       [16]byte
	Local      [16]byte
	PeerPort   uint16
	LocalPort  uint16
	RemoteQPN  uint32
	RespRes    uint8
	InitDepth  uint8
	RetryCount uint8
	RNRRetry   uint8
	PathMTU    uint8
	SRQ        uint8
	PrivateLen uint8
	Timeout    uint8 // RC/UC: the QP's Local ACK Timeout exponent (rdma_init_qp_attr at RTS)
	Private    [CMPrivateMax]byte
	QKey       uint32
	AH         AV
	RQPSN      uint32 // RC/UC: our starting PSN, the QP's rq_psn (0 in a CONNECT_REQUEST: Accept's)
	SQPSN      uint32 // RC/UC: the peer's starting PSN, the QP's sq_psn
}

func init() {
	for op, s := range map[Op]OpSpec{
		OpCMListen:      spec(mk[CMListenReq](), mk[CMListenResp](), none, none),
		OpCMUnlisten:    spec(mk[HandleReq](), mk[Empty](), none, none),
		OpCMConnect:     spec(mk[CMConnectReq](), mk[CMConnectResp](), none, none),
		OpCMAccept:      spec(mk[CMAcceptReq](), mk[Empty](), none, none),
		OpCMReject:      spec(mk[CMRejectReq](), mk[Empty](), none, none),
		OpCMDisconnect:  spec(mk[HandleReq](), mk[Empty](), none, none),
		OpCMDestroy:     spec(mk[HandleReq](), mk[Empty](), none, none),
		OpCMResolveUD:   spec(mk[CMResolveUDReq](), mk[CMConnectResp](), none, none),
		OpCMAcceptUD:    spec(mk[CMAcceptUDReq](), mk[Empty](), none, none),
		OpCMResolveAddr: spec(mk[CMResolveAddrReq](), mk[CMResolveAddrResp](), none, none),

		OpCMChannel:          spec(mk[Empty](), mk[CMChannelResp](), none, [2]int{1, 1}),
		OpCMCloseChannel:     spec(mk[HandleReq](), mk[Empty](), none, none),
		OpCMMigrate:          spec(mk[CMMigrateReq](), mk[Empty](), none, none),
		OpCMResolveAddrAsync: spec(mk[CMResolveAddrAsyncReq](), mk[Empty](), none, none),
		OpCMEstablish:        spec(mk[HandleReq](), mk[Empty](), none, none),
		OpCMJoin:             spec(mk[CMJoinReq](), mk[CMJoinResp](), none, none),
		OpCMLeave:            spec(mk[HandleReq](), mk[Empty](), none, none),
	} {
		s.Name = cmOpNames[op]
		Specs[op] = s
	}
}
