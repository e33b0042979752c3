package nic_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/nic/gid"
	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/transport"
)

// slowRing is a client's send ring whose first look takes a while: the
// worker is still in that pass when a TakePosted that returned early
// would let its caller go on.
type slowRing struct {
	mu       sync.Mutex
	wrs      []transport.SendWR // +checklocks:mu
	slept    bool               // +checklocks:mu
	consumed atomic.Int32
}

func (r *slowRing) Peek(wr *transport.SendWR) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.wrs) == 0 {
		return false
	}
	if !r.slept {
		r.slept = true
		time.Sleep(100 * time.Millisecond)
	}
	*wr = r.wrs[0]
	return true
}

func (r *slowRing) Consume() {
	r.mu.Lock()
	r.wrs = r.wrs[1:]
	r.mu.Unlock()
	r.consumed.Add(1)
}

func (r *slowRing) Retire(int) {}

func (r *slowRing) post(wrs ...transport.SendWR) {
	r.mu.Lock()
	r.wrs = append(r.wrs, wrs...)
	r.mu.Unlock()
}

// TakePosted returns only once the worker has taken every send WR the
// ring held: the daemon destroys an AH right after it (a UD WR in the
// ring names its AH by handle; kernel rxe copies the AV at post time), so
// a WR still in the ring then fails with LOC_QP_OP_ERR and the QP's send
// queue goes to SQE (mckey's last datagram, lost now and then).
func TestTakePostedTakesTheRing(t *testing.T) {
	ha, hb := nictest.Pair(t, 1500)
	ring := &slowRing{}
	s := udSide(t, ha, mcQKey, func(c *nic.QPConfig) { c.SQ = ring })
	dst := udSide(t, hb, mcQKey, nil)
	av := transport.AddressVector{DGID: gid.FromAddr(hb.Addr), SGIDIndex: ha.GIDIndex(), HopLimit: 64, Port: 1}
	if err := ha.Dev.ResolveAH(&av); err != nil {
		t.Fatal(err)
	}
	const n = 4
	for i := range n {
		ring.post(transport.SendWR{ID: uint64(i), Opcode: transport.WRSend, SGL: s.sge(0, 64), AH: &av,
			RemoteQPN: dst.qp.QPN(), RemoteQKey: mcQKey})
	}
	s.qp.TakePosted()
	if got := ring.consumed.Load(); got != n {
		t.Fatalf("TakePosted returned with %d of %d WRs taken", got, n)
	}
	waitCQ(t, dst.rcq, n)
}
