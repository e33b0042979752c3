package server

import (
	"os"
	"syscall"

	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/ring"
	"github.com/vrnic/vrnicd/verbsock/shm"
)

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
	o, err := cqTable.remove(c, h)
	if err != nil {
		return err
	}
	c.destroyCQ(o)
	c.uncharge(resCQ, 1)
	return nil
}

func (c *conn) resizeCQ(r *verbsock.ResizeCQReq, fds []int) (any, error) {
	o, err := cqTable.lookup(c, r.CQ)
	if err != nil {
		return nil, err
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
	o, err := cqTable.lookup(c, r.CQ)
	if err != nil {
		return err
	}
	if r.SolicitedOnly > 1 {
		return errf(syscall.EINVAL, "solicited_only %d", r.SolicitedOnly)
	}
	o.cq.Arm(r.SolicitedOnly == 1)
	return nil
}
