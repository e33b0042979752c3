package verbs

import (
	"context"
	"errors"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/ring"
	"github.com/vrnic/vrnicd/verbsock/shm"
	"golang.org/x/sys/unix"
)

// CQ is a completion queue (ibv_cq): a ring in shared memory the device
// writes and Poll reads.
type CQ struct {
	d  *Device
	h  uint32
	mu sync.Mutex // the ring (Poll, ReqNotify, Resize)
	r  *ring.CQReader
	m  []byte
	ev *os.File // the client end of the completion channel; nil without events

	evMu   sync.Mutex // one WaitEvent at a time
	closed bool
}

// CreateCQ makes a completion queue of at least n entries (ibv_create_cq).
// withEvents gives it a completion channel: ReqNotify and WaitEvent.
func (d *Device) CreateCQ(n int, withEvents bool) (*CQ, error) {
	if n <= 0 || n > ring.MaxEntries {
		return nil, verr(verbsock.OpCreateCQ, syscall.EINVAL, "CQ of %d entries (1..%d)", n, ring.MaxEntries)
	}
	entries := ring.EntriesFor(uint32(n))
	m, fd, err := d.newRing(ring.Bytes(entries, ring.CQESize, d.pageSize))
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	r, err := ring.NewCQReader(m, entries, d.pageSize)
	if err != nil {
		unix.Munmap(m)
		return nil, verr(verbsock.OpCreateCQ, syscall.EINVAL, "%v", err)
	}
	var flags uint32
	if withEvents {
		flags = verbsock.CQWithEvents
	}
	var resp verbsock.CreateCQResp
	fds, err := d.call(verbsock.OpCreateCQ, &verbsock.CreateCQReq{CQE: uint32(n), Flags: flags}, []int{fd}, &resp)
	if err != nil {
		unix.Munmap(m)
		return nil, err
	}
	if resp.Entries != entries || withEvents != (len(fds) == 1) {
		verbsock.CloseFDs(fds)
		unix.Munmap(m)
		return nil, verr(verbsock.OpCreateCQ, syscall.EPROTO, "daemon sized the CQ at %d entries with %d fds", resp.Entries, len(fds))
	}
	cq := &CQ{d: d, h: resp.CQ, r: r, m: m}
	if withEvents {
		cq.ev = os.NewFile(uintptr(fds[0]), "vrnic-cq-event")
	}
	d.objs.Store(cq.h, cq)
	return cq, nil
}

// newRing makes the memfd of a ring and maps it.
func (d *Device) newRing(size int) ([]byte, int, error) {
	fd, err := shm.Create("vrnic-ring", size)
	if err != nil {
		return nil, -1, verr(verbsock.OpCreateCQ, syscall.ENOMEM, "%v", err)
	}
	m, err := shm.MapFD(fd, size)
	if err != nil {
		unix.Close(fd)
		return nil, -1, verr(verbsock.OpCreateCQ, syscall.ENOMEM, "%v", err)
	}
	return m, fd, nil
}

// Entries is the CQ's size.
func (cq *CQ) Entries() int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return 0
	}
	return int(cq.r.Entries())
}

// Poll takes up to len(wc) completions, oldest first, and returns how many
// (ibv_poll_cq). It only reads shared memory.
func (cq *CQ) Poll(wc []WC) int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return 0
	}
	return cq.r.Poll(wc)
}

// ReqNotify arms the completion channel for one event: for the next
// completion, or with solicitedOnly for the next solicited or unsuccessful
// one (ibv_req_notify_cq). As with ibverbs, poll again after arming:
// completions that arrived before it do not raise an event.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return ErrClosed
	}
	if cq.ev == nil {
		return verr(verbsock.OpReqNotifyCQ, syscall.EINVAL, "CQ created without events")
	}
	cq.r.Arm(solicitedOnly)
	return nil
}

// WaitEvent blocks until the armed completion event arrives
// (ibv_get_cq_event; there is nothing to acknowledge) or ctx is done.
func (cq *CQ) WaitEvent(ctx context.Context) error {
	if cq.ev == nil {
		return verr(verbsock.OpReqNotifyCQ, syscall.EINVAL, "CQ created without events")
	}
	cq.evMu.Lock()
	defer cq.evMu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = cq.ev.SetReadDeadline(time.Unix(1, 0))
		close(fired)
	})
	err := cq.readEvents()
	if !stop() {
		<-fired
	}
	_ = cq.ev.SetReadDeadline(time.Time{})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, os.ErrClosed) {
			return ErrClosed
		}
		return err
	}
	return nil
}

// readEvents waits on the completion channel and takes every event queued
// on it, so that events the daemon sent for earlier arms (one each) are
// one wake-up, as an eventfd's counter would be.
func (cq *CQ) readEvents() error {
	rc, err := cq.ev.SyscallConn()
	if err != nil {
		return err
	}
	var closed bool
	var derr error
	err = rc.Read(func(fd uintptr) bool {
		var n int
		n, closed, derr = shm.DrainWakes(int(fd))
		return n > 0 || closed || derr != nil
	})
	switch {
	case err != nil:
		return err
	case derr != nil:
		return derr
	case closed:
		return ErrClosed // the daemon's end is gone
	}
	return nil
}

// Resize changes the CQ's size (ibv_resize_cq); completions not yet polled
// are kept. It fails with EINVAL if they do not fit.
func (cq *CQ) Resize(n int) error {
	if n <= 0 || n > ring.MaxEntries {
		return verr(verbsock.OpResizeCQ, syscall.EINVAL, "CQ of %d entries", n)
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return ErrClosed
	}
	d := cq.d
	entries := ring.EntriesFor(uint32(n))
	m, fd, err := d.newRing(ring.Bytes(entries, ring.CQESize, d.pageSize))
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	r, err := ring.NewCQReader(m, entries, d.pageSize)
	if err != nil {
		unix.Munmap(m)
		return verr(verbsock.OpResizeCQ, syscall.EINVAL, "%v", err)
	}
	var resp verbsock.ResizeCQResp
	if _, err := d.call(verbsock.OpResizeCQ, &verbsock.ResizeCQReq{CQ: cq.h, CQE: uint32(n)}, []int{fd}, &resp); err != nil {
		unix.Munmap(m)
		return err
	}
	old := cq.m
	cq.r, cq.m = r, m
	unix.Munmap(old)
	return nil
}

// Destroy frees the CQ (ibv_destroy_cq); EBUSY while QPs use it.
func (cq *CQ) Destroy() error {
	if _, err := cq.d.call(verbsock.OpDestroyCQ, &verbsock.HandleReq{Handle: cq.h}, nil, &verbsock.Empty{}); err != nil {
		return err
	}
	cq.release()
	return nil
}

func (cq *CQ) release() {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return
	}
	cq.closed = true
	cq.d.objs.Delete(cq.h)
	unix.Munmap(cq.m)
	if cq.ev != nil {
		cq.ev.Close()
	}
}
