package server

import (
	"errors"
	"syscall"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/nic/gid"
	"github.com/vrnic/vrnicd/verbsock"
)

// attachMcast is ibv_attach_mcast: EINVAL for a GID that is not multicast
// or a QP that is not UD (ib_core's checks), ENOMEM past a limit (rxe).
func (c *conn) attachMcast(r *verbsock.McastReq) error {
	o, err := c.qp(r.QP)
	if err != nil {
		return err
	}
	return mcastErr(c.s.dev.AttachMcast(o.qp.Load(), gid.GID(r.GID)))
}

// detachMcast is ibv_detach_mcast: EINVAL if the QP is not attached.
func (c *conn) detachMcast(r *verbsock.McastReq) error {
	o, err := c.qp(r.QP)
	if err != nil {
		return err
	}
	return mcastErr(c.s.dev.DetachMcast(o.qp.Load(), gid.GID(r.GID)))
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
