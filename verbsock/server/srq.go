package server

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/ring"
	"github.com/vrnic/vrnicd/verbsock/ring/wq"
	"github.com/vrnic/vrnicd/verbsock/shm"
)

func (c *conn) createSRQ(r *verbsock.CreateSRQReq, fds []int) (any, []int, error) {
	a := c.s.dev.Attr()
	if r.MaxWR == 0 || r.MaxWR > a.MaxSRQWR || r.MaxSGE > a.MaxSRQSGE || r.Limit > r.MaxWR {
		return nil, nil, errf(syscall.EINVAL, "SRQ of %d WRs × %d SGEs, limit %d (max %d × %d)", r.MaxWR, r.MaxSGE, r.Limit,
			a.MaxSRQWR, a.MaxSRQSGE)
	}
	c.mu.Lock()
	p, err := c.pdLocked(r.PD)
	full := uint32(len(c.srqs)) >= c.s.limits.MaxSRQ
	c.mu.Unlock()
	if err != nil {
		return nil, nil, err
	}
	if full {
		return nil, nil, quota("SRQs", uint64(c.s.limits.MaxSRQ))
	}
	n := ring.EntriesFor(r.MaxWR)
	maxSGE := max(r.MaxSGE, 1)
	heap := srqHeapBytes(n, maxSGE)
	if err := c.charge(resSRQ, 1); err != nil {
		return nil, nil, err
	}
	if err := c.chargeBytes(heap); err != nil {
		c.uncharge(resSRQ, 1)
		return nil, nil, err
	}
	created := false
	defer func() {
		if !created {
			c.uncharge(resSRQ, 1)
			c.unchargeBytes(heap)
		}
	}()
	m, err := c.mapFD(fds[0], int64(ring.Bytes(n, ring.RQEntrySize(maxSGE), shm.PageSize)))
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	h := c.handleLocked()
	c.mu.Unlock()
	o := &srqObj{pd: r.PD, m: m, heap: heap}
	o.rq, err = c.srqRing(h, m, n, maxSGE)
	if err != nil {
		m.Release()
		return nil, nil, errf(syscall.EINVAL, "%v", err)
	}
	srq, err := c.s.dev.CreateSRQ(p.pd, n, maxSGE, func() { c.event(verbsock.EventMsg{Type: verbsock.EventSRQLimit, Handle: h}) })
	if err != nil {
		m.Release()
		return nil, nil, err
	}
	if r.Limit > 0 {
		_ = srq.Modify(0, false, r.Limit, true)
	}
	srq.OnTake(o.taken)
	o.srq = srq
	own, peer, err := shm.WakePair()
	if err != nil {
		_ = c.s.dev.DestroySRQ(srq)
		m.Release()
		return nil, nil, err
	}
	// The SRQ's worker sleeps on the doorbell with its link and QPs'
	// (nic.Device.WatchSRQ); the device closes the daemon's end with the
	// SRQ, or now if this fails.
	if err := c.s.dev.WatchSRQ(srq, doorbell(own), o.post); err != nil {
		verbsock.CloseFDs([]int{peer})
		_ = c.s.dev.DestroySRQ(srq)
		m.Release()
		return nil, nil, err
	}
	c.mu.Lock()
	c.srqs[h] = o
	c.mu.Unlock()
	created = true
	return &verbsock.CreateSRQResp{SRQ: h, SRQN: srq.SRQN(), MaxWR: n, MaxSGE: maxSGE}, []int{peer}, nil
}

// srqRing is the daemon end of an SRQ's ring in m.
func (c *conn) srqRing(h uint32, m *shm.Mapping, n, maxSGE uint32) (*wq.RecvQueue, error) {
	return wq.NewRecvQueue(wq.RQConfig{Mem: m.Bytes(), Entries: n, MaxSGE: maxSGE, PageSize: shm.PageSize,
		OnCorrupt: func(why string) {
			c.log.Warn("client SRQ ring corrupt", "srq", h, "reason", why)
			c.event(verbsock.EventMsg{Type: verbsock.EventSRQErr, Handle: h})
		}})
}

// post moves at most max posted receives from the SRQ ring into the SRQ
// (the SRQ's datapath worker, when its doorbell rang, until post reports
// no more; nic.Device.WatchSRQ). A slot goes back when a QP takes its
// WQE (srqObj.taken), so the ring never holds more than the SRQ's max_wr
// WQEs not yet taken and the SRQ has room for all of them: the ring bounds
// even a hostile producer so (its index may run at most a ring ahead of
// the slots handed back, or the ring is corrupt). Were the SRQ full all
// the same, the posts left in the ring wait for the next QP that takes a
// WQE, which drains them (starved): no timer, no retry loop.
func (o *srqObj) post(max int) (more bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return false
	}
	o.starved, more = o.drainLocked(max)
	return more
}

// drainLocked moves what the ring holds into the SRQ, at most max WRs
// (max < 0: all of it), under o.mu. full: it stopped on a full SRQ; more:
// it stopped at max.
func (o *srqObj) drainLocked(max int) (full, more bool) {
	var wr transport.RecvWR
	for n := 0; ; n++ {
		if n == max {
			return false, true
		}
		if !o.rq.Peek(&wr) {
			return false, false // the ring is armed: the client's next post rings
		}
		if err := o.srq.Post(&wr); errors.Is(err, transport.ErrFull) {
			return true, false
		}
		// Any other error is a WQE the SRQ refuses; it is dropped (the ring
		// decoder already bounded its SGEs, so this does not happen), and
		// its slot goes back at once.
		o.rq.Consume()
		o.rq.Retire(o.srq.Len())
	}
}

// resizeSRQ moves an SRQ to a new ring of max_wr entries (ibv_modify_srq
// with IBV_SRQ_MAX_WR): what the old ring still holds goes into the SRQ,
// and the WQEs the SRQ holds keep their slots in the new ring (Carry).
func (c *conn) resizeSRQ(r *verbsock.ResizeSRQReq, fds []int) (any, error) {
	o, err := c.srq(r.SRQ)
	if err != nil {
		return nil, err
	}
	if r.MaxWR == 0 || r.MaxWR > c.s.dev.Attr().MaxSRQWR {
		return nil, errf(syscall.EINVAL, "SRQ max_wr %d (1..%d)", r.MaxWR, c.s.dev.Attr().MaxSRQWR)
	}
	n := ring.EntriesFor(r.MaxWR)
	_, maxSGE, _ := o.srq.Attr()
	// The SRQ's private ring grows with it: charge the difference first.
	grow := max(srqHeapBytes(n, maxSGE)-o.heap, 0)
	if err := c.chargeBytes(grow); err != nil {
		return nil, err
	}
	m, err := c.mapFD(fds[0], int64(ring.Bytes(n, ring.RQEntrySize(maxSGE), shm.PageSize)))
	if err != nil {
		c.unchargeBytes(grow)
		return nil, err
	}
	rq, err := c.srqRing(r.SRQ, m, n, maxSGE)
	if err != nil {
		m.Release()
		c.unchargeBytes(grow)
		return nil, errf(syscall.EINVAL, "%v", err)
	}
	old := o.m
	used, err := o.moveTo(rq, m, n)
	if err != nil {
		m.Release()
		c.unchargeBytes(grow)
		return nil, errf(syscall.EINVAL, "%v", err)
	}
	o.heap += grow // a shrunk SRQ keeps its larger charge (conservative)
	old.Release()
	return &verbsock.ResizeSRQResp{MaxWR: n, Used: used}, nil
}

// moveTo resizes the SRQ to n, moves what the old ring still holds into
// it and switches to rq (in m), carrying over the WQEs the SRQ holds.
func (o *srqObj) moveTo(rq *wq.RecvQueue, m *shm.Mapping, n uint32) (used uint32, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if held := o.srq.Len() + o.rq.Pending(); uint32(held) > n {
		return 0, fmt.Errorf("SRQ max_wr %d below the %d WRs posted and not yet taken", n, held)
	}
	if err := o.srq.Modify(n, true, 0, false); err != nil {
		return 0, err
	}
	o.drainLocked(-1) // it has room: checked above
	used = uint32(o.srq.Len())
	if err := rq.Carry(used); err != nil {
		return 0, err
	}
	o.rq, o.m = rq, m
	return used, nil
}

func (c *conn) srq(h uint32) (*srqObj, error) {
	return srqTable.lookup(c, h)
}

func (c *conn) modifySRQ(r *verbsock.ModifySRQReq) error {
	o, err := c.srq(r.SRQ)
	if err != nil {
		return err
	}
	if r.Mask == 0 || r.Mask&^(verbsock.SRQMaxWR|verbsock.SRQLimit) != 0 {
		return errf(syscall.EINVAL, "SRQ attribute mask %#x", r.Mask)
	}
	if r.Mask&verbsock.SRQMaxWR != 0 {
		// The ring that carries posts bounds them: a new size needs a new ring.
		return errf(syscall.EINVAL, "SRQ max_wr changes with resize_srq (a new ring), not modify_srq")
	}
	if err := o.srq.Modify(0, false, r.Limit, true); err != nil {
		return errf(syscall.EINVAL, "%v", err)
	}
	return nil
}

func (c *conn) querySRQ(h uint32) (any, error) {
	o, err := c.srq(h)
	if err != nil {
		return nil, err
	}
	mw, ms, l := o.srq.Attr()
	return &verbsock.QuerySRQResp{MaxWR: mw, MaxSGE: ms, Limit: l}, nil
}

func (c *conn) destroySRQHandle(h uint32) error {
	o, err := srqTable.remove(c, h)
	if err != nil {
		return err
	}
	c.destroySRQ(o)
	c.uncharge(resSRQ, 1)
	return nil
}
