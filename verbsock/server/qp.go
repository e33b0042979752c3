package server

import (
	"fmt"
	"syscall"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/ring"
	"github.com/vrnic/vrnicd/verbsock/ring/wq"
	"github.com/vrnic/vrnicd/verbsock/shm"
)

func qpCaps(req verbsock.QPCap, srq bool, a nic.DeviceAttr) (transport.QPCap, uint32, uint32, error) {
	if req.MaxSendWR > a.MaxQPWR || req.MaxRecvWR > a.MaxQPWR || req.MaxSendSGE > a.MaxSGE || req.MaxRecvSGE > a.MaxSGE ||
		req.MaxInlineData > a.MaxInlineData {
		return transport.QPCap{}, 0, 0, errf(syscall.EINVAL, "QP caps %+v exceed the device's (%d WRs, %d SGEs, %d inline)",
			req, a.MaxQPWR, a.MaxSGE, a.MaxInlineData)
	}
	sqN := ring.EntriesFor(max(req.MaxSendWR, 1))
	var rqN uint32
	cp := transport.QPCap{MaxSendWR: sqN, MaxSendSGE: req.MaxSendSGE, MaxInlineData: req.MaxInlineData}
	if !srq {
		rqN = ring.EntriesFor(max(req.MaxRecvWR, 1))
		cp.MaxRecvWR, cp.MaxRecvSGE = rqN, max(req.MaxRecvSGE, 1)
	}
	if sqN > a.MaxQPWR || rqN > a.MaxQPWR {
		return transport.QPCap{}, 0, 0, errf(syscall.EINVAL, "QP of %d/%d WRs exceeds max_qp_wr %d", sqN, rqN, a.MaxQPWR)
	}
	return cp, sqN, rqN, nil
}

func wireCap(c transport.QPCap) verbsock.QPCap {
	return verbsock.QPCap{MaxSendWR: c.MaxSendWR, MaxRecvWR: c.MaxRecvWR, MaxSendSGE: c.MaxSendSGE,
		MaxRecvSGE: c.MaxRecvSGE, MaxInlineData: c.MaxInlineData}
}

func (c *conn) createQP(r *verbsock.CreateQPReq, fds []int) (any, []int, error) {
	if err := checkQPReq(r); err != nil {
		return nil, nil, err
	}
	p, scq, rcq, srq, err := c.qpRefs(r)
	if err != nil {
		return nil, nil, err
	}
	cp, sqN, rqN, err := qpCaps(r.Cap, srq != nil, c.s.dev.Attr())
	if err != nil {
		return nil, nil, err
	}
	if want := 2 - b2i(srq != nil); len(fds) != want {
		return nil, nil, errf(syscall.EBADF, "create_qp takes %d ring memfds (SQ%s), got %d", want,
			map[bool]string{true: "", false: ", RQ"}[srq != nil], len(fds))
	}
	if err := c.charge(resQP, 1); err != nil {
		return nil, nil, err
	}
	typ := transport.QPType(r.Type)
	o := &qpObj{pd: r.PD, typ: typ, sigAll: r.SigAll == 1, cap: cp, scq: scq, rcq: rcq, srq: srq,
		blockSelfMcast: r.Flags&verbsock.CreateQPBlockSelfMcastLB != 0}
	bfd := -1 // the client's end of the doorbell
	o.heap = qpHeapBytes(cp, srq != nil, typ, c.s.cfg.MaxFastRegPages)
	if err := c.chargeBytes(o.heap); err != nil {
		c.uncharge(resQP, 1)
		return nil, nil, fmt.Errorf("QP of %d/%d WRs: %w", sqN, rqN, err)
	}
	fail := func(err error) (any, []int, error) {
		c.uncharge(resQP, 1)
		c.unchargeBytes(o.heap)
		if o.sqm != nil {
			o.sqm.Release()
		}
		if o.rqm != nil {
			o.rqm.Release()
		}
		if bfd >= 0 {
			verbsock.CloseFDs([]int{bfd})
		}
		return nil, nil, err
	}
	if err := c.mapQPRings(o, fds, sqN, rqN); err != nil {
		return fail(err)
	}
	c.mu.Lock()
	h := c.handleLocked()
	c.mu.Unlock()
	cfg, err := c.qpConfig(o, p, h, sqN, rqN)
	if err != nil {
		return fail(err)
	}
	own, peer, err := shm.WakePair()
	if err != nil {
		return fail(err)
	}
	bfd = peer
	// The QP's worker sleeps on the doorbell itself (nic.Doorbell); the
	// device closes the daemon's end with the QP, or now if this fails.
	cfg.Doorbell = doorbell(own)
	qp, err := c.s.dev.CreateQP(cfg)
	if err != nil {
		return fail(err)
	}
	o.qp.Store(qp)
	c.addQP(h, o)
	c.log.Debug("QP created", "qp", h, "qpn", qp.QPN(), "type", typ)
	return &verbsock.CreateQPResp{QP: h, QPN: qp.QPN(), Cap: wireCap(cp)}, []int{bfd}, nil
}

// checkQPReq checks what create_qp asks for before anything is looked up:
// a QP type the device serves and a boolean sq_sig_all.
func checkQPReq(r *verbsock.CreateQPReq) error {
	switch transport.QPType(r.Type) {
	case transport.QPTypeRC, transport.QPTypeUC, transport.QPTypeUD:
	default:
		return errf(syscall.EINVAL, "QP type %d (RC 2, UC 3, UD 4)", r.Type)
	}
	if r.SigAll > 1 {
		return errf(syscall.EINVAL, "sq_sig_all %d", r.SigAll)
	}
	if r.Flags&^verbsock.CreateQPBlockSelfMcastLB != 0 {
		return errf(syscall.EOPNOTSUPP, "QP creation flags %#x (vrnicd has BLOCK_SELF_MCAST_LB, %#x)", r.Flags,
			verbsock.CreateQPBlockSelfMcastLB)
	}
	return nil
}

// qpRefs looks up the PD, CQs and SRQ a create_qp names and checks the
// client's QP quota, all under one hold of c.mu.
func (c *conn) qpRefs(r *verbsock.CreateQPReq) (p *pdObj, scq, rcq *cqObj, srq *srqObj, err error) {
	c.mu.Lock()
	p, err = c.pdLocked(r.PD)
	scq, rcq = c.cqs[r.SendCQ], c.cqs[r.RecvCQ]
	if r.SRQ != 0 {
		srq = c.srqs[r.SRQ]
	}
	full := uint32(len(c.qps)) >= c.s.limits.MaxQP
	c.mu.Unlock()
	switch {
	case err != nil:
	case scq == nil:
		err = noObj("CQ", r.SendCQ)
	case rcq == nil:
		err = noObj("CQ", r.RecvCQ)
	case r.SRQ != 0 && srq == nil:
		err = noObj("SRQ", r.SRQ)
	case srq != nil && srq.pd != r.PD:
		err = errf(syscall.EINVAL, "SRQ %d is in another PD", r.SRQ)
	case full:
		err = quota("QPs", uint64(c.s.limits.MaxQP))
	}
	return p, scq, rcq, srq, err
}

// mapQPRings maps the client's SQ ring (fds[0]) and, without an SRQ, its
// RQ ring (fds[1]) into o; the caller releases what was mapped on error.
func (c *conn) mapQPRings(o *qpObj, fds []int, sqN, rqN uint32) error {
	var err error
	sqes := ring.SQEntrySize(o.cap.MaxSendSGE, o.cap.MaxInlineData)
	if o.sqm, err = c.mapFD(fds[0], int64(ring.Bytes(sqN, sqes, shm.PageSize))); err != nil {
		return fmt.Errorf("SQ ring: %w", err)
	}
	if o.srq == nil {
		if o.rqm, err = c.mapFD(fds[1], int64(ring.Bytes(rqN, ring.RQEntrySize(o.cap.MaxRecvSGE), shm.PageSize))); err != nil {
			return fmt.Errorf("RQ ring: %w", err)
		}
	}
	return nil
}

// qpConfig makes the daemon ends of o's rings (a ring found corrupt moves
// QP h to ERR and tells the client) and the device's configuration of it.
func (c *conn) qpConfig(o *qpObj, p *pdObj, h, sqN, rqN uint32) (nic.QPConfig, error) {
	cp := o.cap
	onCorrupt := func(why string) {
		c.log.Warn("client ring corrupt; QP to ERR", "qp", h, "reason", why)
		if qp := o.qp.Load(); qp != nil {
			_ = qp.Modify(&transport.QPAttr{State: transport.StateErr}, transport.AttrState)
		}
		c.event(verbsock.EventMsg{Type: verbsock.EventQPFatal, Handle: h})
	}
	sq, err := wq.NewSendQueue(wq.SQConfig{Mem: o.sqm.Bytes(), Entries: sqN, MaxSGE: cp.MaxSendSGE,
		MaxInline: cp.MaxInlineData, MaxPages: c.s.cfg.MaxFastRegPages, PageSize: shm.PageSize, PD: p.pd,
		Resolver: c, OnCorrupt: onCorrupt})
	if err != nil {
		return nic.QPConfig{}, errf(syscall.EINVAL, "%v", err)
	}
	o.sq = sq
	cfg := nic.QPConfig{Type: o.typ, PD: p.pd, Cap: cp, SendCQ: o.scq.cq, RecvCQ: o.rcq.cq, SQSigAll: o.sigAll, SQ: sq,
		Owner: c.pid, OnEvent: func(ev transport.Event) { c.event(verbsock.EventMsg{Type: eventType(ev), Handle: h}) },
		BlockSelfMcastLB: o.blockSelfMcast}
	if o.srq != nil {
		cfg.SRQ = o.srq.srq
	} else {
		rq, err := wq.NewRecvQueue(wq.RQConfig{Mem: o.rqm.Bytes(), Entries: rqN, MaxSGE: cp.MaxRecvSGE,
			PageSize: shm.PageSize, OnCorrupt: onCorrupt})
		if err != nil {
			return nic.QPConfig{}, errf(syscall.EINVAL, "%v", err)
		}
		cfg.RQ = rq
	}
	return cfg, nil
}

// addQP enters a created QP on the connection and counts it as a user of
// its CQs and SRQ.
func (c *conn) addQP(h uint32, o *qpObj) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.qps[h] = o
	o.scq.users++
	o.rcq.users++
	if o.srq != nil {
		o.srq.users++
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// eventType maps the engine's events to ibv_event_type.
func eventType(ev transport.Event) verbsock.EventType {
	switch ev {
	case transport.EventQPFatal:
		return verbsock.EventQPFatal
	case transport.EventQPReqErr:
		return verbsock.EventQPReqErr
	case transport.EventQPAccessErr:
		return verbsock.EventQPAccessErr
	case transport.EventCommEst:
		return verbsock.EventCommEst
	case transport.EventSQDrained:
		return verbsock.EventSQDrained
	case transport.EventQPLastWQE:
		return verbsock.EventQPLastWQE
	case transport.EventSRQLimit:
		return verbsock.EventSRQLimit
	}
	return verbsock.EventQPFatal
}

func (c *conn) qp(h uint32) (*qpObj, error) {
	return qpTable.lookup(c, h)
}

func (c *conn) modifyQP(r *verbsock.ModifyQPReq) error {
	o, err := c.qp(r.QP)
	if err != nil {
		return err
	}
	if r.Mask >= 1<<21 {
		return errf(syscall.EINVAL, "attribute mask %#x", r.Mask)
	}
	a := verbsock.QPAttrFromWire(&r.Attr)
	if err := c.checkQKey(transport.AttrMask(r.Mask), a.QKey); err != nil {
		return err
	}
	qp := o.qp.Load()
	if err := qp.Modify(&a, transport.AttrMask(r.Mask)); err != nil {
		return errf(syscall.EINVAL, "%v", err)
	}
	if transport.AttrMask(r.Mask)&transport.AttrState != 0 && a.State == transport.StateReset {
		// RESET empties the rings too, so the QP takes its full depth again.
		if err := qp.DiscardPosted(); err != nil {
			return errf(syscall.EIO, "%v", err)
		}
	}
	return nil
}

func (c *conn) queryQP(r *verbsock.QueryQPReq) (any, error) {
	o, err := c.qp(r.QP)
	if err != nil {
		return nil, err
	}
	a, _ := o.qp.Load().Query()
	return &verbsock.QueryQPResp{Attr: verbsock.QPAttrToWire(&a), Cap: wireCap(o.cap), Type: uint8(o.typ), SigAll: uint8(b2i(o.sigAll))}, nil
}

func (c *conn) destroyQPHandle(h uint32) error {
	o, err := qpTable.remove(c, h)
	if err != nil {
		return err
	}
	c.destroyQP(o)
	c.uncharge(resQP, 1)
	c.mu.Lock()
	o.scq.users--
	o.rcq.users--
	if o.srq != nil {
		o.srq.users--
	}
	c.mu.Unlock()
	return nil
}
