package server

import (
	"os"
	"syscall"
	"time"

	"github.com/vrnic/vrnicd/nic/netstack"
	"github.com/vrnic/vrnicd/verbsock"
)

// Impairer is the port's fault injection; *netstack.Stack has it.
type Impairer interface {
	SetImpairment(*netstack.Impairment) error
	Impairment() (netstack.Impairment, bool)
}

var _ Impairer = (*netstack.Stack)(nil)

// impair answers op impair: anyone may ask what is in force; root and the
// daemon's user may set or end it. The daemon logs every change, since an
// impaired port must not be forgotten.
func (c *conn) impair(r *verbsock.ImpairReq) (any, error) {
	im := c.s.cfg.Impair
	if im == nil {
		return nil, errf(syscall.EOPNOTSUPP, "impair: this daemon has no port to impair")
	}
	switch r.Action {
	case verbsock.ImpairQuery:
	case verbsock.ImpairSet, verbsock.ImpairOff:
		if err := c.mayImpair(); err != nil {
			return nil, err
		}
		var cfg *netstack.Impairment
		if r.Action == verbsock.ImpairSet {
			cfg = impairmentOf(&r.Params)
		}
		if err := im.SetImpairment(cfg); err != nil {
			return nil, errf(syscall.EINVAL, "%v", err)
		}
		if cfg != nil {
			c.log.Warn("port impaired", "why", "vrnicctl impair: RoCEv2 frames dropped, duplicated, reordered, corrupted or delayed on purpose",
				"loss", cfg.Loss, "dup", cfg.Dup, "reorder", cfg.Reorder, "corrupt", cfg.Corrupt, "delay", cfg.Delay,
				"qpn", cfg.QPN, "direction", cfg.Dir.String())
		} else {
			c.log.Warn("port impairment ended")
		}
	default:
		return nil, errf(syscall.EINVAL, "impair: action %d", r.Action)
	}
	cur, on := im.Impairment()
	resp := &verbsock.ImpairResp{}
	if on {
		resp.Active, resp.Params = 1, paramsOf(&cur)
	}
	return resp, nil
}

// mayImpair: root and the daemon's own user.
func (c *conn) mayImpair() error {
	cred, err := verbsock.PeerCred(c.sock.UnixConn())
	if err != nil {
		return err
	}
	if cred.Uid == 0 || int(cred.Uid) == os.Geteuid() {
		return nil
	}
	return errf(syscall.EPERM, "impair: uid %d is neither root nor the daemon's user", cred.Uid)
}

const ppm = 1e6

func impairmentOf(p *verbsock.ImpairParams) *netstack.Impairment {
	return &netstack.Impairment{
		Loss: float64(p.LossPPM) / ppm, Dup: float64(p.DupPPM) / ppm, Reorder: float64(p.ReorderPPM) / ppm,
		Corrupt: float64(p.CorruptPPM) / ppm, Delay: time.Duration(p.DelayUS) * time.Microsecond, QPN: p.QPN,
		Dir: netstack.Direction(p.Direction),
	}
}

func paramsOf(im *netstack.Impairment) verbsock.ImpairParams {
	return verbsock.ImpairParams{
		LossPPM: uint32(im.Loss*ppm + 0.5), DupPPM: uint32(im.Dup*ppm + 0.5), ReorderPPM: uint32(im.Reorder*ppm + 0.5),
		CorruptPPM: uint32(im.Corrupt*ppm + 0.5), DelayUS: uint32(im.Delay / time.Microsecond), QPN: im.QPN,
		Direction: uint8(im.Dir),
	}
}
