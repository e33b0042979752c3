package server

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/ring"
	"github.com/vrnic/vrnicd/verbsock/shm"
)

var (
	errf = verbsock.Errf
)

func noObj(kind string, h uint32) error {
	return errf(syscall.ENOENT, "no %s with handle %d on this connection", kind, h)
}

func quota(what string, limit uint64) error {
	return errf(syscall.EDQUOT, "client limit reached: %d %s", limit, what)
}

// dispatch runs a decoded request. It returns the reply payload and the
// descriptors to send with it (the client's ends of wake-up channels,
// closed once sent).
func (c *conn) dispatch(op verbsock.Op, req any, fds []int) (any, []int, error) {
	if resp, ok, err := c.dispatchCM(op, req); ok {
		return resp, nil, err
	}
	switch op {
	case verbsock.OpHello:
		return c.hello(req.(*verbsock.HelloReq))
	case verbsock.OpQueryDevice:
		return c.queryDevice(), nil, nil
	case verbsock.OpQueryPort:
		r, err := c.queryPort(req.(*verbsock.QueryPortReq))
		return r, nil, err
	case verbsock.OpQueryGID:
		r, err := c.queryGID(req.(*verbsock.QueryGIDReq))
		return r, nil, err
	case verbsock.OpAllocPD:
		r, err := c.allocPD()
		return r, nil, err
	case verbsock.OpDeallocPD:
		return &verbsock.Empty{}, nil, c.deallocPD(req.(*verbsock.HandleReq).Handle)
	case verbsock.OpMapMem:
		r, err := c.mapMem(fds)
		return r, nil, err
	case verbsock.OpUnmapMem:
		return &verbsock.Empty{}, nil, c.unmapMem(req.(*verbsock.HandleReq).Handle)
	case verbsock.OpRegMR:
		r, err := c.regMR(req.(*verbsock.RegMRReq))
		return r, nil, err
	case verbsock.OpDeregMR:
		return &verbsock.Empty{}, nil, c.deregMR(req.(*verbsock.HandleReq).Handle)
	case verbsock.OpAllocMR:
		r, err := c.allocMR(req.(*verbsock.AllocMRReq))
		return r, nil, err
	case verbsock.OpAllocMW:
		r, err := c.allocMW(req.(*verbsock.AllocMWReq))
		return r, nil, err
	case verbsock.OpDeallocMW:
		return &verbsock.Empty{}, nil, c.deallocMW(req.(*verbsock.HandleReq).Handle)
	case verbsock.OpBindMW:
		r, err := c.bindMW(req.(*verbsock.BindMWReq))
		return r, nil, err
	case verbsock.OpCreateCQ:
		return c.createCQ(req.(*verbsock.CreateCQReq), fds)
	case verbsock.OpDestroyCQ:
		return &verbsock.Empty{}, nil, c.destroyCQHandle(req.(*verbsock.HandleReq).Handle)
	case verbsock.OpResizeCQ:
		r, err := c.resizeCQ(req.(*verbsock.ResizeCQReq), fds)
		return r, nil, err
	case verbsock.OpReqNotifyCQ:
		return &verbsock.Empty{}, nil, c.reqNotifyCQ(req.(*verbsock.ReqNotifyCQReq))
	case verbsock.OpCreateQP:
		return c.createQP(req.(*verbsock.CreateQPReq), fds)
	case verbsock.OpModifyQP:
		return &verbsock.Empty{}, nil, c.modifyQP(req.(*verbsock.ModifyQPReq))
	case verbsock.OpQueryQP:
		r, err := c.queryQP(req.(*verbsock.QueryQPReq))
		return r, nil, err
	case verbsock.OpDestroyQP:
		return &verbsock.Empty{}, nil, c.destroyQPHandle(req.(*verbsock.HandleReq).Handle)
	case verbsock.OpCreateSRQ:
		return c.createSRQ(req.(*verbsock.CreateSRQReq), fds)
	case verbsock.OpModifySRQ:
		return &verbsock.Empty{}, nil, c.modifySRQ(req.(*verbsock.ModifySRQReq))
	case verbsock.OpResizeSRQ:
		r, err := c.resizeSRQ(req.(*verbsock.ResizeSRQReq), fds)
		return r, nil, err
	case verbsock.OpQuerySRQ:
		r, err := c.querySRQ(req.(*verbsock.HandleReq).Handle)
		return r, nil, err
	case verbsock.OpDestroySRQ:
		return &verbsock.Empty{}, nil, c.destroySRQHandle(req.(*verbsock.HandleReq).Handle)
	case verbsock.OpCreateAH:
		r, err := c.createAH(req.(*verbsock.CreateAHReq))
		return r, nil, err
	case verbsock.OpDestroyAH:
		return &verbsock.Empty{}, nil, c.destroyAH(req.(*verbsock.HandleReq).Handle)
	case verbsock.OpQueryStats:
		r, err := c.queryStats(req.(*verbsock.PageReq))
		return r, nil, err
	case verbsock.OpListQPs:
		r, err := c.listQPs(req.(*verbsock.PageReq))
		return r, nil, err
	case verbsock.OpCapture:
		return c.capture(req.(*verbsock.CaptureReq))
	}
	return nil, nil, errf(syscall.EOPNOTSUPP, "operation %v", op)
}

// handle allocates the next handle; handles are never reused on a
// connection. Caller holds c.mu.
func (c *conn) handleLocked() uint32 {
	h := c.nextHandle
	c.nextHandle++
	return h
}

func (c *conn) hello(r *verbsock.HelloReq) (any, []int, error) {
	if c.version != 0 {
		return nil, nil, errf(syscall.EPROTO, "hello already exchanged")
	}
	if r.Magic != verbsock.Magic {
		return nil, nil, errf(syscall.EPROTO, "bad magic %#x", r.Magic)
	}
	if r.MinVersion > verbsock.Version || r.MaxVersion < verbsock.Version {
		return nil, nil, errf(syscall.EPROTONOSUPPORT, "client speaks versions %d..%d, daemon %d", r.MinVersion, r.MaxVersion, verbsock.Version)
	}
	c.version = verbsock.Version
	c.ready.Store(true)
	_ = c.sock.UnixConn().SetReadDeadline(time.Time{}) // the hello timeout is met
	resp := &verbsock.HelloResp{Version: verbsock.Version, PageSize: uint32(shm.PageSize), ClientID: c.id, Limits: c.s.limits}
	copy(resp.DevName[:], c.s.dev.Name())
	return resp, nil, nil
}

func (c *conn) queryDevice() *verbsock.DeviceAttr {
	a := c.s.dev.Attr()
	r := &verbsock.DeviceAttr{
		NodeGUID: a.NodeGUID, SysImageGUID: a.SysImageGUID, MaxMRSize: a.MaxMRSize, PageSizeCap: a.PageSizeCap,
		MaxMsgSize: a.MaxMsgSize, VendorID: a.VendorID, VendorPartID: a.VendorPartID, HWVer: a.HWVer,
		MaxQP: uint32(a.MaxQP), MaxQPWR: a.MaxQPWR, DeviceCapFlags: a.DeviceCapFlags, MaxSGE: a.MaxSGE, MaxSGERd: a.MaxSGERd,
		MaxCQ: uint32(a.MaxCQ), MaxCQE: min(a.MaxCQE, ring.MaxEntries), MaxMR: uint32(a.MaxMR), MaxPD: uint32(a.MaxPD),
		MaxQPRdAtom: uint32(a.MaxQPRdAtom), MaxQPInitRdAtom: uint32(a.MaxQPInitRdAtom), MaxResRdAtom: uint32(a.MaxResRdAtom),
		AtomicCap: uint32(a.AtomicCap), MaxMW: uint32(a.MaxMW), MaxAH: uint32(a.MaxAH), MaxSRQ: uint32(a.MaxSRQ),
		MaxSRQWR: a.MaxSRQWR, MaxSRQSGE: a.MaxSRQSGE, MaxPKeys: uint32(a.MaxPKeys), LocalCAAckDelay: uint32(a.LocalCAAckDelay),
		PhysPortCnt: uint32(a.PhysPortCnt), MaxInlineData: a.MaxInlineData, MaxFastRegPageListLen: uint32(c.s.cfg.MaxFastRegPages),
	}
	copy(r.FWVer[:], a.FWVer)
	return r
}

func checkPort(p uint32) error {
	if p != 1 {
		return errf(syscall.EINVAL, "port %d (the device has port 1)", p)
	}
	return nil
}

func (c *conn) queryPort(r *verbsock.QueryPortReq) (any, error) {
	if err := checkPort(r.Port); err != nil {
		return nil, err
	}
	p := c.s.dev.Port()
	return &verbsock.PortAttr{State: uint32(p.State), MaxMTU: uint32(p.MaxMTU), ActiveMTU: uint32(p.ActiveMTU),
		GIDTblLen: uint32(p.GIDTblLen), PortCapFlags: p.PortCapFlags, PKeyTblLen: uint32(p.PKeyTblLen),
		LinkLayer: uint32(p.LinkLayer), PhysState: uint32(p.PhysState), MaxMsgSize: p.MaxMsgSize}, nil
}

func (c *conn) queryGID(r *verbsock.QueryGIDReq) (any, error) {
	if err := checkPort(r.Port); err != nil {
		return nil, err
	}
	g := c.s.dev.GIDs()
	if int64(r.Index) >= int64(g.Size()) {
		return nil, errf(syscall.EINVAL, "GID index %d, table has %d entries", r.Index, g.Size())
	}
	resp := &verbsock.QueryGIDResp{}
	if e, ok := g.Lookup(int(r.Index)); ok {
		resp.GID, resp.Type = e.GID, uint32(e.Type)
	}
	return resp, nil
}

func (c *conn) allocPD() (any, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if uint32(len(c.pds)) >= c.s.limits.MaxPD {
		return nil, quota("PDs", uint64(c.s.limits.MaxPD))
	}
	if err := c.charge(resPD, 1); err != nil {
		return nil, err
	}
	pd, err := c.s.dev.Mem().AllocPD()
	if err != nil {
		c.uncharge(resPD, 1)
		return nil, err
	}
	h := c.handleLocked()
	c.pds[h] = &pdObj{pd: pd}
	return &verbsock.AllocPDResp{PD: h}, nil
}

func (c *conn) deallocPD(h uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pds[h]
	if p == nil {
		return noObj("PD", h)
	}
	if err := c.s.dev.Mem().DeallocPD(p.pd); err != nil {
		return fmt.Errorf("PD %d still has MRs, MWs, QPs, SRQs or AHs: %w", h, err)
	}
	delete(c.pds, h)
	c.uncharge(resPD, 1)
	return nil
}

func shmErr(err error) error {
	switch {
	case errors.Is(err, shm.ErrNotMemfd):
		return errf(syscall.EBADF, "%v", err)
	case errors.Is(err, shm.ErrNotSealed):
		return errf(syscall.EPERM, "%v", err)
	case errors.Is(err, shm.ErrNotShmem):
		return errf(syscall.EINVAL, "%v", err)
	}
	return errf(syscall.EINVAL, "%v", err)
}

// mapFD checks and maps a client memfd against the byte quota. want > 0
// requires that exact size.
func (c *conn) mapFD(fd int, want int64) (*shm.Mapping, error) {
	n, err := shm.Check(fd, want, 1<<46)
	if err != nil {
		return nil, shmErr(err)
	}
	if err := c.chargeBytes(n); err != nil {
		return nil, err
	}
	m, err := shm.Map(fd, n, n)
	if err != nil {
		c.unchargeBytes(n)
		return nil, shmErr(err)
	}
	m.OnUnmap = func() { c.unchargeBytes(n) }
	return m, nil
}

func (c *conn) mapMem(fds []int) (any, error) {
	c.mu.Lock()
	full := uint32(len(c.mems)) >= c.s.limits.MaxMem
	c.mu.Unlock()
	if full {
		return nil, quota("memory objects", uint64(c.s.limits.MaxMem))
	}
	if err := c.charge(resMem, 1); err != nil {
		return nil, err
	}
	m, err := c.mapFD(fds[0], 0)
	if err != nil {
		c.uncharge(resMem, 1)
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.handleLocked()
	c.mems[h] = &memObj{m: m, size: int64(m.Len())}
	return &verbsock.MapMemResp{Mem: h, Size: uint64(m.Len())}, nil
}

func (c *conn) unmapMem(h uint32) error {
	c.mu.Lock()
	m := c.mems[h]
	delete(c.mems, h)
	c.mu.Unlock()
	if m == nil {
		return noObj("memory object", h)
	}
	c.uncharge(resMem, 1)
	m.m.Release() // unmapped now, or when the last MR over it goes
	return nil
}

func (c *conn) pdLocked(h uint32) (*pdObj, error) {
	p := c.pds[h]
	if p == nil {
		return nil, noObj("PD", h)
	}
	return p, nil
}

func (c *conn) regMR(r *verbsock.RegMRReq) (any, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := c.pdLocked(r.PD)
	if err != nil {
		return nil, err
	}
	m := c.mems[r.Mem]
	if m == nil {
		return nil, noObj("memory object", r.Mem)
	}
	if uint32(len(c.mrs)) >= c.s.limits.MaxMR {
		return nil, quota("MRs", uint64(c.s.limits.MaxMR))
	}
	if r.Length > c.s.limits.MaxMRBytes-c.mrBytes {
		return nil, quota("bytes registered", c.s.limits.MaxMRBytes)
	}
	if err := c.charge(resMR, 1); err != nil {
		return nil, err
	}
	if err := c.charge(resMRBytes, r.Length); err != nil {
		c.uncharge(resMR, 1)
		return nil, err
	}
	key, err := c.s.dev.Mem().RegMR(p.pd, m.m, r.Offset, r.Length, r.IOVA, mem.Access(r.Access))
	if err != nil {
		c.uncharge(resMR, 1)
		c.uncharge(resMRBytes, r.Length)
		return nil, err
	}
	h := c.handleLocked()
	c.mrs[h] = &mrObj{pd: r.PD, key: key, length: r.Length}
	c.mrBytes += r.Length
	return &verbsock.RegMRResp{MR: h, LKey: key, RKey: key}, nil
}

func (c *conn) deregMR(h uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.mrs[h]
	if r == nil {
		return noObj("MR", h)
	}
	if err := c.s.dev.Mem().DeregMR(c.pds[r.pd].pd, r.key); err != nil {
		return err
	}
	delete(c.mrs, h)
	c.mrBytes -= r.length
	c.uncharge(resMR, 1)
	c.uncharge(resMRBytes, r.length)
	c.unchargeBytes(r.heap)
	return nil
}

func (c *conn) allocMR(r *verbsock.AllocMRReq) (any, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := c.pdLocked(r.PD)
	if err != nil {
		return nil, err
	}
	if uint32(len(c.mrs)) >= c.s.limits.MaxMR {
		return nil, quota("MRs", uint64(c.s.limits.MaxMR))
	}
	if r.MaxPages == 0 || int64(r.MaxPages) > int64(c.s.cfg.MaxFastRegPages) {
		return nil, errf(syscall.EINVAL, "fast-reg MR of %d pages (max %d)", r.MaxPages, c.s.cfg.MaxFastRegPages)
	}
	if err := c.charge(resMR, 1); err != nil {
		return nil, err
	}
	heap := regMRBytes(int(r.MaxPages)) // the page list a REG_MR gives it
	if err := c.chargeBytes(heap); err != nil {
		c.uncharge(resMR, 1)
		return nil, err
	}
	key, err := c.s.dev.Mem().AllocMR(p.pd, int(r.MaxPages))
	if err != nil {
		c.uncharge(resMR, 1)
		c.unchargeBytes(heap)
		return nil, err
	}
	h := c.handleLocked()
	c.mrs[h] = &mrObj{pd: r.PD, key: key, heap: heap}
	return &verbsock.RegMRResp{MR: h, LKey: key, RKey: key}, nil
}

func (c *conn) allocMW(r *verbsock.AllocMWReq) (any, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := c.pdLocked(r.PD)
	if err != nil {
		return nil, err
	}
	if uint32(len(c.mws)) >= c.s.limits.MaxMW {
		return nil, quota("MWs", uint64(c.s.limits.MaxMW))
	}
	if r.Type != uint32(mem.MWType1) && r.Type != uint32(mem.MWType2B) {
		return nil, errf(syscall.EINVAL, "MW type %d", r.Type)
	}
	if err := c.charge(resMW, 1); err != nil {
		return nil, err
	}
	key, err := c.s.dev.Mem().AllocMW(p.pd, mem.MWType(r.Type))
	if err != nil {
		c.uncharge(resMW, 1)
		return nil, err
	}
	h := c.handleLocked()
	c.mws[h] = &mwObj{pd: r.PD, key: key}
	return &verbsock.AllocMWResp{MW: h, RKey: key}, nil
}

func (c *conn) deallocMW(h uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.mws[h]
	if w == nil {
		return noObj("MW", h)
	}
	if err := c.s.dev.Mem().DeallocMW(c.pds[w.pd].pd, w.key); err != nil {
		return err
	}
	delete(c.mws, h)
	c.uncharge(resMW, 1)
	return nil
}

// bindMW binds a type 1 window synchronously, bumping its key byte
// (ibv_bind_mw's new rkey); length 0 unbinds.
func (c *conn) bindMW(r *verbsock.BindMWReq) (any, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.mws[r.MW]
	if w == nil {
		return nil, noObj("MW", r.MW)
	}
	t := c.s.dev.Mem()
	var mrKey uint32
	if r.Length > 0 {
		m := c.mrs[r.MR]
		if m == nil {
			return nil, noObj("MR", r.MR)
		}
		info, ok := t.Query(m.key)
		if !ok {
			return nil, noObj("MR", r.MR)
		}
		mrKey = info.Key
	}
	info, ok := t.Query(w.key)
	if !ok {
		return nil, noObj("MW", r.MW)
	}
	nk := mem.NextKey(info.Key)
	if err := t.BindMW(c.pds[w.pd].pd, nk, mrKey, r.Addr, r.Length, mem.Access(r.Access)); err != nil {
		return nil, err
	}
	w.key = nk
	return &verbsock.BindMWResp{RKey: nk}, nil
}

func (c *conn) createCQ(r *verbsock.CreateCQReq, fds []int) (any, []int, error) {
	attr := c.s.dev.Attr()
	if r.CQE == 0 || r.CQE > min(attr.MaxCQE, ring.MaxEntries) {
		return nil, nil, errf(syscall.EINVAL, "CQ of %d entries (1..%d)", r.CQE, min(attr.MaxCQE, ring.MaxEntries))
	}
	if r.Flags&^verbsock.CQWithEvents != 0 {
		return nil, nil, errf(syscall.EINVAL, "CQ flags %#x", r.Flags)
	}
	c.mu.Lock()
	full := uint32(len(c.cqs)) >= c.s.limits.MaxCQ
	c.mu.Unlock()
	if full {
		return nil, nil, quota("CQs", uint64(c.s.limits.MaxCQ))
	}
	if err := c.charge(resCQ, 1); err != nil {
		return nil, nil, err
	}
	created := false
	defer func() {
		if !created {
			c.uncharge(resCQ, 1)
		}
	}()
	n := ring.EntriesFor(r.CQE)
	m, err := c.mapFD(fds[0], int64(ring.Bytes(n, ring.CQESize, shm.PageSize)))
	if err != nil {
		return nil, nil, err
	}
	o := &cqObj{m: m}
	var rfds []int
	if r.Flags&verbsock.CQWithEvents != 0 {
		own, peer, err := shm.WakePair()
		if err != nil {
			m.Release()
			return nil, nil, err
		}
		o.ev = os.NewFile(uintptr(own), "vrnic-cq-event")
		rfds = []int{peer}
	}
	c.mu.Lock()
	h := c.handleLocked()
	c.mu.Unlock()
	cfg := ring.CQConfig{Mem: m.Bytes(), Entries: n, PageSize: shm.PageSize,
		OnError: func(why string) {
			c.log.Warn("CQ in error", "cq", h, "reason", why)
			c.event(verbsock.EventMsg{Type: verbsock.EventCQErr, Handle: h})
		}}
	if o.ev != nil {
		cfg.Signal = func() { c.signalCQ(o) }
	}
	o.cq, err = ring.NewCQ(cfg)
	if err != nil {
		m.Release()
		if o.ev != nil {
			o.ev.Close()
		}
		verbsock.CloseFDs(rfds)
		return nil, nil, errf(syscall.EINVAL, "%v", err)
	}
	c.mu.Lock()
	c.cqs[h] = o
	c.mu.Unlock()
	created = true
	return &verbsock.CreateCQResp{CQ: h, Entries: n}, rfds, nil
}

func (c *conn) destroyCQHandle(h uint32) error {
	c.mu.Lock()
	o := c.cqs[h]
	if o == nil {
		c.mu.Unlock()
		return noObj("CQ", h)
	}
	if o.users > 0 {
		c.mu.Unlock()
		return errf(syscall.EBUSY, "CQ %d is used by %d QPs", h, o.users)
	}
	delete(c.cqs, h)
	c.mu.Unlock()
	c.destroyCQ(o)
	c.uncharge(resCQ, 1)
	return nil
}

func (c *conn) resizeCQ(r *verbsock.ResizeCQReq, fds []int) (any, error) {
	c.mu.Lock()
	o := c.cqs[r.CQ]
	c.mu.Unlock()
	if o == nil {
		return nil, noObj("CQ", r.CQ)
	}
	max := min(c.s.dev.Attr().MaxCQE, ring.MaxEntries)
	if r.CQE == 0 || r.CQE > max {
		return nil, errf(syscall.EINVAL, "CQ of %d entries (1..%d)", r.CQE, max)
	}
	n := ring.EntriesFor(r.CQE)
	m, err := c.mapFD(fds[0], int64(ring.Bytes(n, ring.CQESize, shm.PageSize)))
	if err != nil {
		return nil, err
	}
	if err := o.cq.Resize(m.Bytes(), n, shm.PageSize); err != nil {
		m.Release()
		return nil, errf(syscall.EINVAL, "%v", err)
	}
	old := o.m
	c.mu.Lock()
	o.m = m
	c.mu.Unlock()
	old.Release()
	return &verbsock.ResizeCQResp{Entries: n}, nil
}

func (c *conn) reqNotifyCQ(r *verbsock.ReqNotifyCQReq) error {
	c.mu.Lock()
	o := c.cqs[r.CQ]
	c.mu.Unlock()
	if o == nil {
		return noObj("CQ", r.CQ)
	}
	if r.SolicitedOnly > 1 {
		return errf(syscall.EINVAL, "solicited_only %d", r.SolicitedOnly)
	}
	o.cq.Arm(r.SolicitedOnly == 1)
	return nil
}

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
	typ := transport.QPType(r.Type)
	switch typ {
	case transport.QPTypeRC, transport.QPTypeUC, transport.QPTypeUD:
	default:
		return nil, nil, errf(syscall.EINVAL, "QP type %d (RC 2, UC 3, UD 4)", r.Type)
	}
	if r.SigAll > 1 || r.Reserved != 0 {
		return nil, nil, errf(syscall.EINVAL, "sq_sig_all %d", r.SigAll)
	}
	c.mu.Lock()
	p, err := c.pdLocked(r.PD)
	scq, rcq := c.cqs[r.SendCQ], c.cqs[r.RecvCQ]
	var srq *srqObj
	if r.SRQ != 0 {
		srq = c.srqs[r.SRQ]
	}
	full := uint32(len(c.qps)) >= c.s.limits.MaxQP
	c.mu.Unlock()
	switch {
	case err != nil:
		return nil, nil, err
	case scq == nil:
		return nil, nil, noObj("CQ", r.SendCQ)
	case rcq == nil:
		return nil, nil, noObj("CQ", r.RecvCQ)
	case r.SRQ != 0 && srq == nil:
		return nil, nil, noObj("SRQ", r.SRQ)
	case srq != nil && srq.pd != r.PD:
		return nil, nil, errf(syscall.EINVAL, "SRQ %d is in another PD", r.SRQ)
	case full:
		return nil, nil, quota("QPs", uint64(c.s.limits.MaxQP))
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
	o := &qpObj{pd: r.PD, typ: typ, sigAll: r.SigAll == 1, cap: cp, scq: scq, rcq: rcq, srq: srq}
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
		if o.bell != nil {
			o.bell.f.Close()
			verbsock.CloseFDs([]int{bfd})
		}
		return nil, nil, err
	}
	sqes := ring.SQEntrySize(cp.MaxSendSGE, cp.MaxInlineData)
	if o.sqm, err = c.mapFD(fds[0], int64(ring.Bytes(sqN, sqes, shm.PageSize))); err != nil {
		return fail(fmt.Errorf("SQ ring: %w", err))
	}
	if srq == nil {
		if o.rqm, err = c.mapFD(fds[1], int64(ring.Bytes(rqN, ring.RQEntrySize(cp.MaxRecvSGE), shm.PageSize))); err != nil {
			return fail(fmt.Errorf("RQ ring: %w", err))
		}
	}
	b, peer, err := newBell()
	if err != nil {
		return fail(err)
	}
	o.bell, bfd = b, peer
	c.mu.Lock()
	h := c.handleLocked()
	c.mu.Unlock()
	onCorrupt := func(why string) {
		c.log.Warn("client ring corrupt; QP to ERR", "qp", h, "reason", why)
		if qp := o.qp.Load(); qp != nil {
			_ = qp.Modify(&transport.QPAttr{State: transport.StateErr}, transport.AttrState)
		}
		c.event(verbsock.EventMsg{Type: verbsock.EventQPFatal, Handle: h})
	}
	sq, err := ring.NewSendQueue(ring.SQConfig{Mem: o.sqm.Bytes(), Entries: sqN, MaxSGE: cp.MaxSendSGE,
		MaxInline: cp.MaxInlineData, MaxPages: c.s.cfg.MaxFastRegPages, PageSize: shm.PageSize, PD: p.pd,
		Resolver: c, OnCorrupt: onCorrupt})
	if err != nil {
		return fail(errf(syscall.EINVAL, "%v", err))
	}
	o.sq = sq
	cfg := nic.QPConfig{Type: typ, PD: p.pd, Cap: cp, SendCQ: scq.cq, RecvCQ: rcq.cq, SQSigAll: o.sigAll, SQ: sq,
		Owner: c.pid, OnEvent: func(ev transport.Event) { c.event(verbsock.EventMsg{Type: eventType(ev), Handle: h}) }}
	if srq != nil {
		cfg.SRQ = srq.srq
	} else {
		rq, err := ring.NewRecvQueue(ring.RQConfig{Mem: o.rqm.Bytes(), Entries: rqN, MaxSGE: cp.MaxRecvSGE,
			PageSize: shm.PageSize, OnCorrupt: onCorrupt})
		if err != nil {
			return fail(errf(syscall.EINVAL, "%v", err))
		}
		cfg.RQ = rq
	}
	qp, err := c.s.dev.CreateQP(cfg)
	if err != nil {
		return fail(err)
	}
	o.qp.Store(qp)
	c.mu.Lock()
	c.qps[h] = o
	scq.users++
	rcq.users++
	if srq != nil {
		srq.users++
	}
	c.mu.Unlock()
	go b.run(func() { qp.NotifySend(); qp.NotifyRecv() })
	c.log.Debug("QP created", "qp", h, "qpn", qp.QPN(), "type", typ)
	return &verbsock.CreateQPResp{QP: h, QPN: qp.QPN(), Cap: wireCap(cp)}, []int{bfd}, nil
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
	c.mu.RLock()
	o := c.qps[h]
	c.mu.RUnlock()
	if o == nil {
		return nil, noObj("QP", h)
	}
	return o, nil
}

// QPAttrFromWire and QPAttrToWire convert between the wire form and the
// engine's attributes.
func QPAttrFromWire(w *verbsock.QPAttr) transport.QPAttr {
	return transport.QPAttr{
		State: transport.QPState(w.State), CurState: transport.QPState(w.CurState), PathMTU: transport.MTU(w.PathMTU),
		QKey: w.QKey, RQPSN: w.RQPSN, SQPSN: w.SQPSN, DestQPN: w.DestQPN, AccessFlags: mem.Access(w.AccessFlags),
		AV: AVFromWire(&w.AV), PKeyIndex: w.PKeyIndex, Port: w.Port, MaxRdAtomic: w.MaxRdAtomic,
		MaxDestRdAtomic: w.MaxDestRdAtomic, MinRNRTimer: w.MinRNRTimer, Timeout: w.Timeout, RetryCnt: w.RetryCnt,
		RNRRetry: w.RNRRetry, SQDrainNotify: w.SQDrainNotify != 0,
	}
}

func QPAttrToWire(a *transport.QPAttr) verbsock.QPAttr {
	w := verbsock.QPAttr{
		State: uint8(a.State), CurState: uint8(a.CurState), PathMTU: uint8(a.PathMTU), Port: a.Port, QKey: a.QKey,
		RQPSN: a.RQPSN, SQPSN: a.SQPSN, DestQPN: a.DestQPN, AccessFlags: uint32(a.AccessFlags), PKeyIndex: a.PKeyIndex,
		MaxRdAtomic: a.MaxRdAtomic, MaxDestRdAtomic: a.MaxDestRdAtomic, MinRNRTimer: a.MinRNRTimer, Timeout: a.Timeout,
		RetryCnt: a.RetryCnt, RNRRetry: a.RNRRetry, AV: AVToWire(&a.AV),
	}
	if a.SQDrainNotify {
		w.SQDrainNotify = 1
	}
	return w
}

func AVFromWire(w *verbsock.AV) transport.AddressVector {
	return transport.AddressVector{DGID: w.DGID, SGID: w.SGID, SGIDIndex: w.SGIDIndex, HopLimit: w.HopLimit,
		TrafficClass: w.TrafficClass, FlowLabel: w.FlowLabel, SL: w.SL, Port: w.Port}
}

func AVToWire(a *transport.AddressVector) verbsock.AV {
	return verbsock.AV{DGID: a.DGID, SGID: a.SGID, SGIDIndex: a.SGIDIndex, HopLimit: a.HopLimit,
		TrafficClass: a.TrafficClass, FlowLabel: a.FlowLabel, SL: a.SL, Port: a.Port}
}

func (c *conn) modifyQP(r *verbsock.ModifyQPReq) error {
	o, err := c.qp(r.QP)
	if err != nil {
		return err
	}
	if r.Mask >= 1<<21 {
		return errf(syscall.EINVAL, "attribute mask %#x", r.Mask)
	}
	a := QPAttrFromWire(&r.Attr)
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
	return &verbsock.QueryQPResp{Attr: QPAttrToWire(&a), Cap: wireCap(o.cap), Type: uint8(o.typ), SigAll: uint8(b2i(o.sigAll))}, nil
}

func (c *conn) destroyQPHandle(h uint32) error {
	c.mu.Lock()
	o := c.qps[h]
	if o == nil {
		c.mu.Unlock()
		return noObj("QP", h)
	}
	delete(c.qps, h)
	c.mu.Unlock()
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

func (c *conn) createSRQ(r *verbsock.CreateSRQReq, fds []int) (any, []int, error) {
	a := c.s.dev.Attr()
	if r.MaxWR == 0 || r.MaxWR > a.MaxSRQWR || r.MaxSGE > a.MaxSRQSGE || r.Limit > r.MaxWR {
		return nil, nil, errf(syscall.EINVAL, "SRQ of %d WRs × %d SGEs, limit %d (max %d × %d)", r.MaxWR, r.MaxSGE, r.Limit,
			a.MaxSRQWR, a.MaxSRQSGE)
	}
	c.mu.Lock()
	p, err := c.pdLocked(r.PD)
	full := uint32(len(c.srqs)) >= c.s.limits.MaxSRQ
	c.mu.Unlock()
	if err != nil {
		return nil, nil, err
	}
	if full {
		return nil, nil, quota("SRQs", uint64(c.s.limits.MaxSRQ))
	}
	n := ring.EntriesFor(r.MaxWR)
	maxSGE := max(r.MaxSGE, 1)
	heap := srqHeapBytes(n, maxSGE)
	if err := c.charge(resSRQ, 1); err != nil {
		return nil, nil, err
	}
	if err := c.chargeBytes(heap); err != nil {
		c.uncharge(resSRQ, 1)
		return nil, nil, err
	}
	created := false
	defer func() {
		if !created {
			c.uncharge(resSRQ, 1)
			c.unchargeBytes(heap)
		}
	}()
	m, err := c.mapFD(fds[0], int64(ring.Bytes(n, ring.RQEntrySize(maxSGE), shm.PageSize)))
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	h := c.handleLocked()
	c.mu.Unlock()
	o := &srqObj{pd: r.PD, m: m, heap: heap}
	o.rq, err = c.srqRing(h, m, n, maxSGE)
	if err != nil {
		m.Release()
		return nil, nil, errf(syscall.EINVAL, "%v", err)
	}
	srq, err := c.s.dev.CreateSRQ(p.pd, n, maxSGE, func() { c.event(verbsock.EventMsg{Type: verbsock.EventSRQLimit, Handle: h}) })
	if err != nil {
		m.Release()
		return nil, nil, err
	}
	if r.Limit > 0 {
		_ = srq.Modify(0, false, r.Limit, true)
	}
	srq.OnTake(o.taken)
	o.srq = srq
	b, bfd, err := newBell()
	if err != nil {
		_ = c.s.dev.DestroySRQ(srq)
		m.Release()
		return nil, nil, err
	}
	o.bell = b
	c.mu.Lock()
	c.srqs[h] = o
	c.mu.Unlock()
	created = true
	go b.run(func() { c.drainSRQ(o) })
	return &verbsock.CreateSRQResp{SRQ: h, SRQN: srq.SRQN(), MaxWR: n, MaxSGE: maxSGE}, []int{bfd}, nil
}

// srqRing is the daemon end of an SRQ's ring in m.
func (c *conn) srqRing(h uint32, m *shm.Mapping, n, maxSGE uint32) (*ring.RecvQueue, error) {
	return ring.NewRecvQueue(ring.RQConfig{Mem: m.Bytes(), Entries: n, MaxSGE: maxSGE, PageSize: shm.PageSize,
		OnCorrupt: func(why string) {
			c.log.Warn("client SRQ ring corrupt", "srq", h, "reason", why)
			c.event(verbsock.EventMsg{Type: verbsock.EventSRQErr, Handle: h})
		}})
}

// drainSRQ moves posted receives from the SRQ ring into the SRQ. A slot
// goes back when a QP takes its WQE (srqObj.taken), so the ring never
// holds more than the SRQ's max_wr WQEs not yet taken and the SRQ has room
// for all of them: the ring bounds even a hostile producer so (its index
// may run at most a ring ahead of the slots handed back, or the ring is
// corrupt). Were the SRQ full all the same, the drain would retry on a
// short timer, as nothing else would wake it.
func (c *conn) drainSRQ(o *srqObj) {
	for {
		o.mu.Lock()
		full := !o.closed && o.drainLocked()
		o.mu.Unlock()
		if !full || o.bell.stop.Load() {
			return
		}
		sleepBackoff()
	}
}

// drainLocked moves what the ring holds into the SRQ, under o.mu, and
// reports whether it stopped on a full SRQ.
func (o *srqObj) drainLocked() (full bool) {
	var wr transport.RecvWR
	for o.rq.Peek(&wr) {
		if err := o.srq.Post(&wr); errors.Is(err, transport.ErrFull) {
			return true
		}
		// Any other error is a WQE the SRQ refuses; it is dropped (the ring
		// decoder already bounded its SGEs, so this does not happen), and
		// its slot goes back at once.
		o.rq.Consume()
		o.rq.Retire(o.srq.Len())
	}
	return false
}

// resizeSRQ moves an SRQ to a new ring of max_wr entries (ibv_modify_srq
// with IBV_SRQ_MAX_WR): what the old ring still holds goes into the SRQ,
// and the WQEs the SRQ holds keep their slots in the new ring (Carry).
func (c *conn) resizeSRQ(r *verbsock.ResizeSRQReq, fds []int) (any, error) {
	o, err := c.srq(r.SRQ)
	if err != nil {
		return nil, err
	}
	if r.MaxWR == 0 || r.MaxWR > c.s.dev.Attr().MaxSRQWR {
		return nil, errf(syscall.EINVAL, "SRQ max_wr %d (1..%d)", r.MaxWR, c.s.dev.Attr().MaxSRQWR)
	}
	n := ring.EntriesFor(r.MaxWR)
	_, maxSGE, _ := o.srq.Attr()
	// The SRQ's private ring grows with it: charge the difference first.
	grow := max(srqHeapBytes(n, maxSGE)-o.heap, 0)
	if err := c.chargeBytes(grow); err != nil {
		return nil, err
	}
	m, err := c.mapFD(fds[0], int64(ring.Bytes(n, ring.RQEntrySize(maxSGE), shm.PageSize)))
	if err != nil {
		c.unchargeBytes(grow)
		return nil, err
	}
	rq, err := c.srqRing(r.SRQ, m, n, maxSGE)
	if err != nil {
		m.Release()
		c.unchargeBytes(grow)
		return nil, errf(syscall.EINVAL, "%v", err)
	}
	old := o.m
	used, err := o.moveTo(rq, m, n)
	if err != nil {
		m.Release()
		c.unchargeBytes(grow)
		return nil, errf(syscall.EINVAL, "%v", err)
	}
	o.heap += grow // a shrunk SRQ keeps its larger charge (conservative)
	old.Release()
	return &verbsock.ResizeSRQResp{MaxWR: n, Used: used}, nil
}

// moveTo resizes the SRQ to n, moves what the old ring still holds into
// it and switches to rq (in m), carrying over the WQEs the SRQ holds.
func (o *srqObj) moveTo(rq *ring.RecvQueue, m *shm.Mapping, n uint32) (used uint32, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if held := o.srq.Len() + o.rq.Pending(); uint32(held) > n {
		return 0, fmt.Errorf("SRQ max_wr %d below the %d WRs posted and not yet taken", n, held)
	}
	if err := o.srq.Modify(n, true, 0, false); err != nil {
		return 0, err
	}
	o.drainLocked() // it has room: checked above
	used = uint32(o.srq.Len())
	if err := rq.Carry(used); err != nil {
		return 0, err
	}
	o.rq, o.m = rq, m
	return used, nil
}

func (c *conn) srq(h uint32) (*srqObj, error) {
	c.mu.RLock()
	o := c.srqs[h]
	c.mu.RUnlock()
	if o == nil {
		return nil, noObj("SRQ", h)
	}
	return o, nil
}

func (c *conn) modifySRQ(r *verbsock.ModifySRQReq) error {
	o, err := c.srq(r.SRQ)
	if err != nil {
		return err
	}
	if r.Mask == 0 || r.Mask&^(verbsock.SRQMaxWR|verbsock.SRQLimit) != 0 {
		return errf(syscall.EINVAL, "SRQ attribute mask %#x", r.Mask)
	}
	if r.Mask&verbsock.SRQMaxWR != 0 {
		// The ring that carries posts bounds them: a new size needs a new ring.
		return errf(syscall.EINVAL, "SRQ max_wr changes with resize_srq (a new ring), not modify_srq")
	}
	if err := o.srq.Modify(0, false, r.Limit, true); err != nil {
		return errf(syscall.EINVAL, "%v", err)
	}
	return nil
}

func (c *conn) querySRQ(h uint32) (any, error) {
	o, err := c.srq(h)
	if err != nil {
		return nil, err
	}
	mw, ms, l := o.srq.Attr()
	return &verbsock.QuerySRQResp{MaxWR: mw, MaxSGE: ms, Limit: l}, nil
}

func (c *conn) destroySRQHandle(h uint32) error {
	c.mu.Lock()
	o := c.srqs[h]
	if o == nil {
		c.mu.Unlock()
		return noObj("SRQ", h)
	}
	if o.users > 0 {
		c.mu.Unlock()
		return errf(syscall.EBUSY, "SRQ %d is used by %d QPs", h, o.users)
	}
	delete(c.srqs, h)
	c.mu.Unlock()
	c.destroySRQ(o)
	c.uncharge(resSRQ, 1)
	return nil
}

func (c *conn) createAH(r *verbsock.CreateAHReq) (any, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := c.pdLocked(r.PD)
	if err != nil {
		return nil, err
	}
	if uint32(len(c.ahs)) >= c.s.limits.MaxAH {
		return nil, quota("AHs", uint64(c.s.limits.MaxAH))
	}
	av := AVFromWire(&r.AV)
	if err := c.s.dev.ResolveAH(&av); err != nil {
		return nil, errf(syscall.EINVAL, "%v", err)
	}
	if err := c.charge(resAH, 1); err != nil {
		return nil, err
	}
	if err := c.s.dev.Mem().HoldPD(p.pd); err != nil {
		c.uncharge(resAH, 1)
		return nil, err
	}
	h := c.handleLocked()
	c.ahs[h] = &ahObj{av: &av, pd: p.pd}
	return &verbsock.CreateAHResp{AH: h}, nil
}

func (c *conn) destroyAH(h uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.ahs[h]
	if a == nil {
		return noObj("AH", h)
	}
	delete(c.ahs, h) // WRs already decoded keep their AV
	c.uncharge(resAH, 1)
	return c.s.dev.Mem().ReleasePD(a.pd)
}
