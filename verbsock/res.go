package verbsock

// list_res, list_clients and query_daemon: what `vrnicctl res`, `vrnicctl
// devices` and `vrnicctl devinfo` show beside the verbs' own queries, as
// `rdma resource show` and `rdma link show` show them for a kernel device.
// Any client may call them, as list_qps: the socket's mode already limits
// who is a client. The keys and IOVAs of another user's MRs and MWs are
// the exception (ResKeysHidden): kernel rdma shows them only to
// CAP_NET_ADMIN, since an rkey is what a remote write needs.

// Kinds of object list_res lists (ResReq.Kind, ResEntry.Kind).
const (
	ResPD uint8 = iota + 1
	ResMR
	ResMW
	ResCQ
	ResQP
	ResSRQ
	ResAH
	NumResKinds = ResAH // the highest kind
)

// ResEntry flags.
const (
	// ResKeysHidden: the entry's keys and IOVA are zeros because the
	// caller is neither root, the daemon's user nor the owner's user.
	ResKeysHidden uint8 = 1 << 0
)

// ListResPage is the entries in a ListResResp, ListClientsPage those in a
// ListClientsResp (each reply fits MaxMessage).
const (
	ListResPage     = 64
	ListClientsPage = 32
)

// ResReq asks for the page of Kind's objects from position Start on (0:
// the first page, which takes a new snapshot).
type ResReq struct {
	Kind  uint8
	_     [3]byte
	Start uint32
}

// ResEntry is one object a client holds. Which fields mean something
// depends on Kind (PROTOCOL.md §4.1); the rest are zero. Handles are in
// the owning connection's namespace.
type ResEntry struct {
	Length    uint64 // MR, MW: bytes covered
	IOVA      uint64 // MR, MW: the first address
	Client    uint32 // the owning connection's id (HelloResp.ClientID)
	Owner     uint32 // the owning connection's pid
	Handle    uint32 // the object's handle
	PD        uint32 // MR, MW, QP, SRQ, AH: the handle of its PD
	QPN       uint32 // QP: its number; SRQ: its SRQN; MW type 2B: the QP bound to
	LKey      uint32 // MR
	RKey      uint32 // MR, MW
	Access    uint32 // MR, MW: ibv_access_flags
	MaxWR     uint32 // CQ: entries; QP: max_send_wr; SRQ: max_wr
	MaxRecvWR uint32 // QP: max_recv_wr (0 with an SRQ)
	MaxSGE    uint32 // QP: max_send_sge; SRQ: max_sge
	Users     uint32 // CQ, SRQ: the QPs using it; MR: the windows bound to it
	SendCQ    uint32 // QP: handles of its CQs and SRQ (0: none)
	RecvCQ    uint32
	SRQ       uint32
	DGID      [16]byte // AH: the destination GID; QP (RC, UC): the peer's
	Kind      uint8
	Type      uint8 // QP: ibverbs type (RC 2, UC 3, UD 4); MW: 1 or 2 (2B)
	State     uint8 // QP: ibverbs state
	Flags     uint8 // ResKeysHidden
	SGIDIndex uint8 // AH
	HopLimit  uint8 // AH
	Reserved  [6]byte
}

// ListResResp is one page of list_res.
type ListResResp struct {
	Count uint32
	Next  uint32 // position of the next page's first entry; 0: this is the last
	Items [ListResPage]ResEntry
}

// ClientEntry is one connection and what it holds against its quotas:
// Used against Limit for the connection alone, UserUsed against
// UserLimit for all connections of its uid together (the same resources
// as Limits).
type ClientEntry struct {
	Client    uint32
	Owner     uint32 // pid
	UID       uint32
	Reserved  uint32
	Used      Limits
	Limit     Limits
	UserUsed  Limits
	UserLimit Limits
}

// ListClientsResp is one page of list_clients (PageReq.Start a position,
// as list_cm).
type ListClientsResp struct {
	Count uint32
	Next  uint32
	Items [ListClientsPage]ClientEntry
}

// Link modes of DaemonInfo.Mode.
const (
	ModeUnknown uint8 = iota // not said (an in-process server)
	ModeTAP
	ModeRaw
)

// DaemonInfo answers query_daemon: what `rdma link show` says of a kernel
// device beside ibv_devinfo's attributes, and what the daemon is.
type DaemonInfo struct {
	UptimeMS uint64   // since the daemon started
	Netdev   [16]byte // the interface (IFNAMSIZ, NUL-padded)
	Mode     uint8
	Reserved [7]byte
	Version  [64]byte // the daemon's version (NUL-padded)
}
