package verbs

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/ibv"
	"github.com/vrnic/vrnicd/verbsock/ring"
	"github.com/vrnic/vrnicd/verbsock/shm"
	"golang.org/x/sys/unix"
)

// QPInitAttr is what a QP is created with (ibv_qp_init_attr).
type QPInitAttr struct {
	Type     QPType
	SendCQ   *CQ
	RecvCQ   *CQ
	SRQ      *SRQ // nil: the QP has its own receive queue
	Cap      QPCap
	SQSigAll bool // every send WR completes signalled
	// BlockSelfMcastLB: the QP does not receive the multicast messages it
	// sends itself (IBV_QP_CREATE_BLOCK_SELF_MCAST_LB); other QPs of the
	// device in the group still do.
	BlockSelfMcastLB bool
}

// QP is a client's queue pair (ibv_qp), a handle to the daemon's nic.QP,
// which runs the engine's transport.QP. Its send and receive queues are rings in
// shared memory: PostSend and PostRecv write them and ring the doorbell
// only when the daemon is idle.
type QP struct {
	d    *Device
	h    uint32
	qpn  uint32
	pd   *PD
	attr QPInitAttr // Cap as the daemon granted it

	state atomic.Uint32 // last state set by Modify (the daemon may also have moved it to ERR)

	sqMu    sync.Mutex
	sq      *ring.Producer
	sqm     []byte
	rqMu    sync.Mutex
	rq      *ring.Producer
	rqm     []byte
	bell    int
	closed  bool // guarded by sqMu and rqMu both
	scratch []byte
}

// CreateQP makes a queue pair in RESET (ibv_create_qp). The daemon may
// grant larger queues than asked (QP.Cap tells).
func (pd *PD) CreateQP(attr QPInitAttr) (*QP, error) {
	d := pd.d
	op := verbsock.OpCreateQP
	if attr.SendCQ == nil || attr.RecvCQ == nil {
		return nil, verr(op, syscall.EINVAL, "QP needs a send CQ and a receive CQ")
	}
	c := attr.Cap
	sqN := ring.EntriesFor(max(c.MaxSendWR, 1))
	if sqN == 0 {
		return nil, verr(op, syscall.EINVAL, "max_send_wr %d", c.MaxSendWR)
	}
	sqm, sqfd, err := d.newRing(ring.Bytes(sqN, ring.SQEntrySize(c.MaxSendSGE, c.MaxInlineData), d.pageSize))
	if err != nil {
		return nil, err
	}
	defer unix.Close(sqfd)
	q := &QP{d: d, pd: pd, sqm: sqm, bell: -1}
	fds := []int{sqfd}
	var rqN uint32
	if attr.SRQ == nil {
		rqN = ring.EntriesFor(max(c.MaxRecvWR, 1))
		if rqN == 0 {
			unix.Munmap(sqm)
			return nil, verr(op, syscall.EINVAL, "max_recv_wr %d", c.MaxRecvWR)
		}
		rqm, rqfd, err := d.newRing(ring.Bytes(rqN, ring.RQEntrySize(max(c.MaxRecvSGE, 1)), d.pageSize))
		if err != nil {
			unix.Munmap(sqm)
			return nil, err
		}
		defer unix.Close(rqfd)
		q.rqm = rqm
		fds = append(fds, rqfd)
	}
	fail := func(err error) (*QP, error) {
		unix.Munmap(q.sqm)
		if q.rqm != nil {
			unix.Munmap(q.rqm)
		}
		return nil, err
	}
	req := &verbsock.CreateQPReq{PD: pd.h, SendCQ: attr.SendCQ.h, RecvCQ: attr.RecvCQ.h, Type: uint8(attr.Type),
		Cap: verbsock.QPCap{MaxSendWR: c.MaxSendWR, MaxRecvWR: c.MaxRecvWR, MaxSendSGE: c.MaxSendSGE,
			MaxRecvSGE: c.MaxRecvSGE, MaxInlineData: c.MaxInlineData}}
	if attr.SRQ != nil {
		req.SRQ = attr.SRQ.h
	}
	if attr.SQSigAll {
		req.SigAll = 1
	}
	if attr.BlockSelfMcastLB {
		req.Flags |= verbsock.CreateQPBlockSelfMcastLB
	}
	var resp verbsock.CreateQPResp
	rfds, err := d.call(op, req, fds, &resp)
	if err != nil {
		return fail(err)
	}
	g := resp.Cap
	if g.MaxSendWR != sqN || attr.SRQ == nil && g.MaxRecvWR != rqN || g.MaxSendSGE != c.MaxSendSGE ||
		g.MaxInlineData != c.MaxInlineData || attr.SRQ == nil && g.MaxRecvSGE != max(c.MaxRecvSGE, 1) {
		verbsock.CloseFDs(rfds)
		d.call(verbsock.OpDestroyQP, &verbsock.HandleReq{Handle: resp.QP}, nil, &verbsock.Empty{})
		return fail(verr(op, syscall.EPROTO, "daemon granted caps %+v for rings sized for %+v", g, c))
	}
	q.h, q.qpn, q.bell = resp.QP, resp.QPN, rfds[0]
	attr.Cap = QPCap{MaxSendWR: g.MaxSendWR, MaxRecvWR: g.MaxRecvWR, MaxSendSGE: g.MaxSendSGE, MaxRecvSGE: g.MaxRecvSGE,
		MaxInlineData: g.MaxInlineData}
	q.attr = attr
	q.sq, _ = ring.NewProducer(q.sqm, ring.KindSQ, sqN, ring.SQEntrySize(g.MaxSendSGE, g.MaxInlineData), d.pageSize)
	if q.rqm != nil {
		q.rq, _ = ring.NewProducer(q.rqm, ring.KindRQ, rqN, ring.RQEntrySize(g.MaxRecvSGE), d.pageSize)
	}
	d.objs.Store(q.h, q)
	return q, nil
}

// QPN is the QP number.
func (q *QP) QPN() uint32 { return q.qpn }

// Type is the QP's transport service.
func (q *QP) Type() QPType { return q.attr.Type }

// Cap is the QP's granted capabilities.
func (q *QP) Cap() QPCap { return q.attr.Cap }

// State is the last state this process moved the QP to (Query asks the
// daemon, which may have moved it to ERR since).
func (q *QP) State() QPState { return QPState(q.state.Load()) }

// Modify changes the QP's attributes (ibv_modify_qp).
func (q *QP) Modify(attr *QPAttr, mask AttrMask) error {
	w := verbsock.QPAttrToWire(attr)
	if _, err := q.d.call(verbsock.OpModifyQP, &verbsock.ModifyQPReq{QP: q.h, Mask: uint32(mask), Attr: w}, nil, &verbsock.Empty{}); err != nil {
		return err
	}
	if mask&QPAttrState != 0 {
		q.state.Store(uint32(attr.State))
	}
	return nil
}

// Query returns the QP's attributes and creation attributes (ibv_query_qp).
func (q *QP) Query() (QPAttr, QPInitAttr, error) {
	var r verbsock.QueryQPResp
	if _, err := q.d.call(verbsock.OpQueryQP, &verbsock.QueryQPReq{QP: q.h}, nil, &r); err != nil {
		return QPAttr{}, QPInitAttr{}, err
	}
	a := verbsock.QPAttrFromWire(&r.Attr)
	return a, q.attr, nil
}

// Destroy destroys the QP (ibv_destroy_qp): it goes to ERR and stops.
func (q *QP) Destroy() error {
	if _, err := q.d.call(verbsock.OpDestroyQP, &verbsock.HandleReq{Handle: q.h}, nil, &verbsock.Empty{}); err != nil {
		return err
	}
	q.release()
	return nil
}

// AttachMcast attaches the UD QP to the multicast group mgid
// (ibv_attach_mcast): it then receives the group's messages sent to QPN
// 0xFFFFFF (MulticastQPN) with its Q_Key. EINVAL for a GID that is not
// multicast or a QP that is not UD; ENOMEM past the device's limits.
// Attaching twice is no error. The device joins the IP group on its link.
func (q *QP) AttachMcast(mgid GID) error {
	_, err := q.d.call(verbsock.OpAttachMcast, &verbsock.McastReq{QP: q.h, GID: mgid}, nil, &verbsock.Empty{})
	return err
}

// DetachMcast detaches the QP from mgid (ibv_detach_mcast); EINVAL if it
// is not attached. Destroying a QP detaches it from every group.
func (q *QP) DetachMcast(mgid GID) error {
	_, err := q.d.call(verbsock.OpDetachMcast, &verbsock.McastReq{QP: q.h, GID: mgid}, nil, &verbsock.Empty{})
	return err
}

// MulticastQPN is the destination QPN of a message to a multicast group.
const MulticastQPN = 0xFFFFFF

func (q *QP) release() {
	q.sqMu.Lock()
	q.rqMu.Lock()
	defer q.sqMu.Unlock()
	defer q.rqMu.Unlock()
	if q.closed {
		return
	}
	q.closed = true
	q.d.objs.Delete(q.h)
	unix.Munmap(q.sqm)
	if q.rqm != nil {
		unix.Munmap(q.rqm)
	}
	unix.Close(q.bell)
}

// SendWR is a send work request (ibv_send_wr).
type SendWR struct {
	ID     uint64
	Opcode WROpcode
	Flags  SendFlags
	SGL    []SGE
	// Inline is the data of a SendInline WR; nil takes it from SGL (which
	// must then lie in MRs of this Device, as ibverbs copies from the SGEs).
	Inline []byte
	// ImmData is the immediate data (network order), or the rkey to
	// invalidate for WRSendWithInv and WRLocalInv.
	ImmData    uint32
	RemoteAddr uint64
	RKey       uint32
	CompareAdd uint64 // compare (CMP_AND_SWP) or add (FETCH_ADD)
	Swap       uint64
	// UD.
	AH         *AH
	RemoteQPN  uint32
	RemoteQKey uint32
	// WRFlush.
	FlushType, FlushLevel uint8
	RegMR                 *RegMRWR  // WRRegMR
	Bind                  *BindMWWR // WRBindMW
}

// RegMRWR registers a fast-reg MR (IB_WR_REG_MR). The pages are PageSize
// bytes each: either Pages, or (Pages empty) consecutive pages of Buffer
// from Offset. The MR's first byte is at IOVA mod PageSize of the first page.
type RegMRWR struct {
	MR       *MR
	Key      uint32 // the MR's new key; 0 bumps the key byte (ibv_inc_rkey)
	Buffer   *Buffer
	Offset   uint64
	Pages    []PageRef
	PageSize uint32
	IOVA     uint64
	Length   uint64
	Access   Access
}

// PageRef is one page of a REG_MR page list.
type PageRef struct {
	Buffer *Buffer
	Offset uint64
}

// BindMWWR binds a window (IBV_WR_BIND_MW); the window's rkey gets a new
// key byte at post time.
type BindMWWR struct {
	MW           *MW
	MR           *MR
	Addr, Length uint64
	Access       Access
}

// RecvWR is a receive work request (ibv_recv_wr).
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// PostError is the error of a post: the index of the first WR that was not
// posted (ibv_post_send's bad_wr); the ones before it were.
type PostError struct {
	Index int
	Err   error
}

func (e *PostError) Error() string { return fmt.Sprintf("verbs: work request %d: %v", e.Index, e.Err) }
func (e *PostError) Unwrap() error { return e.Err }

// ringBell wakes the daemon's consumer of the QP's rings (a full doorbell
// queue already holds a wake-up).
func (q *QP) ringBell() { _ = shm.Wake(q.bell) }

// PostSend posts send work requests (ibv_post_send). It writes them to the
// send queue ring and rings the doorbell if the daemon is idle; no request
// goes through the socket. With Cap().MaxSendWR WRs posted and not yet
// completed it fails with ENOMEM (a *PostError naming the first WR not
// posted); each polled completion frees a slot.
func (q *QP) PostSend(wrs ...SendWR) error {
	q.sqMu.Lock()
	defer q.sqMu.Unlock()
	if q.closed {
		return &PostError{Err: ErrClosed}
	}
	var perr error
	for i := range wrs {
		if err := q.encodeSend(&wrs[i]); err != nil {
			perr = &PostError{Index: i, Err: err}
			break
		}
	}
	if q.sq.Publish() {
		q.ringBell()
	}
	return perr
}

func (q *QP) encodeSend(wr *SendWR) error {
	const op = verbsock.OpPostSend
	if st := q.State(); st < QPStateRTS {
		return verr(op, syscall.EINVAL, "post_send in %v", st)
	}
	c := &q.attr.Cap
	if uint32(len(wr.SGL)) > c.MaxSendSGE {
		return verr(op, syscall.EINVAL, "%d SGEs, max_send_sge is %d", len(wr.SGL), c.MaxSendSGE)
	}
	if !ibv.OpcodeAllowed(q.attr.Type, wr.Opcode) {
		return verr(op, syscall.EINVAL, "%v on a %v QP", wr.Opcode, q.attr.Type)
	}
	e := ring.SQE{WRID: wr.ID, Flags: wr.Flags, Opcode: wr.Opcode, SGL: wr.SGL, ImmData: wr.ImmData, RKey: wr.RKey,
		RemoteAddr: wr.RemoteAddr, CompareAdd: wr.CompareAdd, Swap: wr.Swap, RemoteQPN: wr.RemoteQPN,
		RemoteQKey: wr.RemoteQKey, FlushType: wr.FlushType, FlushLevel: wr.FlushLevel}
	if q.attr.SQSigAll {
		e.Flags |= SendSignaled
	}
	if wr.Flags&SendInline != 0 {
		e.Inline = wr.Inline
		if e.Inline == nil {
			q.scratch = q.scratch[:0]
			for _, s := range wr.SGL {
				var ok bool
				if q.scratch, ok = q.d.gather(q.scratch, s); !ok {
					return verr(op, syscall.EINVAL, "inline SGE %+v is not in an MR of this device", s)
				}
			}
			e.Inline = q.scratch
		}
		if uint32(len(e.Inline)) > c.MaxInlineData {
			return verr(op, syscall.EINVAL, "%d bytes inline, max_inline_data is %d", len(e.Inline), c.MaxInlineData)
		}
	}
	if q.attr.Type == QPTypeUD {
		if wr.AH == nil {
			return verr(op, syscall.EINVAL, "UD send without an address handle")
		}
		e.AH = wr.AH.h
	}
	var after func()
	switch wr.Opcode {
	case WRRegMR:
		r := wr.RegMR
		if r == nil || r.MR == nil {
			return verr(op, syscall.EINVAL, "REG_MR without registration")
		}
		key := r.Key
		if key == 0 {
			key = ibv.NextKey(r.MR.LKey())
		}
		e.RegKey, e.RegAccess, e.RegPageSize, e.RegIOVA, e.RegLength = key, uint32(r.Access), r.PageSize, r.IOVA, r.Length
		if len(r.Pages) == 0 {
			if r.Buffer == nil {
				return verr(op, syscall.EINVAL, "REG_MR without pages")
			}
			e.RegMem, e.RegMemOffset = r.Buffer.h, r.Offset
		}
		for _, p := range r.Pages {
			e.RegPages = append(e.RegPages, ring.PageRef{Mem: p.Buffer.h, Offset: p.Offset})
		}
		if len(e.RegPages)*ring.PageEntry > int(c.MaxInlineData) {
			return verr(op, syscall.EINVAL, "%d REG_MR pages need %d bytes of max_inline_data", len(e.RegPages),
				len(e.RegPages)*ring.PageEntry)
		}
		after = func() { r.MR.key.Store(key) } // ib_update_fast_reg_key: the MR's key is the new one from now on
	case WRBindMW:
		b := wr.Bind
		if b == nil || b.MW == nil || b.MR == nil {
			return verr(op, syscall.EINVAL, "BIND_MW without binding")
		}
		nk := ibv.NextKey(b.MW.RKey())
		e.BindMWKey, e.BindMRKey, e.BindAddr, e.BindLength, e.BindAccess = nk, b.MR.LKey(), b.Addr, b.Length, uint32(b.Access)
		after = func() { b.MW.rkey.Store(nk) }
	}
	slot := q.sq.Next()
	if slot == nil {
		return verr(op, syscall.ENOMEM, "send queue full (%d WRs)", c.MaxSendWR)
	}
	if err := ring.PutSQE(slot, &e, c.MaxSendSGE, c.MaxInlineData); err != nil {
		q.sq.Cancel()
		return verr(op, syscall.EINVAL, "%v", err)
	}
	if after != nil {
		after()
	}
	return nil
}

// PostRecv posts receive work requests (ibv_post_recv). With
// Cap().MaxRecvWR receives posted and not yet completed it fails with
// ENOMEM.
func (q *QP) PostRecv(wrs ...RecvWR) error {
	q.rqMu.Lock()
	defer q.rqMu.Unlock()
	if q.closed {
		return &PostError{Err: ErrClosed}
	}
	if q.rq == nil {
		return &PostError{Err: verr(verbsock.OpPostRecv, syscall.EINVAL, "the QP takes its receives from its SRQ")}
	}
	var perr error
	for i := range wrs {
		if err := q.encodeRecv(&wrs[i]); err != nil {
			perr = &PostError{Index: i, Err: err}
			break
		}
	}
	if q.rq.Publish() {
		q.ringBell()
	}
	return perr
}

func (q *QP) encodeRecv(wr *RecvWR) error {
	const op = verbsock.OpPostRecv
	if st := q.State(); st == QPStateReset {
		return verr(op, syscall.EINVAL, "post_recv in RESET")
	}
	if uint32(len(wr.SGL)) > q.attr.Cap.MaxRecvSGE {
		return verr(op, syscall.EINVAL, "%d SGEs, max_recv_sge is %d", len(wr.SGL), q.attr.Cap.MaxRecvSGE)
	}
	slot := q.rq.Next()
	if slot == nil {
		return verr(op, syscall.ENOMEM, "receive queue full (%d WRs)", q.attr.Cap.MaxRecvWR)
	}
	if err := ring.PutRQE(slot, wr.ID, wr.SGL, q.attr.Cap.MaxRecvSGE); err != nil {
		q.rq.Cancel()
		return verr(op, syscall.EINVAL, "%v", err)
	}
	return nil
}

// SRQInitAttr is what an SRQ is created with (ibv_srq_init_attr).
type SRQInitAttr struct {
	MaxWR, MaxSGE uint32
	Limit         uint32 // 0: not armed
}

// SRQAttr are an SRQ's attributes (ibv_srq_attr).
type SRQAttr struct {
	MaxWR, MaxSGE, Limit uint32
}

// SRQAttrMask selects what ModifySRQ changes (enum ibv_srq_attr_mask).
type SRQAttrMask uint32

const (
	SRQAttrMaxWR SRQAttrMask = 1
	SRQAttrLimit SRQAttrMask = 2
)

// SRQ is a shared receive queue (ibv_srq).
type SRQ struct {
	d      *Device
	h      uint32
	srqn   uint32
	pd     *PD
	maxSGE uint32
	mu     sync.Mutex
	p      *ring.Producer
	m      []byte
	bell   int
	closed bool
}

// CreateSRQ makes a shared receive queue (ibv_create_srq).
func (pd *PD) CreateSRQ(attr SRQInitAttr) (*SRQ, error) {
	d := pd.d
	n := ring.EntriesFor(attr.MaxWR)
	if attr.MaxWR == 0 || n == 0 {
		return nil, verr(verbsock.OpCreateSRQ, syscall.EINVAL, "SRQ of %d WRs", attr.MaxWR)
	}
	maxSGE := max(attr.MaxSGE, 1)
	m, fd, err := d.newRing(ring.Bytes(n, ring.RQEntrySize(maxSGE), d.pageSize))
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var r verbsock.CreateSRQResp
	rfds, err := d.call(verbsock.OpCreateSRQ, &verbsock.CreateSRQReq{PD: pd.h, MaxWR: attr.MaxWR, MaxSGE: attr.MaxSGE,
		Limit: attr.Limit}, []int{fd}, &r)
	if err != nil {
		unix.Munmap(m)
		return nil, err
	}
	if r.MaxWR != n || r.MaxSGE != maxSGE {
		verbsock.CloseFDs(rfds)
		unix.Munmap(m)
		return nil, verr(verbsock.OpCreateSRQ, syscall.EPROTO, "daemon sized the SRQ %d × %d", r.MaxWR, r.MaxSGE)
	}
	s := &SRQ{d: d, h: r.SRQ, srqn: r.SRQN, pd: pd, maxSGE: maxSGE, m: m, bell: rfds[0]}
	s.p, _ = ring.NewProducer(m, ring.KindSRQ, n, ring.RQEntrySize(maxSGE), d.pageSize)
	d.objs.Store(s.h, s)
	return s, nil
}

// SRQN is the SRQ number.
func (s *SRQ) SRQN() uint32 { return s.srqn }

// PostRecv posts receive work requests to the SRQ (ibv_post_srq_recv).
func (s *SRQ) PostRecv(wrs ...RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return &PostError{Err: ErrClosed}
	}
	var perr error
	for i := range wrs {
		wr := &wrs[i]
		if uint32(len(wr.SGL)) > s.maxSGE {
			perr = &PostError{Index: i, Err: verr(verbsock.OpPostSRQRecv, syscall.EINVAL, "%d SGEs, max_sge is %d", len(wr.SGL), s.maxSGE)}
			break
		}
		slot := s.p.Next()
		if slot == nil {
			perr = &PostError{Index: i, Err: verr(verbsock.OpPostSRQRecv, syscall.ENOMEM, "SRQ ring full")}
			break
		}
		_ = ring.PutRQE(slot, wr.ID, wr.SGL, s.maxSGE)
	}
	if s.p.Publish() {
		_ = shm.Wake(s.bell)
	}
	return perr
}

// Modify resizes the SRQ and/or arms its limit (ibv_modify_srq). A new
// MaxWR moves the SRQ to a new ring of that size (rounded up to a power of
// two), keeping every WR posted and not yet taken; it fails with EINVAL
// if they do not fit. PostRecv waits for the move.
func (s *SRQ) Modify(attr SRQAttr, mask SRQAttrMask) error {
	const op = verbsock.OpModifySRQ
	if mask == 0 || mask&^(SRQAttrMaxWR|SRQAttrLimit) != 0 {
		return verr(op, syscall.EINVAL, "SRQ attribute mask %#x", uint32(mask))
	}
	if mask&SRQAttrMaxWR != 0 {
		n := ring.EntriesFor(attr.MaxWR)
		if attr.MaxWR == 0 || n == 0 || mask&SRQAttrLimit != 0 && attr.Limit > n {
			return verr(op, syscall.EINVAL, "SRQ of %d WRs, limit %d", attr.MaxWR, attr.Limit)
		}
		if err := s.resize(n); err != nil {
			return err
		}
		if mask&SRQAttrLimit == 0 {
			return nil
		}
	}
	_, err := s.d.call(op, &verbsock.ModifySRQReq{SRQ: s.h, Mask: uint32(SRQAttrLimit), Limit: attr.Limit}, nil, &verbsock.Empty{})
	return err
}

func (s *SRQ) resize(n uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	d := s.d
	esize := ring.RQEntrySize(s.maxSGE)
	m, fd, err := d.newRing(ring.Bytes(n, esize, d.pageSize))
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	p, err := ring.NewProducer(m, ring.KindSRQ, n, esize, d.pageSize)
	if err != nil {
		unix.Munmap(m)
		return verr(verbsock.OpResizeSRQ, syscall.EINVAL, "%v", err)
	}
	var r verbsock.ResizeSRQResp
	if _, err := d.call(verbsock.OpResizeSRQ, &verbsock.ResizeSRQReq{SRQ: s.h, MaxWR: n}, []int{fd}, &r); err != nil {
		unix.Munmap(m)
		return err
	}
	if err := p.Carry(r.Used); r.MaxWR != n || err != nil {
		// The daemon has moved to a ring this end cannot follow: the SRQ
		// is unusable here from now on.
		unix.Munmap(m)
		s.releaseLocked()
		return verr(verbsock.OpResizeSRQ, syscall.EPROTO, "daemon resized the SRQ to %d, carrying %d: %v", r.MaxWR, r.Used, err)
	}
	old := s.m
	s.p, s.m = p, m
	unix.Munmap(old)
	return nil
}

// Query returns the SRQ's attributes (ibv_query_srq).
func (s *SRQ) Query() (SRQAttr, error) {
	var r verbsock.QuerySRQResp
	if _, err := s.d.call(verbsock.OpQuerySRQ, &verbsock.HandleReq{Handle: s.h}, nil, &r); err != nil {
		return SRQAttr{}, err
	}
	return SRQAttr{MaxWR: r.MaxWR, MaxSGE: r.MaxSGE, Limit: r.Limit}, nil
}

// Destroy frees the SRQ (ibv_destroy_srq); EBUSY while QPs use it.
func (s *SRQ) Destroy() error {
	if _, err := s.d.call(verbsock.OpDestroySRQ, &verbsock.HandleReq{Handle: s.h}, nil, &verbsock.Empty{}); err != nil {
		return err
	}
	s.release()
	return nil
}

func (s *SRQ) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked()
}

func (s *SRQ) releaseLocked() {
	if s.closed {
		return
	}
	s.closed = true
	s.d.objs.Delete(s.h)
	unix.Munmap(s.m)
	unix.Close(s.bell)
}
