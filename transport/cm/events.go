package cm

import (
	"net/netip"

	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
)

// Output collects what one call into the Table asks of its caller, in the
// order it must be done: first the QP transitions (Modify), then the MADs
// (Sends: a REP must not leave before the QP it names is ready to receive),
// then the consumer's events.
type Output struct {
	Modify []QPModify
	Sends  []Send
	Events []Event
}

// Reset empties o, keeping its storage.
func (o *Output) Reset() {
	o.Modify, o.Sends, o.Events = o.Modify[:0], o.Sends[:0], o.Events[:0]
}

// Send is one 256-byte CM MAD for QP1 of the port whose GID is To's (P_Key
// 0xFFFF, Q_Key 0x80010000, IBA 13.5.1 / 12.11).
type Send struct {
	To  netip.Addr
	MAD [mad.Size]byte
}

// QPState is a QP state a transition asks for.
type QPState uint8

const (
	QPStateInit QPState = iota + 1 // INIT again, with the access the CM agreed (cma_modify_qp_rtr starts so)
	QPStateRTR                     // Ready To Receive: needs the peer's QPN and PSN
	QPStateRTS                     // Ready To Send: timeout, retries, our PSN
	QPStateErr                     // Error: the connection is gone
)

func (s QPState) String() string {
	switch s {
	case QPStateInit:
		return "INIT"
	case QPStateRTR:
		return "RTR"
	case QPStateRTS:
		return "RTS"
	case QPStateErr:
		return "ERR"
	}
	return "?"
}

// QPAttr is what ib_cm_init_qp_attr gives rdma_cm for a QP transition: the
// exchanged QPNs and PSNs, the path, and the RDMA READ/atomic depths and
// retry counts the REQ and REP agreed.
type QPAttr struct {
	AccessFlags     uint32   // INIT: remote access (AccessRemoteWrite, ...)
	DestQPN         uint32   // RTR: the peer's QPN
	RQPSN           uint32   // RTR: the Starting PSN of our REQ or REP (ib_cm: what we expect to receive)
	SQPSN           uint32   // RTS: the Starting PSN of the peer's REQ or REP
	PathMTU         uint8    // RTR: IB MTU code
	Path            mad.Path // RTR: seen from this side (LocalGID ours)
	MaxDestRdAtomic uint8    // RTR: responder resources
	MinRNRTimer     uint8    // RTR: ib_cm leaves it 0
	MaxRdAtomic     uint8    // RTS: initiator depth
	Timeout         uint8    // RTS: Local ACK Timeout exponent
	RetryCount      uint8    // RTS
	RNRRetry        uint8    // RTS
}

// Remote access flags of a connected QP (ib_verbs.h enum ib_access_flags,
// the same bits as libibverbs' IBV_ACCESS_*).
const (
	AccessRemoteWrite  = 1 << 1
	AccessRemoteRead   = 1 << 2
	AccessRemoteAtomic = 1 << 3
)

// QPModify asks the consumer to move its QP to State.
type QPModify struct {
	ID    uint32 // the connection's local communication ID
	QPN   uint32
	State QPState
	Attr  QPAttr
}

// EventKind names what happened to a connection, in rdma_cm's words
// (enum rdma_cm_event_type).
type EventKind uint8

const (
	EventConnectRequest  EventKind = iota + 1 // a REQ for a listener: Accept or Reject it
	EventEstablished                          // REP (active) or RTU (passive) done
	EventRejected                             // the peer sent REJ: Reason, ARI, PrivateData
	EventUnreachable                          // retries exhausted, or a request left unanswered
	EventDisconnected                         // DREQ received, or our DREQ answered or timed out
	EventTimewaitExit                         // the QPN and comm ID may be used again
	EventSIDRRequest                          // a SIDR_REQ for a listener: AnswerSIDR it
	EventSIDRResolved                         // SIDR_REP: SIDR has the answer
	EventConnectResponse                      // REP of a Manual connection: move the QP, then Establish
)

var eventNames = [...]string{"", "CONNECT_REQUEST", "ESTABLISHED", "REJECTED", "UNREACHABLE",
	"DISCONNECTED", "TIMEWAIT_EXIT", "SIDR_REQUEST", "SIDR_RESOLVED", "CONNECT_RESPONSE"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return "?"
}

// Event is one event for the consumer of a connection.
type Event struct {
	Kind        EventKind
	ID          uint32   // the connection's local communication ID
	Request     *Request // EventConnectRequest, EventSIDRRequest
	Reason      uint16   // EventRejected: the REJ reason (IBA Table 112)
	ARI         []byte   // EventRejected: additional rejection information
	PrivateData []byte   // the peer's private data (REQ: after the cma_hdr)
	SIDR        *SIDRAnswer
}

// Request is what a REQ or SIDR_REQ asks of a listener.
type Request struct {
	ServiceID  uint64
	Listener   uint64         // the Listen handle it matched
	Peer       netip.Addr     // where the MAD came from; answers go there
	Src, Dst   netip.AddrPort // from the cma_hdr: the active side, and us at the service's port
	RemoteQPN  uint32         // REQ
	RemotePSN  uint32         // REQ
	QPType     uint8          // REQ: mad.ServiceRC or ServiceUC
	RespRes    uint8          // REQ: the active side's responder resources
	InitDepth  uint8          // REQ: the active side's initiator depth
	RetryCount uint8          // REQ
	RNRRetry   uint8          // REQ
	PathMTU    uint8          // REQ
	SRQ        bool           // REQ
	Path       mad.Path       // REQ: seen from this side
}

// SIDRAnswer is a SIDR_REP's content.
type SIDRAnswer struct {
	Status uint8 // mad.SIDRValid, ...
	QPN    uint32
	QKey   uint32
}

// rdma_cm's event numbers (include/rdma/rdma_cm.h enum rdma_cm_event_type,
// the same in librdmacm's rdma_cma.h), for consumers that speak librdmacm.
const (
	RDMACMEventConnectRequest  = 4
	RDMACMEventConnectResponse = 5
	RDMACMEventUnreachable     = 7
	RDMACMEventRejected        = 8
	RDMACMEventEstablished     = 9
	RDMACMEventDisconnected    = 10
	RDMACMEventTimewaitExit    = 15
)

// etimedout is Linux's ETIMEDOUT, the status rdma_cm gives an unreachable
// peer (negated, as event.status carries it).
const etimedout = 110

// RDMACMEvent is the rdma_cm event and status a kernel rdma_cm ID would
// report for e (cma.c cma_ib_handler, cma_sidr_rep_handler): REJECTED with
// the REJ reason as status, UNREACHABLE with -ETIMEDOUT, a SIDR answer as
// ESTABLISHED or, unless valid, UNREACHABLE with the SIDR status.
func (e Event) RDMACMEvent() (event, status int) {
	switch e.Kind {
	case EventConnectRequest, EventSIDRRequest:
		return RDMACMEventConnectRequest, 0
	case EventConnectResponse:
		return RDMACMEventConnectResponse, 0
	case EventEstablished:
		return RDMACMEventEstablished, 0
	case EventRejected:
		return RDMACMEventRejected, int(e.Reason)
	case EventUnreachable:
		return RDMACMEventUnreachable, -etimedout
	case EventDisconnected:
		return RDMACMEventDisconnected, 0
	case EventTimewaitExit:
		return RDMACMEventTimewaitExit, 0
	case EventSIDRResolved:
		if e.SIDR != nil && e.SIDR.Status != 0 {
			return RDMACMEventUnreachable, int(e.SIDR.Status)
		}
		return RDMACMEventEstablished, 0
	}
	return -1, 0
}
