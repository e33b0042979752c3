package cm

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	"github.com/vrnic/vrnicd/transport/clock"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
)

// Config sets a Table's identity, timers and limits. Zero fields take the
// defaults the kernel uses (cma.c, cm.c, rxe), noted on each.
type Config struct {
	LocalCAGUID uint64 // our CA GUID, in REQ, REP and REJ ARIs
	HiTID       uint32 // high half of the TIDs we start (the MAD agent's hi_tid)

	CAAckDelay        uint8         // local CA ACK delay exponent; rxe's is 15
	CMResponseTimeout uint8         // exponent for both CM response timeouts of a REQ; CMA_CM_RESPONSE_TIMEOUT 20
	MaxCMRetries      uint8         // CMA_MAX_CM_RETRIES 15 (4 bits on the wire)
	PacketLifeTime    uint8         // RoCE path life time exponent; 18, what kernel 6.1 rdma_cm uses (its REQs carry Local ACK Timeout 19)
	Timewait          time.Duration // 0: the kernel's, 4.096 µs × 2^(QP timeout) rounded as cm_convert_to_ms
	SIDRTimeout       time.Duration // SIDR_REQ response timeout; 0: as a REQ's

	// MRAServiceTimeout is the service timeout of the MRA sent when a REQ
	// comes again before the consumer has answered it, as rdma_cm does for
	// its user-space listeners (CMA_CM_MRA_SETTING: a delayed MRA, 24,
	// about 69 s). NoLazyMRA turns that off.
	MRAServiceTimeout uint8
	NoLazyMRA         bool

	MaxConns     int  // connections of every state, timewait included; default 1024
	MaxHalfOpen  int  // passive connections not yet established; default 256
	DropWhenFull bool // drop a REQ past the limits instead of answering REJ "no resources"

	// NewID draws communication IDs (ib_cm's are random-looking: cyclic
	// IDs XOR a random operand). Nil uses math/rand/v2.
	NewID func() uint32
}

func (c *Config) setDefaults() {
	if c.CAAckDelay == 0 {
		c.CAAckDelay = 15
	}
	if c.CMResponseTimeout == 0 {
		c.CMResponseTimeout = 20
	}
	if c.MaxCMRetries == 0 {
		c.MaxCMRetries = 15
	}
	c.MaxCMRetries = min(c.MaxCMRetries, 15)
	c.CMResponseTimeout = min(c.CMResponseTimeout, 31)
	if c.MRAServiceTimeout == 0 {
		c.MRAServiceTimeout = 24
	}
	c.MRAServiceTimeout = min(c.MRAServiceTimeout, 31)
	if c.PacketLifeTime == 0 {
		c.PacketLifeTime = 18
	}
	if c.MaxConns <= 0 {
		c.MaxConns = 1024
	}
	if c.MaxHalfOpen <= 0 {
		c.MaxHalfOpen = 256
	}
	c.MaxHalfOpen = min(c.MaxHalfOpen, c.MaxConns)
	if c.NewID == nil {
		c.NewID = rand.Uint32
	}
}

// Counters count what the Table did that no event reports.
type Counters struct {
	Received        uint64 // CM MADs handled
	DecodeErrors    uint64 // MADs that did not decode
	Unsupported     uint64 // Get/Set requests answered "unsupported"
	Dropped         uint64 // MADs for no connection, or wrong for its state
	InvalidService  uint64 // REQs and SIDR_REQs for no listener
	RejectedFull    uint64 // REQs and SIDR_REQs past MaxConns or MaxHalfOpen
	StaleConn       uint64 // REQs/REPs that named a QP still connected or in timewait
	DupREQ          uint64 // duplicate REQs answered again or ignored
	DupREP          uint64 // duplicate REPs answered with the RTU again
	DupDREQ         uint64 // duplicate DREQs
	Retransmits     uint64 // REQ, REP, DREQ, SIDR_REQ sent again
	Timeouts        uint64 // exchanges given up after the last retry
	HalfOpenExpired uint64 // passive requests the consumer never answered
}

// Errors of the consumer API.
var (
	ErrTableFull = errors.New("cm: connection table full")
	ErrNoConn    = errors.New("cm: no such connection")
	ErrState     = errors.New("cm: connection is not in a state for that")
	ErrListening = errors.New("cm: service already listened on")
	ErrQPInUse   = errors.New("cm: QP still held by a connection (timewait not over)")
)

type remoteKey struct {
	id   uint32
	guid uint64
}

type qpnKey struct {
	qpn uint32
	gid mad.GID
}

type sidrKey struct {
	id   uint32
	peer netip.Addr
}

type listener struct {
	handle uint64
	sid    uint64
	addr   netip.Addr // zero: any
}

// Table is the CM of one port: its connections, bounded, with the indexes
// ib_cm keeps (cm.c: local IDs, remote IDs, remote QPNs, SIDR requests) and
// its listeners. It is not safe for concurrent use: one goroutine owns it,
// like the other engines of package transport.
type Table struct {
	cfg      Config
	clock    Clock
	conns    map[uint32]*Conn
	byRemote map[remoteKey]uint32
	byQPN    map[qpnKey]uint32
	bySIDR   map[sidrKey]uint32
	listens  []listener
	nextLis  uint64
	timers   clock.Heap[*Conn]
	halfOpen int
	counters Counters
}

// NewTable makes an empty Table.
func NewTable(cfg Config, clk Clock) *Table {
	cfg.setDefaults()
	return &Table{cfg: cfg, clock: clk, conns: map[uint32]*Conn{}, byRemote: map[remoteKey]uint32{},
		byQPN: map[qpnKey]uint32{}, bySIDR: map[sidrKey]uint32{}, timers: clock.NewHeap(connSlot)}
}

// Config is the Table's configuration with defaults filled in.
func (t *Table) Config() Config { return t.cfg }

// Counters is a copy of the Table's counters.
func (t *Table) Counters() Counters { return t.counters }

// Len is the number of connections held, timewait included, and how many
// of them are passive and not yet established.
func (t *Table) Len() (conns, halfOpen int) { return len(t.conns), t.halfOpen }

// Conn is a copy of connection id.
func (t *Table) Conn(id uint32) (Conn, bool) {
	c, ok := t.conns[id]
	if !ok {
		return Conn{}, false
	}
	return *c, true
}

// Listen accepts REQs and SIDR_REQs for service ID sid (ServiceID for an
// rdma_cm port), for any local address or only addr (the cma_hdr's
// destination). It returns a handle for Unlisten.
func (t *Table) Listen(sid uint64, addr netip.Addr) (uint64, error) {
	addr = addr.Unmap()
	for _, l := range t.listens {
		if l.sid == sid && (l.addr == addr || !l.addr.IsValid() || !addr.IsValid()) {
			return 0, fmt.Errorf("%w: %#x", ErrListening, sid)
		}
	}
	t.nextLis++
	t.listens = append(t.listens, listener{t.nextLis, sid, addr})
	return t.nextLis, nil
}

// Unlisten stops a listener. Requests already delivered stay.
func (t *Table) Unlisten(handle uint64) {
	for i, l := range t.listens {
		if l.handle == handle {
			t.listens = append(t.listens[:i], t.listens[i+1:]...)
			return
		}
	}
}

// match finds the listener of sid whose address is dst's, or 0.
func (t *Table) match(sid uint64, dst netip.Addr) uint64 {
	for _, l := range t.listens {
		if l.sid == sid && (!l.addr.IsValid() || l.addr == dst.Unmap()) {
			return l.handle
		}
	}
	return 0
}

// newConn allocates a connection with a fresh local ID, or fails when the
// table is full.
func (t *Table) newConn() (*Conn, error) {
	if len(t.conns) >= t.cfg.MaxConns {
		return nil, ErrTableFull
	}
	for range 16 {
		id := t.cfg.NewID()
		if _, used := t.conns[id]; id != 0 && !used {
			c := &Conn{ID: id}
			t.conns[id] = c
			return c, nil
		}
	}
	return nil, fmt.Errorf("%w: no free communication ID", ErrTableFull)
}

// qpInUse reports whether a connection other than except still holds our
// QP qpn, timewait included: a QP may carry a new connection only after
// EventTimewaitExit of the old (IBA 12.9.8.6). A scan: it runs on consumer
// calls only, never per MAD, over at most MaxConns entries.
func (t *Table) qpInUse(qpn, except uint32) bool {
	// Only connections that were given a QP have a nonzero QPN: not SIDR,
	// not a request still unanswered.
	for id, c := range t.conns {
		if id != except && qpn != 0 && c.QPN == qpn {
			return true
		}
	}
	return false
}

// setState moves c to s, keeping the half-open count.
func (t *Table) setState(c *Conn, s State) {
	was := !c.Active && isHalfOpen(c.State)
	now := !c.Active && isHalfOpen(s)
	switch {
	case was && !now:
		t.halfOpen--
	case now && !was:
		t.halfOpen++
	}
	c.State = s
}

// free forgets c and its index entries.
func (t *Table) free(c *Conn) {
	t.disarm(c)
	t.setState(c, StateIdle)
	delete(t.conns, c.ID)
	if id, ok := t.byRemote[remoteKey{c.RemoteID, c.RemoteGUID}]; ok && id == c.ID {
		delete(t.byRemote, remoteKey{c.RemoteID, c.RemoteGUID})
	}
	k := qpnKey{c.RemoteQPN, GIDFromAddr(c.Peer)}
	if id, ok := t.byQPN[k]; ok && id == c.ID {
		delete(t.byQPN, k)
	}
	if id, ok := t.bySIDR[sidrKey{c.RemoteID, c.Peer}]; ok && id == c.ID {
		delete(t.bySIDR, sidrKey{c.RemoteID, c.Peer})
	}
}

// indexRemote files c under the peer's comm ID and QPN, where duplicate and
// stale REQs find it.
func (t *Table) indexRemote(c *Conn) {
	t.byRemote[remoteKey{c.RemoteID, c.RemoteGUID}] = c.ID
	if c.QPType != mad.ServiceUC || c.RemoteQPN != 0 {
		t.byQPN[qpnKey{c.RemoteQPN, GIDFromAddr(c.Peer)}] = c.ID
	}
}

// Receive handles one MAD from QP1 of the port at from. Bad MADs are
// counted and return an error; nothing a peer sends can panic or block.
func (t *Table) Receive(from netip.Addr, b []byte, out *Output) error {
	from = from.Unmap()
	var h mad.Header
	if err := h.Decode(b); err != nil {
		t.counters.DecodeErrors++
		return err
	}
	if h.MgmtClass != mad.ClassCM {
		t.counters.DecodeErrors++
		return fmt.Errorf("%w: class %s", mad.ErrNotCM, mad.ClassName(h.MgmtClass))
	}
	if h.Method == mad.MethodGet || h.Method == mad.MethodSet {
		// ib_cm takes only Send; the kernel's MAD layer answers any other
		// request for the class (ClassPortInfo included) as unsupported.
		t.counters.Unsupported++
		t.unsupported(from, b, out)
		return nil
	}
	if h.BaseVersion != mad.BaseVersion || h.ClassVersion != mad.CMClassVersion || h.Method != mad.MethodSend {
		t.counters.DecodeErrors++
		return fmt.Errorf("cm: MAD version %d class version %d method %s", h.BaseVersion, h.ClassVersion, mad.MethodName(h.Method))
	}
	msg, err := mad.DecodeCM(h.AttributeID, b[mad.HeaderLen:])
	if err != nil {
		t.counters.DecodeErrors++
		return err
	}
	t.counters.Received++
	now := t.clock.Now()
	switch m := msg.(type) {
	case *mad.REQ:
		t.onREQ(m, from, h.TransactionID, now, out)
	case *mad.SIDRREQ:
		t.onSIDRREQ(m, from, h.TransactionID, now, out)
	case *mad.SIDRREP:
		t.onSIDRREP(m, from, out)
	case *mad.DREQ:
		t.dispatchDREQ(m, from, h.TransactionID, now, out)
	default:
		t.dispatch(msg, from, h.TransactionID, now, out)
	}
	return nil
}

// unsupported answers a Get or Set as the kernel's MAD layer does one no
// agent takes (mad.c generate_unmatched_resp): the MAD back as GetResp
// with status "unsupported method/attribute combination" (IBA 13.4.7).
func (t *Table) unsupported(from netip.Addr, b []byte, out *Output) {
	out.Sends = append(out.Sends, Send{To: from})
	s := &out.Sends[len(out.Sends)-1]
	copy(s.MAD[:], b)
	s.MAD[3] = mad.MethodGetResp
	s.MAD[4], s.MAD[5] = 0, mad.StatusUnsupportedMethodAttr
}

// dispatch finds the connection a reply names by our comm ID (its Remote
// Communication ID) and checks the peer's ID where we know it. A REJ may
// carry 0 for its sender's ID (a REJ of a REQ it never kept).
func (t *Table) dispatch(msg mad.Message, from netip.Addr, tid uint64, now time.Time, out *Output) {
	local, remote := replyIDs(msg)
	rej, isREJ := msg.(*mad.REJ)
	if isREJ && local == 0 {
		local = t.rejectedByTimeout(rej)
	}
	c, ok := t.conns[local]
	if !ok || c.Peer != from || (c.RemoteID != 0 && remote != c.RemoteID && !(isREJ && remote == 0)) {
		t.counters.Dropped++
		return
	}
	switch m := msg.(type) {
	case *mad.REP:
		t.onREP(c, m, from, tid, out)
	case *mad.RTU:
		t.onRTU(c, m, out)
	case *mad.MRA:
		t.onMRA(c, m, now)
	case *mad.REJ:
		t.onREJ(c, m, now, out)
	case *mad.DREP:
		t.onDREP(c, m, now, out)
	}
}

// rejectedByTimeout finds the request a REJ "Timeout" of an active side
// that gave up before our REP names: it knows no comm ID of ours (0), so
// it is known by its own comm ID and the CA GUID in the ARI, as the
// kernel's cm_acquire_rejected_id finds it. 0 when none.
func (t *Table) rejectedByTimeout(m *mad.REJ) uint32 {
	if m.Reason != mad.RejTimeout || m.RejectedInfoLength < 8 {
		return 0
	}
	guid := binary.BigEndian.Uint64(m.ARI[:8])
	return t.byRemote[remoteKey{m.LocalCommID, guid}]
}

// replyIDs are a reply's Remote (ours) and Local (the peer's) comm IDs.
func replyIDs(msg mad.Message) (ours, theirs uint32) {
	switch m := msg.(type) {
	case *mad.REP:
		return m.RemoteCommID, m.LocalCommID
	case *mad.RTU:
		return m.RemoteCommID, m.LocalCommID
	case *mad.MRA:
		return m.RemoteCommID, m.LocalCommID
	case *mad.REJ:
		return m.RemoteCommID, m.LocalCommID
	case *mad.DREP:
		return m.RemoteCommID, m.LocalCommID
	}
	return 0, 0
}

// dispatchDREQ answers a DREQ for a connection we do not have with a DREP
// anyway (cm.c cm_issue_drep): the peer's retries end, and it cannot be
// used to learn anything.
func (t *Table) dispatchDREQ(m *mad.DREQ, from netip.Addr, tid uint64, now time.Time, out *Output) {
	c, ok := t.conns[m.RemoteCommID]
	if !ok || c.Peer != from || c.RemoteID != m.LocalCommID {
		t.counters.Dropped++
		t.send(out, from, tid, &mad.DREP{LocalCommID: m.RemoteCommID, RemoteCommID: m.LocalCommID})
		return
	}
	t.onDREQ(c, m, tid, now, out)
}

// Listener is a copy of one listener, as Table.Listeners reports it.
type Listener struct {
	Handle    uint64
	ServiceID uint64
	Addr      netip.Addr // zero: any local address
}

// Conns is a copy of every connection held, timewait included, by local
// communication ID: what `rdma resource show cm_id` lists.
func (t *Table) Conns() []Conn {
	out := make([]Conn, 0, len(t.conns))
	for _, c := range t.conns {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b Conn) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Listeners is a copy of the listeners, in the order they were made.
func (t *Table) Listeners() []Listener {
	out := make([]Listener, len(t.listens))
	for i, l := range t.listens {
		out[i] = Listener{Handle: l.handle, ServiceID: l.sid, Addr: l.addr}
	}
	return out
}
