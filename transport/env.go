package transport

import (
	"log/slog"

	"github.com/vrnic/vrnicd/transport/clock"
	"github.com/vrnic/vrnicd/transport/wire"
)

// Clock is the engine's only source of time, so tests drive time by hand:
// the project's one clock (package clock; the engine reads only Now).
type Clock = clock.Clock

// SystemClock is the real monotonic clock.
type SystemClock = clock.System

// TxPacket is one packet the engine sends. Buf[Headroom:] holds the transport
// packet, BTH through the (still zero) ICRC; the link layer fills the headroom
// with Ethernet/IP/UDP headers and then computes the ICRC.
type TxPacket struct {
	Buf      []byte
	Headroom int
	AV       *AddressVector // destination and GRH fields
	SrcPort  uint16         // UDP source port
	SrcQPN   uint32
}

// Output is where the engine's packets go. Send takes ownership of every
// buffer (it returns them to a pool once written).
type Output interface {
	// Alloc returns a buffer of length Headroom()+n.
	Alloc(n int) []byte
	Headroom() int
	Send(pkts []TxPacket)
}

// RxPacket is a received RoCEv2 packet that passed the link layer's checks
// (addresses, UDP, ICRC). The engine must not keep any of it after the call
// that delivers it returns.
type RxPacket struct {
	wire.Packet
	SrcGID, DstGID [16]byte
	IPHeader       []byte // 20 (IPv4) or 40 (IPv6) bytes, for the UD GRH
	SrcPort        uint16
}

// CompletionQueue takes work completions. Several QPs' owners may push to
// one CQ at once, so implementations lock.
type CompletionQueue interface {
	// Push appends wc; false means the CQ overflowed.
	Push(wc *WC) bool
}

// Event is an affiliated asynchronous event (enum ibv_event_type).
type Event uint8

const (
	EventQPFatal     Event = 1  // IBV_EVENT_QP_FATAL
	EventQPReqErr    Event = 2  // IBV_EVENT_QP_REQ_ERR
	EventQPAccessErr Event = 3  // IBV_EVENT_QP_ACCESS_ERR
	EventCommEst     Event = 4  // IBV_EVENT_COMM_EST
	EventSQDrained   Event = 5  // IBV_EVENT_SQ_DRAINED
	EventSRQLimit    Event = 14 // IBV_EVENT_SRQ_LIMIT_REACHED
	EventQPLastWQE   Event = 16 // IBV_EVENT_QP_LAST_WQE_REACHED
	EventCQErr       Event = 0  // IBV_EVENT_CQ_ERR
)

// Hooks connect a QP to whatever runs its owners. All are optional.
type Hooks struct {
	// WakeSend and WakeRecv ask the owner of that side to run again
	// (RunSend / RunRecv) because the other side or the control plane
	// changed something it must see.
	WakeSend func()
	WakeRecv func()
	// Event reports an asynchronous event.
	Event func(qpn uint32, ev Event)
	// SendRetired and RecvRetired are called by that side's owner each
	// time a WQE leaves the engine, before its completion (if any) is
	// pushed: a ring hands the WQE's slot back then, so that a client that
	// polled a completion can always post again (ibv_post_* ENOMEM counts
	// WQEs not yet completed).
	SendRetired func()
	RecvRetired func()
}

// Env is what an engine QP needs from the device around it.
type Env struct {
	Clock  Clock
	Memory Memory
	Out    Output
	Log    *slog.Logger
	// Device, if set, receives every counter increment too.
	Device *Counters
	// PortMTU reports the port's active MTU, the message limit of UD QPs
	// modified after it is read; it follows the link's MTU, so it is
	// read, not copied. Nil: 1024.
	PortMTU func() MTU
}
