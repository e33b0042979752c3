package server

import (
	"fmt"

	"github.com/vrnic/vrnicd/verbsock"
)

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
	m, err := memTable.remove(c, h)
	if err != nil {
		return err
	}
	c.uncharge(resMem, 1)
	m.m.Release() // unmapped now, or when the last MR over it goes
	return nil
}

func (c *conn) pdLocked(h uint32) (*pdObj, error) {
	return pdTable.lookupLocked(c, h)
}
