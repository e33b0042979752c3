package verbsock

// Admin operations: what `vrnicctl stat` and `vrnicctl qp` show. Any client
// may call them; they report the whole device, not only the caller's
// objects (the socket is 0660, so every client is trusted that far).
//
// Both are paginated by QPN so that a device with thousands of QPs fits in
// frames of MaxMessage bytes: a request names the first QPN of its page
// (Start, 0 for the first page), a reply the QPN the next page starts at
// (Next, 0 when there is none). QPNs are at least 0x11, so 0 is free for
// both meanings. The daemon takes the list of QPs once, at Start 0, and
// pages through that list; counters and PSNs are read when each page is
// built. A QP destroyed in between is left out of its page.

// StatNameLen is the size of a counter name (NUL-padded).
const StatNameLen = 32

// Page sizes of the admin replies (each reply fits one frame).
const (
	MaxDeviceStats = 128 // named device counters in a QueryStatsResp
	MaxQPStats     = 24  // counters per QP record
	StatsQPsPage   = 15  // QP records in a QueryStatsResp (the reply fits MaxMessage)
	ListQPsPage    = 140 // QP records in a ListQPsResp
)

// Stat is one named counter.
type Stat struct {
	Name  [StatNameLen]byte
	Value uint64
}

// QPStat is one QP's counters: Values[i] is the counter named by the
// reply's Device[i].Name, for i < NumQPValues.
type QPStat struct {
	QPN      uint32
	Reserved uint32
	Values   [MaxQPStats]uint64
}

// PageReq asks for the page of QPs from QPN Start on.
type PageReq struct {
	Start    uint32
	Reserved uint32
}

// QueryStatsResp carries the device counters (the transport's first, then
// the port's link-layer counters; a name in both is their sum) and the
// per-QP counters of one page. The per-QP counters are the first
// NumQPValues device counters, in that order.
type QueryStatsResp struct {
	NumDevice   uint16
	NumQPValues uint16
	NumQPs      uint16
	Reserved    uint16
	Next        uint32
	Reserved2   uint32
	Device      [MaxDeviceStats]Stat
	QPs         [StatsQPsPage]QPStat
}

// QPEntry is one QP as `vrnicctl qp` shows it. Type and State are
// ibverbs' numbers; Owner is the pid of the client that made it (0: made
// inside the daemon).
type QPEntry struct {
	QPN         uint32
	DestQPN     uint32
	SendPSN     uint32 // next PSN the requester assigns
	CompPSN     uint32 // oldest PSN not yet acknowledged
	RecvPSN     uint32 // PSN the responder expects
	Outstanding uint32 // send WQEs posted and not completed
	Owner       uint32
	Type        uint8
	State       uint8
	Reserved    uint16
	DGID        [16]byte // RC/UC: the peer's GID (its address); zeros: none
	Window      uint32   // RC: PSNs that may be unacknowledged now
	SRTTUS      uint32   // RC: smoothed round trip in microseconds (0: not measured)
}

// ListQPsResp is one page of the device's QPs, by QPN.
type ListQPsResp struct {
	Count uint32
	Next  uint32
	QPs   [ListQPsPage]QPEntry
}

// list_cm: the daemon's rdma_cm connections and listeners, as `rdma
// resource show cm_id` lists them, for `vrnicctl cm`. Paged by position
// in one snapshot taken at Start 0: Next is the position the next page
// starts at (0: the last page).

// ListCMPage is the CM entries in a ListCMResp.
const ListCMPage = 120

// CM entry kinds.
const (
	CMEntryConn   = 0
	CMEntryListen = 1
)

// CMEntry is one connection or listener. State is the IBA ch. 12 state
// (ibv.CMState: 9 ESTABLISHED, 12 TIMEWAIT); a listener has only
// ServiceID, Local (all zeros: any address) and Owner. Addresses are
// IPv4-mapped or IPv6; Owner is the client's pid (0: none known).
type CMEntry struct {
	LocalID   uint32
	RemoteID  uint32
	ServiceID uint64
	Local     [16]byte
	Peer      [16]byte
	QPN       uint32
	RemoteQPN uint32
	Owner     uint32
	Kind      uint8
	State     uint8
	Active    uint8
	Reserved  uint8
}

// ListCMResp is one page of CM entries: connections by local comm ID,
// then listeners.
type ListCMResp struct {
	Count uint32
	Next  uint32
	Items [ListCMPage]CMEntry
}

// Fault injection (op impair, `vrnicctl impair`): what the daemon does to
// the RoCEv2 frames it sends and receives, for testing a program's
// recovery without netem. Any client may read it; only root and the
// daemon's own user may set or end it. Probabilities are parts per
// million.
const (
	ImpairQuery uint8 = iota // Action: report what is in force
	ImpairSet                // replace it with the request's
	ImpairOff                // end it
)

// Directions of an impairment.
const (
	ImpairBoth uint8 = iota
	ImpairIn
	ImpairOut
)

// ImpairParams is one impairment.
type ImpairParams struct {
	LossPPM, DupPPM, ReorderPPM, CorruptPPM uint32
	DelayUS                                 uint32 // sent frames held back this long
	QPN                                     uint32 // 0: every QP
	Direction                               uint8  // ImpairBoth, ImpairIn, ImpairOut
	_                                       [3]byte
}

// ImpairReq asks for Action with Params (ImpairSet only).
type ImpairReq struct {
	Action uint8
	_      [3]byte
	Params ImpairParams
}

// ImpairResp is what is in force after the request (Active 0: nothing).
type ImpairResp struct {
	Active uint8
	_      [3]byte
	Params ImpairParams
}
