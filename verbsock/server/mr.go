package server

import (
	"syscall"

	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/shm"
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
	if err := c.chargeMRLocked(r.Length, 0); err != nil {
		return nil, err
	}
	key, err := c.s.dev.Mem().RegMR(p.pd, m.m, r.Offset, r.Length, r.IOVA, mem.Access(r.Access))
	if err != nil {
		c.unchargeMR(r.Length, 0)
		return nil, err
	}
	return c.addMRLocked(&mrObj{pd: r.PD, key: key, length: r.Length}), nil
}

// regMRSegs registers an MR over pages of several memory objects (§5): a C
// program's ibv_reg_mr over memory that more than one memfd backs.
func (c *conn) regMRSegs(r *verbsock.RegMRSegsReq) (any, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := c.pdLocked(r.PD)
	if err != nil {
		return nil, err
	}
	segs, err := c.segmentsLocked(r)
	if err != nil {
		return nil, err
	}
	ps := uint32(shm.PageSize)
	heap := int64(mem.SegmentsHeap(segs, ps))
	if heap > 0 && (r.IOVA-r.FirstOffset)&7 != 0 { // mem would refuse it too; say why
		return nil, errf(syscall.EINVAL, "iova %#x and first_offset %d differ mod 8 in a page-list MR", r.IOVA, r.FirstOffset)
	}
	if err := c.chargeMRLocked(r.Length, heap); err != nil {
		return nil, err
	}
	key, err := c.s.dev.Mem().RegMRSegments(p.pd, segs, ps, r.FirstOffset, r.Length, r.IOVA, mem.Access(r.Access))
	if err != nil {
		c.unchargeMR(r.Length, heap)
		return nil, err
	}
	return c.addMRLocked(&mrObj{pd: r.PD, key: key, length: r.Length, heap: heap}), nil
}

// segmentsLocked resolves a reg_mr_segs' segments to the memory objects
// they name, checking each against its object and the list against the
// bytes it must hold: [FirstOffset, FirstOffset+Length) of its pages, with
// no page to spare. Caller holds c.mu.
func (c *conn) segmentsLocked(r *verbsock.RegMRSegsReq) ([]mem.Segment, error) {
	ps := uint64(shm.PageSize)
	if r.NumSegs == 0 || r.NumSegs > verbsock.MaxRegMRSegs {
		return nil, errf(syscall.EINVAL, "%d segments (1..%d)", r.NumSegs, verbsock.MaxRegMRSegs)
	}
	for i, s := range r.Segs[r.NumSegs:] {
		if s != (verbsock.RegMRSeg{}) {
			return nil, errf(syscall.EINVAL, "segment slot %d past num_segs %d is not zero", int(r.NumSegs)+i, r.NumSegs)
		}
	}
	if r.FirstOffset >= ps {
		return nil, errf(syscall.EINVAL, "first_offset %d is not inside the first page (%d bytes)", r.FirstOffset, ps)
	}
	segs := make([]mem.Segment, r.NumSegs)
	var pages uint64
	for i, s := range r.Segs[:r.NumSegs] {
		m := c.mems[s.Mem]
		if m == nil {
			return nil, noObj("memory object", s.Mem)
		}
		size := uint64(m.size)
		switch {
		case s.Pages == 0:
			return nil, errf(syscall.EINVAL, "segment %d has no pages", i)
		case s.Offset%ps != 0:
			return nil, errf(syscall.EINVAL, "segment %d: offset %#x is not page aligned", i, s.Offset)
		case s.Offset > size || s.Pages > (size-s.Offset)/ps:
			return nil, errf(syscall.EINVAL, "segment %d: %d pages at %#x pass the end of memory object %d (%d bytes)",
				i, s.Pages, s.Offset, s.Mem, size)
		}
		segs[i] = mem.Segment{Backing: m.m, Offset: s.Offset, Pages: s.Pages}
		pages += s.Pages // at most 256 objects of 2^46 bytes: no wrap
	}
	if r.Length == 0 || r.Length > pages*ps-r.FirstOffset || pages*ps-r.FirstOffset-r.Length >= ps {
		return nil, errf(syscall.EINVAL, "length %d from offset %d does not end in the last of %d pages", r.Length, r.FirstOffset, pages)
	}
	return segs, nil
}

// chargeMRLocked counts an MR of length bytes registered, and heap bytes
// of daemon memory for its page list, against the connection's quotas and
// its uid's. Caller holds c.mu.
func (c *conn) chargeMRLocked(length uint64, heap int64) error {
	if uint32(len(c.mrs)) >= c.s.limits.MaxMR {
		return quota("MRs", uint64(c.s.limits.MaxMR))
	}
	if length > c.s.limits.MaxMRBytes-c.mrBytes {
		return quota("bytes registered", c.s.limits.MaxMRBytes)
	}
	if err := c.charge(resMR, 1); err != nil {
		return err
	}
	if err := c.charge(resMRBytes, length); err != nil {
		c.uncharge(resMR, 1)
		return err
	}
	if heap > 0 {
		if err := c.chargeBytes(heap); err != nil {
			c.uncharge(resMR, 1)
			c.uncharge(resMRBytes, length)
			return err
		}
	}
	return nil
}

// unchargeMR gives back what chargeMRLocked took.
func (c *conn) unchargeMR(length uint64, heap int64) {
	c.uncharge(resMR, 1)
	c.uncharge(resMRBytes, length)
	c.unchargeBytes(heap)
}

// addMRLocked files a registered MR under a new handle. Caller holds c.mu.
func (c *conn) addMRLocked(o *mrObj) *verbsock.RegMRResp {
	h := c.handleLocked()
	c.mrs[h] = o
	c.mrBytes += o.length
	return &verbsock.RegMRResp{MR: h, LKey: o.key, RKey: o.key}
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
	c.unchargeMR(r.length, r.heap)
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
