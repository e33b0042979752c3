package nic_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/transport"
	"golang.org/x/sys/unix"
)

// silentBell is a doorbell nobody rings (a pipe's read end).
type silentBell [2]int

func (b silentBell) FD() int                   { return b[0] }
func (b silentBell) Drain() (int, bool, error) { return 0, false, nil }
func (b silentBell) Close() error              { unix.Close(b[1]); return unix.Close(b[0]) }
func newSilentBell(t *testing.T) silentBell {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	return silentBell(p)
}

// A receive posted in an SRQ's ring is there for the next request even
// if the SRQ's doorbell never rang: the QP's worker moves the ring into
// the SRQ before the request (a post is at once on a NIC), so the SRQ's
// limit counts it too.
func TestSRQRingDrainedBeforeRequest(t *testing.T) {
	ha, hb := nictest.Pair(t, 1500)
	a := newSide(t, ha, transport.QPTypeRC, 0x10000000)
	var (
		srq     *transport.SRQ
		limits  atomic.Int32
		mu      sync.Mutex
		ring    []transport.RecvWR // posted, not yet in the SRQ
		bSide   *side
		sgeAddr = uint64(0x20000000)
	)
	post := func(max int) bool {
		mu.Lock()
		defer mu.Unlock()
		for n := 0; n < max && len(ring) > 0; n++ {
			if err := srq.Post(&ring[0]); err != nil {
				return false
			}
			ring = ring[1:]
		}
		return len(ring) > 0
	}
	bSide = newSideCfg(t, hb, transport.QPTypeRC, sgeAddr, func(qc *nic.QPConfig) {
		var err error
		if srq, err = hb.Dev.CreateSRQ(qc.PD, 16, 1, func() { limits.Add(1) }); err != nil {
			t.Fatal(err)
		}
		if err := hb.Dev.WatchSRQ(srq, newSilentBell(t), post); err != nil {
			t.Fatal(err)
		}
		qc.SRQ = srq
	})
	t.Cleanup(func() {
		bSide.qp.Destroy()
		if err := hb.Dev.DestroySRQ(srq); err != nil {
			t.Error(err)
		}
	})
	if err := nictest.ConnectRC(a.qp, bSide.qp, ha, hb, transport.QPTypeRC, transport.MTU1024); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	for i := range 3 {
		ring = append(ring, transport.RecvWR{ID: uint64(10 + i), SGL: bSide.sge(i*256, 256)})
	}
	mu.Unlock()
	if err := srq.Modify(0, false, 2, true); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := a.qp.PostSend(&transport.SendWR{ID: uint64(i), Opcode: transport.WRSend, Flags: transport.SendSignaled,
			SGL: a.sge(0, 64)}); err != nil {
			t.Fatal(err)
		}
		if wc := waitCQ(t, bSide.rcq, 1)[0]; wc.Status != transport.WCSuccess || wc.WRID != uint64(10+i) {
			t.Fatalf("SEND %d arrived as %+v, want WR %d", i, wc, 10+i)
		}
		// 2 then 1 WQEs left of 3: the limit (2) is crossed by the second.
		if got, want := limits.Load(), int32(i); got != want {
			t.Fatalf("after %d receives: %d SRQ limit events, want %d", i+1, got, want)
		}
	}
	waitCQ(t, a.scq, 2)
}
