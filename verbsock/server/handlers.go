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
	if h, ok := handlers[op]; ok {
		return h(c, req, fds)
	}
	return nil, nil, errf(syscall.EOPNOTSUPP, "operation %v", op)
}

// handler runs one decoded request; req has the type
// verbsock.DecodeRequest gives the op, so the adapters' assertions hold.
type handler func(c *conn, req any, fds []int) (any, []int, error)

// handlers maps each operation the daemon serves, rdma_cm's aside
// (dispatchCM), to its handler.
var handlers = map[verbsock.Op]handler{
	verbsock.OpHello: func(c *conn, req any, _ []int) (any, []int, error) {
		return c.hello(req.(*verbsock.HelloReq))
	},
	verbsock.OpCMChannel: func(c *conn, _ any, _ []int) (any, []int, error) {
		return c.cmChannelOpen() // the one rdma_cm op with a descriptor in its reply
	},
	verbsock.OpQueryDevice: func(c *conn, _ any, _ []int) (any, []int, error) {
		return c.queryDevice(), nil, nil
	},
	verbsock.OpQueryPort: reply((*conn).queryPort),
	verbsock.OpQueryGID:  reply((*conn).queryGID),
	verbsock.OpAllocPD: func(c *conn, _ any, _ []int) (any, []int, error) {
		r, err := c.allocPD()
		return r, nil, err
	},
	verbsock.OpDeallocPD: byHandle((*conn).deallocPD),
	verbsock.OpMapMem: func(c *conn, _ any, fds []int) (any, []int, error) {
		r, err := c.mapMem(fds)
		return r, nil, err
	},
	verbsock.OpUnmapMem:    byHandle((*conn).unmapMem),
	verbsock.OpRegMR:       reply((*conn).regMR),
	verbsock.OpRegMRSegs:   reply((*conn).regMRSegs),
	verbsock.OpDeregMR:     byHandle((*conn).deregMR),
	verbsock.OpAllocMR:     reply((*conn).allocMR),
	verbsock.OpAllocMW:     reply((*conn).allocMW),
	verbsock.OpDeallocMW:   byHandle((*conn).deallocMW),
	verbsock.OpBindMW:      reply((*conn).bindMW),
	verbsock.OpCreateCQ:    withFDs((*conn).createCQ),
	verbsock.OpDestroyCQ:   byHandle((*conn).destroyCQHandle),
	verbsock.OpResizeCQ:    replyFDs((*conn).resizeCQ),
	verbsock.OpReqNotifyCQ: done((*conn).reqNotifyCQ),
	verbsock.OpCreateQP:    withFDs((*conn).createQP),
	verbsock.OpModifyQP:    done((*conn).modifyQP),
	verbsock.OpQueryQP:     reply((*conn).queryQP),
	verbsock.OpDestroyQP:   byHandle((*conn).destroyQPHandle),
	verbsock.OpCreateSRQ:   withFDs((*conn).createSRQ),
	verbsock.OpModifySRQ:   done((*conn).modifySRQ),
	verbsock.OpResizeSRQ:   replyFDs((*conn).resizeSRQ),
	verbsock.OpQuerySRQ: func(c *conn, req any, _ []int) (any, []int, error) {
		r, err := c.querySRQ(req.(*verbsock.HandleReq).Handle)
		return r, nil, err
	},
	verbsock.OpDestroySRQ:  byHandle((*conn).destroySRQHandle),
	verbsock.OpCreateAH:    reply((*conn).createAH),
	verbsock.OpDestroyAH:   byHandle((*conn).destroyAH),
	verbsock.OpQueryStats:  reply((*conn).queryStats),
	verbsock.OpListQPs:     reply((*conn).listQPs),
	verbsock.OpListCM:      reply((*conn).listCM),
	verbsock.OpListRes:     reply((*conn).listRes),
	verbsock.OpListClients: reply((*conn).listClients),
	verbsock.OpQueryDaemon: func(c *conn, _ any, _ []int) (any, []int, error) {
		return c.queryDaemon(), nil, nil
	},
	verbsock.OpCapture: func(c *conn, req any, _ []int) (any, []int, error) {
		return c.capture(req.(*verbsock.CaptureReq))
	},
	verbsock.OpImpair:      reply((*conn).impair),
	verbsock.OpAttachMcast: done((*conn).attachMcast),
	verbsock.OpDetachMcast: done((*conn).detachMcast),
}

// withFDs adapts a handler that takes the request's descriptors and
// returns descriptors to send (the create calls).
func withFDs[R any](f func(*conn, R, []int) (any, []int, error)) handler {
	return func(c *conn, req any, fds []int) (any, []int, error) { return f(c, req.(R), fds) }
}

// replyFDs adapts a handler that takes the request's descriptors and
// sends none back (the resize calls).
func replyFDs[R any](f func(*conn, R, []int) (any, error)) handler {
	return func(c *conn, req any, fds []int) (any, []int, error) {
		r, err := f(c, req.(R), fds)
		return r, nil, err
	}
}

// reply adapts a handler that neither takes nor sends descriptors.
func reply[R any](f func(*conn, R) (any, error)) handler {
	return func(c *conn, req any, _ []int) (any, []int, error) {
		r, err := f(c, req.(R))
		return r, nil, err
	}
}

// done adapts a handler whose reply is empty.
func done[R any](f func(*conn, R) error) handler {
	return func(c *conn, req any, _ []int) (any, []int, error) { return &verbsock.Empty{}, nil, f(c, req.(R)) }
}

// byHandle adapts a handler of a verbsock.HandleReq whose reply is empty
// (the destroy and dealloc calls).
func byHandle(f func(*conn, uint32) error) handler {
	return func(c *conn, req any, _ []int) (any, []int, error) {
		return &verbsock.Empty{}, nil, f(c, req.(*verbsock.HandleReq).Handle)
	}
}

// handleLocked allocates the next handle; handles are never reused on a
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
