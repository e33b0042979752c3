package verbs

import (
	"math"
	"net/netip"
	"slices"
	"syscall"
	"time"

	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/ibv"
)

// Counter is one named counter.
type Counter struct {
	Name  string
	Value uint64
}

// Stats are the device's counters (query_stats): the transport's (names as
// kernel rxe's where rxe has them: sent_pkts, retransmit_timeouts, ...),
// then the port's link-layer counters (frames_in, icrc_errors, ...), and
// every live QP's transport counters.
type Stats struct {
	Device []Counter // in the daemon's order
	QPs    []QPStats // by QPN
}

// QPStats are one QP's counters.
type QPStats struct {
	QPN      uint32
	Counters []Counter
}

// Counter returns the device counter called name.
func (s *Stats) Counter(name string) (uint64, bool) { return find(s.Device, name) }

// Counter returns the QP's counter called name.
func (q *QPStats) Counter(name string) (uint64, bool) { return find(q.Counters, name) }

func find(cs []Counter, name string) (uint64, bool) {
	for _, c := range cs {
		if c.Name == name {
			return c.Value, true
		}
	}
	return 0, false
}

// QPInfo is one of the device's QPs as ListQPs reports it.
type QPInfo struct {
	QPN         uint32
	Type        QPType
	State       QPState
	DestQPN     uint32
	SendPSN     uint32        // next PSN the requester assigns
	CompPSN     uint32        // oldest PSN not yet acknowledged
	RecvPSN     uint32        // PSN the responder expects
	Outstanding int           // send WQEs posted and not yet completed
	Owner       int           // pid of the client that made it; 0: made inside the daemon
	Peer        netip.Addr    // RC/UC: the peer's address (its GID); invalid: none
	Window      int           // RC: PSNs that may be unacknowledged now (the send window)
	SRTT        time.Duration // RC: the smoothed round trip (0: not measured yet)
}

// nextPage checks a reply's cursor: pages go up in QPN, so a daemon cannot
// keep the loop going for ever.
func nextPage(op verbsock.Op, start, next uint32) (uint32, error) {
	if next != 0 && (next <= start || next >= 1<<24) {
		return 0, verr(op, syscall.EPROTO, "page from QPN %#x names QPN %#x next", start, next)
	}
	return next, nil
}

// Stats returns the device's counters and those of every QP on the
// device, not only this client's.
func (d *Device) Stats() (Stats, error) {
	const op = verbsock.OpQueryStats
	var s Stats
	var qpNames []string
	for start := uint32(0); ; {
		var r verbsock.QueryStatsResp
		if _, err := d.call(op, &verbsock.PageReq{Start: start}, nil, &r); err != nil {
			return Stats{}, err
		}
		if int(r.NumDevice) > len(r.Device) || int(r.NumQPValues) > int(r.NumDevice) ||
			int(r.NumQPValues) > verbsock.MaxQPStats || int(r.NumQPs) > len(r.QPs) {
			return Stats{}, verr(op, syscall.EPROTO, "reply with %d device counters, %d per QP, %d QPs",
				r.NumDevice, r.NumQPValues, r.NumQPs)
		}
		if start == 0 {
			s.Device = make([]Counter, r.NumDevice)
			for i := range s.Device {
				s.Device[i] = Counter{Name: verbsock.CString(r.Device[i].Name[:]), Value: r.Device[i].Value}
			}
			qpNames = make([]string, r.NumQPValues)
			for i := range qpNames {
				qpNames[i] = s.Device[i].Name
			}
		}
		for _, rec := range r.QPs[:r.NumQPs] {
			if rec.QPN < start || len(s.QPs) > 0 && rec.QPN <= s.QPs[len(s.QPs)-1].QPN {
				return Stats{}, verr(op, syscall.EPROTO, "QP %#x out of order in the page from %#x", rec.QPN, start)
			}
			q := QPStats{QPN: rec.QPN, Counters: make([]Counter, min(len(qpNames), int(r.NumQPValues)))}
			for i := range q.Counters {
				q.Counters[i] = Counter{Name: qpNames[i], Value: rec.Values[i]}
			}
			s.QPs = append(s.QPs, q)
		}
		next, err := nextPage(op, start, r.Next)
		if err != nil {
			return Stats{}, err
		}
		if next == 0 {
			return s, nil
		}
		start = next
	}
}

// ListQPs lists every QP on the device by QPN, with its state, PSNs,
// outstanding send WQEs and owner.
func (d *Device) ListQPs() ([]QPInfo, error) {
	const op = verbsock.OpListQPs
	var out []QPInfo
	for start := uint32(0); ; {
		var r verbsock.ListQPsResp
		if _, err := d.call(op, &verbsock.PageReq{Start: start}, nil, &r); err != nil {
			return nil, err
		}
		if int(r.Count) > len(r.QPs) {
			return nil, verr(op, syscall.EPROTO, "reply with %d QPs", r.Count)
		}
		for _, e := range r.QPs[:r.Count] {
			if e.QPN < start || len(out) > 0 && e.QPN <= out[len(out)-1].QPN {
				return nil, verr(op, syscall.EPROTO, "QP %#x out of order in the page from %#x", e.QPN, start)
			}
			qi := QPInfo{QPN: e.QPN, Type: QPType(e.Type), State: QPState(e.State), DestQPN: e.DestQPN,
				SendPSN: e.SendPSN, CompPSN: e.CompPSN, RecvPSN: e.RecvPSN, Outstanding: int(e.Outstanding),
				Owner: int(e.Owner), Window: int(e.Window), SRTT: time.Duration(e.SRTTUS) * time.Microsecond}
			if e.DGID != [16]byte{} {
				qi.Peer = netip.AddrFrom16(e.DGID).Unmap()
			}
			out = append(out, qi)
		}
		next, err := nextPage(op, start, r.Next)
		if err != nil {
			return nil, err
		}
		if next == 0 {
			return out, nil
		}
		start = next
	}
}

// CMEntry is one of the daemon's rdma_cm connections or listeners, as
// ListCM reports it (`rdma resource show cm_id`).
type CMEntry struct {
	Listener  bool       // a listener: only ServiceID, Local and Owner are set
	State     string     // IBA ch. 12 state (ESTABLISHED, REP_SENT, TIMEWAIT, ...); LISTEN for a listener
	Active    bool       // this side sent the REQ
	LocalID   uint32     // local communication ID
	RemoteID  uint32     // the peer's communication ID
	ServiceID uint64     // rdma_cm: port space << 16 | port
	Local     netip.Addr // invalid for a listener on any address
	Peer      netip.Addr
	QPN       uint32
	RemoteQPN uint32
	Owner     int // pid of the client holding it; 0: none known
}

// PortSpace is the rdma_cm port space the entry's service ID encodes.
func (e *CMEntry) PortSpace() uint16 { return uint16(e.ServiceID >> 16) }

// Port is the rdma_cm port of the entry's service ID.
func (e *CMEntry) Port() uint16 { return uint16(e.ServiceID) }

// ListCM lists the daemon's rdma_cm connections (by local comm ID), then
// its listeners: every client's, not only this one's.
func (d *Device) ListCM() ([]CMEntry, error) {
	const op = verbsock.OpListCM
	var out []CMEntry
	for start, pages := uint32(0), 0; ; pages++ {
		var r verbsock.ListCMResp
		if _, err := d.call(op, &verbsock.PageReq{Start: start}, nil, &r); err != nil {
			return nil, err
		}
		if int(r.Count) > len(r.Items) {
			return nil, verr(op, syscall.EPROTO, "reply with %d entries", r.Count)
		}
		for _, e := range r.Items[:r.Count] {
			out = append(out, cmEntry(&e))
		}
		if r.Next == 0 {
			return out, nil
		}
		if r.Next <= start || pages > 1<<16 {
			return nil, verr(op, syscall.EPROTO, "page from %d names %d next", start, r.Next)
		}
		start = r.Next
	}
}

func cmEntry(e *verbsock.CMEntry) CMEntry {
	addr := func(b [16]byte) netip.Addr {
		if b == [16]byte{} {
			return netip.Addr{}
		}
		return netip.AddrFrom16(b).Unmap()
	}
	c := CMEntry{Listener: e.Kind == verbsock.CMEntryListen, State: ibv.CMState(e.State).String(), Active: e.Active != 0,
		LocalID: e.LocalID, RemoteID: e.RemoteID, ServiceID: e.ServiceID, Local: addr(e.Local), Peer: addr(e.Peer),
		QPN: e.QPN, RemoteQPN: e.RemoteQPN, Owner: int(e.Owner)}
	if c.Listener {
		c.State = "LISTEN"
	}
	return c
}

// Impairment is the fault injection on the daemon's port (`vrnicctl
// impair`): probabilities per RoCEv2 frame (0 to 1), a delay of sent
// frames, one QP's frames only (QPN; 0: every QP), and the direction
// ("both", "in" or "out"; delay and reordering apply to sent frames).
type Impairment struct {
	Loss, Dup, Reorder, Corrupt float64
	Delay                       time.Duration
	QPN                         uint32
	Direction                   string
}

var impairDirs = []string{"both", "in", "out"}

// Impairment reports the impairment in force (on false: none).
func (d *Device) Impairment() (im Impairment, on bool, err error) {
	return d.impair(&verbsock.ImpairReq{Action: verbsock.ImpairQuery})
}

// SetImpairment puts im in force on the port (nil ends it): root and the
// daemon's user only (EPERM otherwise). It reports what is in force then.
func (d *Device) SetImpairment(im *Impairment) (Impairment, bool, error) {
	if im == nil {
		return d.impair(&verbsock.ImpairReq{Action: verbsock.ImpairOff})
	}
	dir := slices.Index(impairDirs, im.Direction)
	if im.Direction == "" {
		dir = 0
	}
	if dir < 0 {
		return Impairment{}, false, verr(verbsock.OpImpair, syscall.EINVAL, "direction %q: both, in or out", im.Direction)
	}
	ppm := func(p float64) uint32 { return uint32(min(max(p, 0), 1)*1e6 + 0.5) }
	if im.Delay < 0 || im.Delay/time.Microsecond > math.MaxUint32 {
		return Impairment{}, false, verr(verbsock.OpImpair, syscall.EINVAL, "delay %v", im.Delay)
	}
	for _, p := range []float64{im.Loss, im.Dup, im.Reorder, im.Corrupt} {
		if !(p >= 0 && p <= 1) {
			return Impairment{}, false, verr(verbsock.OpImpair, syscall.EINVAL, "probability %v (0 to 1)", p)
		}
	}
	return d.impair(&verbsock.ImpairReq{Action: verbsock.ImpairSet, Params: verbsock.ImpairParams{
		LossPPM: ppm(im.Loss), DupPPM: ppm(im.Dup), ReorderPPM: ppm(im.Reorder), CorruptPPM: ppm(im.Corrupt),
		DelayUS: uint32(im.Delay / time.Microsecond), QPN: im.QPN, Direction: uint8(dir)}})
}

func (d *Device) impair(req *verbsock.ImpairReq) (Impairment, bool, error) {
	var r verbsock.ImpairResp
	if _, err := d.call(verbsock.OpImpair, req, nil, &r); err != nil {
		return Impairment{}, false, err
	}
	if r.Active == 0 {
		return Impairment{}, false, nil
	}
	p := &r.Params
	dir := "both"
	if int(p.Direction) < len(impairDirs) {
		dir = impairDirs[p.Direction]
	}
	return Impairment{Loss: float64(p.LossPPM) / 1e6, Dup: float64(p.DupPPM) / 1e6, Reorder: float64(p.ReorderPPM) / 1e6,
		Corrupt: float64(p.CorruptPPM) / 1e6, Delay: time.Duration(p.DelayUS) * time.Microsecond, QPN: p.QPN,
		Direction: dir}, true, nil
}
