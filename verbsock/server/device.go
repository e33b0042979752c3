package server

import (
	"syscall"

	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/ring"
)

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
		MaxMcastGrp: uint32(a.MaxMcastGrp), MaxMcastQPAttach: uint32(a.MaxMcastQPAttach), MaxTotalMcastQPAttach: uint32(a.MaxTotalMcastQPAttach),
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
