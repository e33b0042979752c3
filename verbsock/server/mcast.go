package server

import (
	"errors"
	"syscall"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/nic/gid"
	"github.com/vrnic/vrnicd/verbsock"
)

// attachMcast is ibv_attach_mcast: EINVAL for a GID that is not multicast
// or a QP that is not UD (ib_core's checks), ENOMEM past a device limit
// (rxe), EDQUOT past the client's multicast memberships.
func (c *conn) attachMcast(r *verbsock.McastReq) error {
	o, err := c.qp(r.QP)
	if err != nil {
		return err
	}
	g := gid.GID(r.GID)
	c.mu.Lock()
	already := o.mcast[g]
	c.mu.Unlock()
	if already {
		return mcastErr(c.s.dev.AttachMcast(o.qp.Load(), g)) // attaching twice: no error, as rxe
	}
	if err := c.chargeMcast(); err != nil {
		return err
	}
	if err := c.s.dev.AttachMcast(o.qp.Load(), g); err != nil {
		c.uncharge(resMcast, 1)
		return mcastErr(err)
	}
	c.mu.Lock()
	if o.mcast == nil {
		o.mcast = map[gid.GID]bool{}
	}
	o.mcast[g] = true
	o.mcastN.Add(1)
	c.mu.Unlock()
	return nil
}

// detachMcast is ibv_detach_mcast: EINVAL if the QP is not attached.
func (c *conn) detachMcast(r *verbsock.McastReq) error {
	o, err := c.qp(r.QP)
	if err != nil {
		return err
	}
	g := gid.GID(r.GID)
	if err := c.s.dev.DetachMcast(o.qp.Load(), g); err != nil {
		return mcastErr(err)
	}
	c.mu.Lock()
	was := o.mcast[g]
	delete(o.mcast, g)
	c.mu.Unlock()
	if was && o.mcastN.Add(-1) >= 0 {
		c.uncharge(resMcast, 1)
	}
	return nil
}

// chargeMcast takes one multicast membership (a QP attachment or an
// rdma_cm join) from the client's quota and its user's.
func (c *conn) chargeMcast() error {
	if c.held[resMcast].Load() >= uint64(c.s.limits.MaxMcast) {
		return quota("multicast memberships", uint64(c.s.limits.MaxMcast))
	}
	return c.charge(resMcast, 1)
}

// releaseMcast gives back a destroyed QP's attachments (the device
// detached it).
func (c *conn) releaseMcast(o *qpObj) {
	if n := o.mcastN.Swap(0); n > 0 {
		c.uncharge(resMcast, uint64(n))
	}
}

func mcastErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, nic.ErrLimit):
		return errf(syscall.ENOMEM, "%v", err)
	}
	return errf(syscall.EINVAL, "%v", err)
}
