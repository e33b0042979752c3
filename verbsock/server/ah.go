package server

import (
	"syscall"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/transport"

	"github.com/vrnic/vrnicd/verbsock"
)

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
	av := verbsock.AVFromWire(&r.AV)
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
	c.takePostedUD()
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

// takePostedUD has the client's UD QPs take the sends already posted in
// their rings, so that a WR posted before its AH is destroyed still finds
// it: kernel rxe copies the AV into the WQE at post time, and programs
// (mckey's sender) post, destroy the AH and leave at once.
func (c *conn) takePostedUD() {
	c.mu.Lock()
	var qps []*nic.QP
	for _, o := range c.qps {
		if q := o.qp.Load(); q != nil && o.typ == transport.QPTypeUD {
			qps = append(qps, q)
		}
	}
	c.mu.Unlock()
	for _, q := range qps {
		q.TakePosted()
	}
}
