package server

import (
	"errors"
	"syscall"
	"time"

	"github.com/vrnic/vrnicd/verbsock"
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
