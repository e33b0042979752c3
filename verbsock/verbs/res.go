package verbs

import (
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"github.com/vrnic/vrnicd/verbsock"
)

// ResourceKind is a kind of object Resources lists.
type ResourceKind uint8

// The kinds, in `rdma resource show`'s order where it has them.
const (
	ResPD  = ResourceKind(verbsock.ResPD)
	ResMR  = ResourceKind(verbsock.ResMR)
	ResMW  = ResourceKind(verbsock.ResMW)
	ResCQ  = ResourceKind(verbsock.ResCQ)
	ResQP  = ResourceKind(verbsock.ResQP)
	ResSRQ = ResourceKind(verbsock.ResSRQ)
	ResAH  = ResourceKind(verbsock.ResAH)
)

var resNames = [...]string{ResPD: "pd", ResMR: "mr", ResMW: "mw", ResCQ: "cq", ResQP: "qp", ResSRQ: "srq", ResAH: "ah"}

// ResourceKinds are every kind, in order.
var ResourceKinds = []ResourceKind{ResPD, ResMR, ResMW, ResCQ, ResQP, ResSRQ, ResAH}

func (k ResourceKind) String() string {
	if int(k) < len(resNames) && resNames[k] != "" {
		return resNames[k]
	}
	return fmt.Sprintf("kind%d", uint8(k))
}

// Resource is one object a client of the daemon holds, as Resources
// reports it. Which fields are set depends on Kind (verbsock.ResEntry).
type Resource struct {
	Kind       ResourceKind
	Client     uint32 // the owning connection's id
	Owner      int    // its pid
	Handle     uint32 // the object's handle on that connection
	PD         uint32 // MR, MW, QP, SRQ, AH: the handle of its PD
	QPN        uint32 // QP: its number; SRQ: its SRQN; MW type 2B: the QP bound to
	QPType     QPType // QP
	State      QPState
	MWType     int // MW: 1 or 2 (type 2B)
	LKey, RKey uint32
	Access     Access
	Length     uint64
	IOVA       uint64
	KeysHidden bool // keys and IOVA withheld: another user's MR or MW
	MaxWR      int  // CQ: entries; QP: max_send_wr; SRQ: max_wr
	MaxRecvWR  int  // QP (0 with an SRQ)
	MaxSGE     int  // QP: max_send_sge; SRQ: max_sge
	Users      int  // CQ, SRQ: QPs using it; MR: windows bound to it
	SendCQ     uint32
	RecvCQ     uint32
	SRQ        uint32
	Dest       netip.Addr // AH: the destination; QP (RC, UC): the peer (invalid: none)
	SGIDIndex  int        // AH
	HopLimit   int        // AH
}

// Resources lists every client's objects of one kind, by client and
// handle (`rdma resource show` of a kernel device).
func (d *Device) Resources(kind ResourceKind) ([]Resource, error) {
	const op = verbsock.OpListRes
	var out []Resource
	for start, pages := uint32(0), 0; ; pages++ {
		var r verbsock.ListResResp
		if _, err := d.call(op, &verbsock.ResReq{Kind: uint8(kind), Start: start}, nil, &r); err != nil {
			return nil, err
		}
		if int(r.Count) > len(r.Items) {
			return nil, verr(op, syscall.EPROTO, "reply with %d entries", r.Count)
		}
		for i := range r.Items[:r.Count] {
			out = append(out, resource(&r.Items[i]))
		}
		if err := positionalNext(op, start, r.Next, pages); err != nil || r.Next == 0 {
			return out, err
		}
		start = r.Next
	}
}

// positionalNext checks the cursor of a reply paged by position: it must
// grow, so a daemon cannot keep the loop going for ever.
func positionalNext(op verbsock.Op, start, next uint32, pages int) error {
	if next != 0 && (next <= start || pages > 1<<16) {
		return verr(op, syscall.EPROTO, "page from %d names %d next", start, next)
	}
	return nil
}

func resource(e *verbsock.ResEntry) Resource {
	r := Resource{Kind: ResourceKind(e.Kind), Client: e.Client, Owner: int(e.Owner), Handle: e.Handle, PD: e.PD,
		QPN: e.QPN, LKey: e.LKey, RKey: e.RKey, Access: Access(e.Access), Length: e.Length, IOVA: e.IOVA,
		KeysHidden: e.Flags&verbsock.ResKeysHidden != 0, MaxWR: int(e.MaxWR), MaxRecvWR: int(e.MaxRecvWR),
		MaxSGE: int(e.MaxSGE), Users: int(e.Users), SendCQ: e.SendCQ, RecvCQ: e.RecvCQ, SRQ: e.SRQ,
		SGIDIndex: int(e.SGIDIndex), HopLimit: int(e.HopLimit)}
	switch r.Kind {
	case ResQP:
		r.QPType, r.State = QPType(e.Type), QPState(e.State)
	case ResMW:
		r.MWType = int(e.Type)
	}
	if e.DGID != [16]byte{} {
		r.Dest = netip.AddrFrom16(e.DGID).Unmap()
	}
	return r
}

// ClientInfo is one connection to the daemon and what it holds against
// its quotas: Used against Limit for the connection, UserUsed against
// UserLimit for all connections of its uid.
type ClientInfo struct {
	ID                  uint32
	Owner               int // pid
	UID                 int
	Used, Limit         Limits
	UserUsed, UserLimit Limits
}

// Clients lists the daemon's connections, in the order they came.
func (d *Device) Clients() ([]ClientInfo, error) {
	const op = verbsock.OpListClients
	var out []ClientInfo
	for start, pages := uint32(0), 0; ; pages++ {
		var r verbsock.ListClientsResp
		if _, err := d.call(op, &verbsock.PageReq{Start: start}, nil, &r); err != nil {
			return nil, err
		}
		if int(r.Count) > len(r.Items) {
			return nil, verr(op, syscall.EPROTO, "reply with %d entries", r.Count)
		}
		for _, e := range r.Items[:r.Count] {
			out = append(out, ClientInfo{ID: e.Client, Owner: int(e.Owner), UID: int(e.UID), Used: e.Used,
				Limit: e.Limit, UserUsed: e.UserUsed, UserLimit: e.UserLimit})
		}
		if err := positionalNext(op, start, r.Next, pages); err != nil || r.Next == 0 {
			return out, err
		}
		start = r.Next
	}
}

// DaemonInfo is what the daemon says of itself (query_daemon): its
// interface and link mode ("tap", "raw"; "" when it does not say), its
// version and how long it has run.
type DaemonInfo struct {
	Netdev  string
	Mode    string
	Version string
	Uptime  time.Duration
}

// Daemon reports what the daemon says of itself.
func (d *Device) Daemon() (DaemonInfo, error) {
	var r verbsock.DaemonInfo
	if _, err := d.call(verbsock.OpQueryDaemon, &verbsock.Empty{}, nil, &r); err != nil {
		return DaemonInfo{}, err
	}
	mode := ""
	switch r.Mode {
	case verbsock.ModeTAP:
		mode = "tap"
	case verbsock.ModeRaw:
		mode = "raw"
	}
	return DaemonInfo{Netdev: verbsock.CString(r.Netdev[:]), Mode: mode, Version: verbsock.CString(r.Version[:]),
		Uptime: time.Duration(r.UptimeMS) * time.Millisecond}, nil
}
