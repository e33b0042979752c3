package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/nic/gid"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/ring"
	"github.com/vrnic/vrnicd/verbsock/ring/wq"
	"github.com/vrnic/vrnicd/verbsock/shm"
	"golang.org/x/sys/unix"
)

// conn is one client. Its request loop is the only writer of the handle
// tables; the QP owners read them (AH and memory handles in SQEs) through
// the Resolver methods, under mu's read lock. Nothing that waits for a
// QP's datapath worker (QP.Destroy) runs with mu held.
type conn struct {
	s    *Server
	sock *verbsock.Conn
	id   uint32
	pid  int
	log  *slog.Logger

	acct       *account            // the peer uid's usage
	held       [nRes]atomic.Uint64 // what this connection charged to acct (not memory bytes)
	privileged bool                // may set controlled Q_Keys

	version uint16      // request loop only
	ready   atomic.Bool // hello done: events may be sent

	// query_stats and list_qps page through a snapshot (request loop only).
	statsPages, listPages qpPager
	cmList                []verbsock.CMEntry // list_cm snapshot being paged (request loop only)
	resKind               uint8              // list_res: the kind of resList
	resList               []resRef           // list_res snapshot being paged (request loop only)
	clientList            []*conn            // list_clients snapshot being paged (request loop only)

	mu         sync.RWMutex
	nextHandle uint32
	pds        map[uint32]*pdObj
	mems       map[uint32]*memObj
	mrs        map[uint32]*mrObj
	mws        map[uint32]*mwObj
	cqs        map[uint32]*cqObj
	qps        map[uint32]*qpObj
	srqs       map[uint32]*srqObj
	ahs        map[uint32]*ahObj
	mrBytes    uint64
	memBytes   atomic.Int64 // mapped bytes still alive (decremented at unmap)

	events chan verbsock.EventMsg
	lost   atomic.Uint32
	cm     cmClient    // rdma_cm listeners and connections (cm.go)
	notify chan *cqObj // CQs whose completion event is to be sent
	done   chan struct{}
	// ctx ends when the client goes (or the server closes): what is
	// started for the client (a CM exchange's address resolution) ends
	// with it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type pdObj struct{ pd mem.PD }

type memObj struct {
	m    *shm.Mapping
	size int64
}

type mrObj struct {
	pd     uint32
	key    uint32
	length uint64
	heap   int64 // daemon memory charged for a fast-reg or multi-segment MR's page list
}

type mwObj struct {
	pd  uint32
	key uint32
}

type cqObj struct {
	cq      *ring.CQ
	m       *shm.Mapping
	ev      *os.File // the daemon's end of the completion channel, nil without events
	users   int      // QPs using it (guarded by conn.mu)
	pending atomic.Bool
}

type qpObj struct {
	qp     atomic.Pointer[nic.QP]
	pd     uint32
	typ    transport.QPType
	sigAll bool
	cap    transport.QPCap
	// blockSelfMcast: created with BLOCK_SELF_MCAST_LB
	blockSelfMcast bool
	mcast          map[gid.GID]bool // groups attached (attach_mcast); under conn.mu
	mcastN         atomic.Int32     // len(mcast), charged as resMcast
	scq, rcq       *cqObj
	srq            *srqObj
	sqm, rqm       *shm.Mapping
	sq             *wq.SendQueue
	heap           int64 // daemon memory charged for it (qpHeapBytes)
}

type srqObj struct {
	srq   *transport.SRQ
	pd    uint32
	users int   // under conn.mu
	heap  int64 // daemon memory charged for it (srqHeapBytes)

	// mu orders the ring's consumer: the SRQ's datapath worker moves
	// posts into the SRQ (post), the receive owners of its QPs (on their
	// own workers) free slots as they take WQEs (taken), resize_srq swaps
	// the ring.
	mu     sync.Mutex
	rq     *wq.RecvQueue
	m      *shm.Mapping
	closed bool
	// starved: the last drain stopped on a full SRQ, so posts wait in the
	// ring; the next QP to take a WQE drains them (taken), no timer.
	starved bool
}

// taken frees the slot of a WQE a QP took from the SRQ: the ring's
// published consumer index is what was read into the SRQ less what the
// SRQ still holds.
func (o *srqObj) taken() {
	o.mu.Lock()
	if !o.closed {
		o.rq.Retire(o.srq.Len())
		if o.starved {
			// The room just made takes what waited: as much as fits.
			o.starved, _ = o.drainLocked(-1)
		}
	}
	o.mu.Unlock()
}

type ahObj struct {
	av *transport.AddressVector // immutable once published
	pd mem.PD
}

func (s *Server) newConn(uc *net.UnixConn) (*conn, error) {
	cred, err := verbsock.PeerCred(uc)
	if err != nil {
		return nil, err
	}
	c := &conn{s: s, sock: verbsock.NewConn(uc), pid: int(cred.Pid), nextHandle: 1,
		pds: map[uint32]*pdObj{}, mems: map[uint32]*memObj{}, mrs: map[uint32]*mrObj{}, mws: map[uint32]*mwObj{},
		cqs: map[uint32]*cqObj{}, qps: map[uint32]*qpObj{}, srqs: map[uint32]*srqObj{}, ahs: map[uint32]*ahObj{},
		events: make(chan verbsock.EventMsg, 256), notify: make(chan *cqObj, s.limits.MaxCQ), done: make(chan struct{})}
	c.ctx, c.cancel = context.WithCancel(s.ctx)
	c.privileged = s.privileged(uc, cred)
	if err := s.register(c, cred.Uid); err != nil {
		return nil, err
	}
	c.log = s.log.With("client", c.id, "client_pid", cred.Pid, "uid", cred.Uid, "gid", cred.Gid)
	// Debug: `vrnicctl` and the like connect for one query; a client that
	// makes objects is logged when it goes (releaseAll).
	c.log.Debug("verbsock client connected")
	return c, nil
}

func (c *conn) serve() {
	defer c.s.unregister(c)
	c.wg.Add(2)
	go c.eventWriter()
	go c.notifier()
	// A connection that does not say hello in time goes (hello clears it).
	_ = c.sock.UnixConn().SetReadDeadline(time.Now().Add(c.s.cfg.HelloTimeout))
	c.loop()
	c.cancel()
	c.cleanup()
	close(c.done)
	c.wg.Wait()
	c.sock.Close()
}

func (c *conn) loop() {
	for {
		h, p, fds, err := c.sock.Read()
		if err != nil {
			var fe *verbsock.FrameError
			if errors.As(err, &fe) {
				c.replyErr(fe.Header, fe.Err)
				continue
			}
			if c.version == 0 && errors.Is(err, os.ErrDeadlineExceeded) {
				c.log.Warn("verbsock client said no hello in time; disconnecting", "timeout", c.s.cfg.HelloTimeout)
			}
			if errors.Is(err, verbsock.ErrShortFrame) {
				c.log.Warn("verbsock protocol violation: frame shorter than a header; disconnecting")
			}
			return
		}
		if !c.handle(h, p, fds) {
			return
		}
	}
}

// handle runs one request; false ends the connection (a reply could not
// be written).
func (c *conn) handle(h verbsock.Header, p []byte, fds []int) bool {
	defer verbsock.CloseFDs(fds) // every descriptor not taken by the handler
	if c.version == 0 && h.Op != verbsock.OpHello {
		return c.replyErr(h, verbsock.Errf(syscall.EPROTO, "hello first"))
	}
	if c.version != 0 && h.Version != c.version {
		return c.replyErr(h, verbsock.Errf(syscall.EPROTO, "frame version %d, connection speaks %d", h.Version, c.version))
	}
	req, err := verbsock.DecodeRequest(h, p, len(fds))
	if err != nil {
		return c.replyErr(h, err)
	}
	resp, rfds, err := c.dispatch(h.Op, req, fds)
	// rfds are the client's ends of wake-up channels: the daemon keeps
	// none of them once they are sent (shm.WakePair).
	defer verbsock.CloseFDs(rfds)
	if err != nil {
		c.log.Debug("verbsock request failed", "op", h.Op, "err", err)
		return c.replyErr(h, err)
	}
	if err := c.sock.Write(verbsock.Header{Version: h.Version, Op: h.Op, ID: h.ID, Flags: verbsock.FlagReply},
		verbsock.Encode(nil, resp), rfds, c.s.cfg.WriteTimeout); err != nil {
		c.log.Warn("verbsock reply not delivered; disconnecting", "op", h.Op, "err", err)
		return false
	}
	return true
}

func (c *conn) replyErr(h verbsock.Header, err error) bool {
	errno := verbsock.ErrnoOf(err)
	msg := err.Error()
	var e *verbsock.Error
	if errors.As(err, &e) && e.Msg != "" {
		msg = e.Msg
	}
	if len(msg) > verbsock.MaxErrorText {
		msg = msg[:verbsock.MaxErrorText]
	}
	v := h.Version
	if v == 0 {
		v = verbsock.Version
	}
	if werr := c.sock.Write(verbsock.Header{Version: v, Op: h.Op, ID: h.ID, Status: uint32(errno), Flags: verbsock.FlagReply},
		[]byte(msg), nil, c.s.cfg.WriteTimeout); werr != nil {
		c.log.Warn("verbsock error reply not delivered; disconnecting", "op", h.Op, "err", werr)
		return false
	}
	return true
}

// event queues an asynchronous event; it never blocks (owners call it).
// Events beyond the queue are counted and reported as EventLost.
func (c *conn) event(ev verbsock.EventMsg) {
	if !c.ready.Load() {
		return
	}
	select {
	case <-c.done:
		return
	default:
	}
	select {
	case c.events <- ev:
	default:
		c.lost.Add(1)
	}
}

func (c *conn) eventWriter() {
	defer c.wg.Done()
	send := func(ev verbsock.EventMsg) bool {
		err := c.sock.Write(verbsock.Header{Version: verbsock.Version, Op: verbsock.OpEvent, Flags: verbsock.FlagEvent},
			verbsock.Encode(nil, &ev), nil, c.s.cfg.WriteTimeout)
		return err == nil
	}
	for {
		select {
		case <-c.done:
			return
		case ev := <-c.events:
			if !send(ev) {
				c.sock.Close() // a client that does not read its socket is gone
				return
			}
			if n := c.lost.Swap(0); n > 0 {
				send(verbsock.EventMsg{Type: verbsock.EventLost, Count: n})
			}
		}
	}
}

// notifier sends completion events, so that QP owners only queue them;
// the send itself never blocks either (signalFile).
func (c *conn) notifier() {
	defer c.wg.Done()
	for {
		select {
		case <-c.done:
			return
		case o := <-c.notify:
			o.pending.Store(false)
			if o.ev != nil {
				signalFile(o.ev)
			}
		}
	}
}

// signalCQ is a CQ's completion event, called by a QP owner.
func (c *conn) signalCQ(o *cqObj) {
	if o.pending.CompareAndSwap(false, true) {
		select {
		case c.notify <- o: // capacity MaxCQ: each CQ is queued at most once
		default:
			o.pending.Store(false)
		}
	}
}

// signalFile sends a wake-up on the daemon's end of a wake-up channel
// (shm.Wake: MSG_DONTWAIT on a description the client never holds, so it
// cannot block).
func signalFile(f *os.File) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) { _ = shm.Wake(int(fd)) })
}

// doorbell is the daemon's end of a QP's or SRQ's doorbell channel as the
// device takes it (nic.Doorbell): the worker that owns the QP or SRQ
// waits on it with its link.
type doorbell int

func (b doorbell) FD() int                                { return int(b) }
func (b doorbell) Drain() (n int, closed bool, err error) { return shm.DrainWakes(int(b)) }
func (b doorbell) Close() error                           { return unix.Close(int(b)) }

// cleanup destroys everything the client owned, in dependency order.
func (c *conn) cleanup() {
	c.cmCleanup()
	c.mu.Lock()
	qps, srqs, ahs, mws, mrs, cqs, pds, mems := c.qps, c.srqs, c.ahs, c.mws, c.mrs, c.cqs, c.pds, c.mems
	c.qps, c.srqs, c.ahs, c.mws, c.mrs, c.cqs, c.pds, c.mems =
		map[uint32]*qpObj{}, map[uint32]*srqObj{}, map[uint32]*ahObj{}, map[uint32]*mwObj{}, map[uint32]*mrObj{},
		map[uint32]*cqObj{}, map[uint32]*pdObj{}, map[uint32]*memObj{}
	c.mu.Unlock()
	n := len(qps) + len(srqs) + len(ahs) + len(mws) + len(mrs) + len(cqs) + len(pds) + len(mems)
	t := c.s.dev.Mem()
	for _, q := range qps {
		c.destroyQP(q)
	}
	for _, s := range srqs {
		c.destroySRQ(s)
	}
	for _, a := range ahs {
		_ = t.ReleasePD(a.pd)
	}
	for _, w := range mws {
		if p := pds[w.pd]; p != nil {
			_ = t.DeallocMW(p.pd, w.key)
		}
	}
	for _, r := range mrs {
		if p := pds[r.pd]; p != nil {
			_ = t.DeregMR(p.pd, r.key)
		}
		c.unchargeBytes(r.heap)
	}
	for _, q := range cqs {
		c.destroyCQ(q)
	}
	for _, p := range pds {
		if err := t.DeallocPD(p.pd); err != nil {
			c.log.Warn("PD left behind at disconnect", "err", err)
		}
	}
	for _, m := range mems {
		m.m.Release()
	}
	c.releaseHeld()
	c.cm.mu.Lock()
	usedCM := c.cm.started
	c.cm.mu.Unlock()
	lvl := slog.LevelDebug
	if c.nextHandle > 1 || usedCM {
		lvl = slog.LevelInfo // it made objects: an application, not a query
	}
	c.log.Log(context.Background(), lvl, "verbsock client disconnected", "objects_destroyed", n, "mapped_bytes_left", c.memBytes.Load())
}

func (c *conn) destroyQP(q *qpObj) {
	if qp := q.qp.Load(); qp != nil {
		qp.Destroy() // ERR, flush into the CQ rings, owners stopped; out of its groups
	}
	c.releaseMcast(q)
	q.sqm.Release()
	if q.rqm != nil {
		q.rqm.Release()
	}
	c.unchargeBytes(q.heap)
}

func (c *conn) destroySRQ(s *srqObj) {
	// Its QPs are gone (the SRQ's users), and once DestroySRQ returns its
	// worker neither drains the ring nor watches the doorbell.
	if err := c.s.dev.DestroySRQ(s.srq); err != nil {
		c.log.Warn("SRQ left behind", "srqn", s.srq.SRQN(), "err", err)
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.m.Release()
	c.unchargeBytes(s.heap)
}

func (c *conn) destroyCQ(q *cqObj) {
	q.cq.Close()
	q.m.Release()
	if q.ev != nil {
		q.ev.Close()
	}
}

// AH implements wq.Resolver.
func (c *conn) AH(h uint32) (*transport.AddressVector, mem.PD, bool) {
	c.mu.RLock()
	a := c.ahs[h]
	c.mu.RUnlock()
	if a == nil {
		return nil, 0, false
	}
	return a.av, a.pd, true
}

// Mem implements wq.Resolver.
func (c *conn) Mem(h uint32) (mem.Backing, bool) {
	c.mu.RLock()
	m := c.mems[h]
	c.mu.RUnlock()
	if m == nil {
		return nil, false
	}
	return m.m, true
}
