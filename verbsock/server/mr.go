package server

import (
	"syscall"

	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/verbsock"
)

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
