package nic

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vrnic/vrnicd/nic/gid"
	"github.com/vrnic/vrnicd/nic/netstack"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/clock"
	"github.com/vrnic/vrnicd/transport/mem"
)

// Sender is the port: *netstack.Stack.
type Sender interface {
	Send(pkts []netstack.TxPacket) (int, error)
	Resolve(ip netip.Addr)
}

// Limits bound what the device hands out.
type Limits struct {
	MaxQP     int // default 1<<16
	MaxSRQ    int // default 1<<14
	MaxQPWR   uint32
	MaxSGE    uint32
	MaxInline uint32
	MaxCQE    uint32
	// UD multicast (ibv_attach_mcast): groups, QPs per group, attachments
	// in all; default kernel rxe's 8192, 56 and 0x70000.
	MaxMcastGrp           int
	MaxMcastQPAttach      int
	MaxTotalMcastQPAttach int
}

func (l *Limits) defaults() {
	if l.MaxQP == 0 {
		l.MaxQP = 1 << 16
	}
	if l.MaxSRQ == 0 {
		l.MaxSRQ = 1 << 14
	}
	if l.MaxQPWR == 0 {
		l.MaxQPWR = 1 << 14
	}
	if l.MaxSGE == 0 {
		l.MaxSGE = 32
	}
	if l.MaxInline == 0 {
		l.MaxInline = 512
	}
	if l.MaxCQE == 0 {
		l.MaxCQE = 1 << 16
	}
	if l.MaxMcastGrp == 0 {
		l.MaxMcastGrp = DefaultMaxMcastGrp
	}
	if l.MaxMcastQPAttach == 0 {
		l.MaxMcastQPAttach = DefaultMaxMcastQPAttach
	}
	if l.MaxTotalMcastQPAttach == 0 {
		l.MaxTotalMcastQPAttach = DefaultMaxTotalMcastQPAttach
	}
}

// Config configures NewDevice.
type Config struct {
	Name    string
	MAC     net.HardwareAddr
	LinkMTU int
	GIDs    *gid.Table
	Log     *slog.Logger
	Clock   clock.Clock // nil: the system clock; it also runs the workers' timers
	Mem     mem.Config
	Limits  Limits
	// Workers is the number of datapath workers the QPs are spread over
	// (by QPN); default 1: with one link queue, a second worker costs a
	// hand-off for every packet of its QPs.
	Workers int
	// BusyPoll is how long a datapath worker keeps polling its link and
	// rings after the last work it found, yielding the CPU between looks,
	// before it sleeps (0: it sleeps at once). A reply within it costs no
	// wake-up; the CPU it takes is the price (see worker_poll.go).
	BusyPoll time.Duration
}

// DefaultBusyPoll is vrnicd's BusyPoll unless configured, and the test
// devices' (nictest): a worker polls for 100 us after its last work,
// yielding the CPU between looks, before it sleeps. On the 2-core machine
// of docs/performance.md this took write_lat from 58 to 31 us and send_bw
// from 0.15 to 0.32 M msg/s against sleeping at once (each wake-up there
// costs a system call on each side and a context switch); 30 us kept half
// of that, 200 us and 1 ms gave no more. An idle daemon does not poll:
// only the 100 us after work.
const DefaultBusyPoll = 100 * time.Microsecond

// Device is one virtual RDMA device with one port.
type Device struct {
	cfg     Config
	log     *slog.Logger
	mem     *mem.Table
	gids    *gid.Table
	clock   clock.Clock
	link    linkState // the port's state and MTU, following the link (port.go)
	port    atomic.Pointer[senderBox]
	ctr     transport.Counters // device totals
	env     transport.Env
	out     output
	rxPool  sync.Pool
	workers []*worker
	gsi     gsi        // QP1 (gsi.go)
	mcast   mcastState // UD multicast groups (mcast.go)

	mu      sync.RWMutex
	qps     map[uint32]*QP // +checklocks:mu
	nextQPN uint32         // +checklocks:mu
	// lingering: destroyed RC QPs that still acknowledge duplicates
	// (transport.ClosedQP) until their time is up; their QPNs are not
	// handed out again meanwhile.
	lingering map[uint32]lingerQP         // +checklocks:mu
	srqs      map[*transport.SRQ]*srqBell // the SRQs, with their doorbell if watched (srq.go)
	nextSRQ   uint32
	closed    bool

	stopWorkers sync.Once
}

type senderBox struct{ s Sender }

// Errors of the device.
var (
	ErrClosed    = errors.New("nic: device closed")
	ErrNoPort    = errors.New("nic: no port attached")
	ErrLimit     = errors.New("nic: device limit reached")
	ErrBadSGID   = errors.New("nic: SGID index names no GID")
	ErrNoSuchQPN = errors.New("nic: no such QP")
	ErrNoSuchSRQ = errors.New("nic: no such SRQ")
)

// NewDevice makes a device; Attach gives it its port.
func NewDevice(cfg Config) (*Device, error) {
	if len(cfg.MAC) != 6 {
		return nil, fmt.Errorf("nic: MAC %v is not 6 bytes", cfg.MAC)
	}
	if cfg.GIDs == nil {
		cfg.GIDs = gid.New(cfg.MAC, 0)
	}
	if cfg.LinkMTU == 0 {
		cfg.LinkMTU = 1500
	}
	if cfg.Name == "" {
		cfg.Name = "vrnic0"
	}
	cfg.Limits.defaults()
	d := &Device{cfg: cfg, log: cfg.Log, gids: cfg.GIDs, clock: cfg.Clock, qps: map[uint32]*QP{}, nextQPN: 0x11,
		lingering: map[uint32]lingerQP{},
		srqs:      map[*transport.SRQ]*srqBell{}, nextSRQ: 1}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if d.clock == nil {
		d.clock = clock.System{}
	}
	d.mem = mem.NewTable(cfg.Mem)
	d.link.init(cfg.LinkMTU)
	d.out.d = d
	d.out.pool.New = func() any { b := make([]byte, bufSize); return &b }
	d.rxPool.New = func() any { return &rxItem{buf: make([]byte, bufSize)} }
	d.env = transport.Env{Clock: d.clock, Memory: d.mem, Out: &d.out, Log: d.log, Device: &d.ctr, PortMTU: d.ActiveMTU}
	n := max(cfg.Workers, 1)
	for range n {
		w, err := newWorker(d)
		if err != nil {
			for _, w := range d.workers {
				w.close()
			}
			return nil, err
		}
		d.workers = append(d.workers, w)
	}
	return d, nil
}

// AttachPoller lets datapath worker i read a socket of the port's link
// itself (run to completion: a packet for one of its QPs meets the engine
// in the link's buffer, with no hand-off); onErr learns once that the link
// failed. Worker 0 reads the port's link; with a fanout group, worker i
// its member i. Without it, the port's own reader (netstack.Stack.Run)
// calls Deliver.
func (d *Device) AttachPoller(i int, p *netstack.RxPoller, onErr func(error)) error {
	if i < 0 || i >= len(d.workers) {
		return fmt.Errorf("nic: no worker %d of %d", i, len(d.workers))
	}
	return d.workers[i].attachPoller(p, onErr)
}

// Workers is the number of datapath workers.
func (d *Device) Workers() int { return len(d.workers) }

// Sync waits until the datapath workers have handled everything queued for
// them before the call (received packets, doorbells, posts) and sent what
// that produced; tests use it instead of waiting on wall time.
func (d *Device) Sync() {
	for _, w := range d.workers {
		w.sync()
	}
}

// workerFor is the worker that owns QP qpn: the same mapping as the link's
// fanout steering (QPN modulo the worker count).
func (d *Device) workerFor(qpn uint32) *worker { return d.workers[int(qpn)%len(d.workers)] }

// Attach sets the port packets leave through.
// The port joins the multicast groups QPs are attached to.
func (d *Device) Attach(s Sender) {
	d.port.Store(&senderBox{s})
	d.rejoinGroups()
}

// Name is the device name.
func (d *Device) Name() string { return d.cfg.Name }

// Mem is the device's PD/MR/MW tables.
func (d *Device) Mem() *mem.Table { return d.mem }

// GIDs is the port's GID table.
func (d *Device) GIDs() *gid.Table { return d.gids }

// Counters are the device totals, destroyed QPs included.
func (d *Device) Counters() *transport.Counters { return &d.ctr }

// Close destroys every QP (flushing its queues) and refuses new objects.
func (d *Device) Close() error {
	d.mu.Lock()
	d.closed = true
	qps := make([]*QP, 0, len(d.qps))
	for _, q := range d.qps {
		qps = append(qps, q)
	}
	d.mu.Unlock()
	for _, q := range qps {
		q.Destroy()
	}
	d.stopWorkers.Do(func() {
		for _, w := range d.workers {
			w.close()
		}
	})
	return nil
}

// QPInfo is what `vrnicctl qp` shows.
type QPInfo struct {
	transport.Info
	Owner int // client pid, 0 if none
}

// QPs lists the live QPs by QPN.
func (d *Device) QPs() []QPInfo {
	d.mu.RLock()
	out := make([]QPInfo, 0, len(d.qps))
	for _, q := range d.qps {
		out = append(out, QPInfo{Info: q.tq.Info(), Owner: q.owner})
	}
	d.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].QPN < out[j].QPN })
	return out
}

// QP returns a live QP by number.
func (d *Device) QP(qpn uint32) (*QP, bool) {
	d.mu.RLock()
	q, ok := d.qps[qpn]
	d.mu.RUnlock()
	return q, ok
}

// ResolveAH checks an address vector's SGID index and fills its SGID; the
// path's neighbour resolution starts at once.
func (d *Device) ResolveAH(av *transport.AddressVector) error {
	e, ok := d.gids.Lookup(int(av.SGIDIndex))
	if !ok {
		return fmt.Errorf("%w: %d", ErrBadSGID, av.SGIDIndex)
	}
	av.SGID = e.GID
	if av.Port == 0 {
		av.Port = 1
	}
	dst := netip.AddrFrom16(av.DGID).Unmap()
	if dst.IsUnspecified() || !dst.IsValid() {
		return fmt.Errorf("%w: destination GID %v", transport.ErrInvalid, dst)
	}
	if (netip.AddrFrom16(av.SGID).Is4In6()) != (netip.AddrFrom16(av.DGID).Is4In6()) {
		return fmt.Errorf("%w: SGID %v and DGID %v are of different families", transport.ErrInvalid,
			netip.AddrFrom16(av.SGID).Unmap(), dst)
	}
	if p := d.port.Load(); p != nil && !d.isLocal(av.DGID) {
		p.s.Resolve(dst)
	}
	return nil
}

func (d *Device) isLocal(g [16]byte) bool {
	_, ok := d.gids.Index(gid.GID(g))
	return ok
}

var errBusy = errors.New("busy")

// DeviceAttr is what ibv_query_device reports.
type DeviceAttr struct {
	FWVer           string
	NodeGUID        uint64
	SysImageGUID    uint64
	MaxMRSize       uint64
	PageSizeCap     uint64
	VendorID        uint32
	VendorPartID    uint32
	HWVer           uint32
	MaxQP           int
	MaxQPWR         uint32
	DeviceCapFlags  uint32
	MaxSGE          uint32
	MaxSGERd        uint32
	MaxCQ           int
	MaxCQE          uint32
	MaxMR           int
	MaxPD           int
	MaxQPRdAtom     int
	MaxQPInitRdAtom int
	MaxResRdAtom    int
	AtomicCap       int
	MaxMW           int
	MaxAH           int
	MaxSRQ          int
	MaxSRQWR        uint32
	MaxSRQSGE       uint32
	MaxPKeys        int
	LocalCAAckDelay int
	PhysPortCnt     int
	MaxInlineData   uint32
	MaxMsgSize      uint64

	MaxMcastGrp           int
	MaxMcastQPAttach      int
	MaxTotalMcastQPAttach int
}

// ibv_device_cap_flags rxe reports (0x01223c76 in ibv_devinfo -v).
const rxeDeviceCapFlags = 0x01223c76

// Attr returns the device attributes, kernel rxe's where vrnicd has the
// same limits.
func (d *Device) Attr() DeviceAttr {
	l := d.cfg.Limits
	guid := nodeGUID(d.cfg.MAC)
	return DeviceAttr{
		FWVer: "0.0.0", NodeGUID: guid, SysImageGUID: guid, MaxMRSize: ^uint64(0), PageSizeCap: 0xfffff000,
		VendorID: 0xffffff, MaxQP: l.MaxQP, MaxQPWR: l.MaxQPWR, DeviceCapFlags: rxeDeviceCapFlags,
		MaxSGE: l.MaxSGE, MaxSGERd: l.MaxSGE, MaxCQ: 1 << 16, MaxCQE: l.MaxCQE, MaxMR: 1<<19 - 1, MaxPD: 1 << 16,
		MaxQPRdAtom: transport.MaxRdAtomic, MaxQPInitRdAtom: transport.MaxRdAtomic, MaxResRdAtom: 0x3f000,
		AtomicCap: 1, MaxMW: 1<<19 - 1, MaxAH: 32767, MaxSRQ: l.MaxSRQ, MaxSRQWR: l.MaxQPWR, MaxSRQSGE: l.MaxSGE,
		MaxPKeys: 1, LocalCAAckDelay: 15, PhysPortCnt: 1, MaxInlineData: l.MaxInline, MaxMsgSize: transport.MaxMessageSize,
		MaxMcastGrp: l.MaxMcastGrp, MaxMcastQPAttach: l.MaxMcastQPAttach, MaxTotalMcastQPAttach: l.MaxTotalMcastQPAttach,
	}
}

// PortAttr is what ibv_query_port reports.
type PortAttr struct {
	State        int // IBV_PORT_DOWN = 1, IBV_PORT_ACTIVE = 4
	MaxMTU       transport.MTU
	ActiveMTU    transport.MTU
	GIDTblLen    int
	PortCapFlags uint32
	MaxMsgSize   uint64
	PKeyTblLen   int
	LinkLayer    int // IBV_LINK_LAYER_ETHERNET = 2
	PhysState    int // 2 = POLLING, 3 = DISABLED, 5 = LINK_UP
}

// Port returns the attributes of port 1: its state is the link's, as
// kernel rxe's rxe_query_port gives it (PortState, PhysState).
func (d *Device) Port() PortAttr {
	st, phys := d.portState()
	return PortAttr{State: st, MaxMTU: transport.MTU4096, ActiveMTU: d.ActiveMTU(), GIDTblLen: d.gids.Size(),
		PortCapFlags: 0x00010000, MaxMsgSize: transport.MaxMessageSize, PKeyTblLen: 1, LinkLayer: 2, PhysState: phys}
}

func nodeGUID(mac net.HardwareAddr) uint64 {
	b := [8]byte{mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]}
	var g uint64
	for _, x := range b {
		g = g<<8 | uint64(x)
	}
	return g
}
