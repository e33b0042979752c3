package verbs_test

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

func TestSRQSharedByTwoQPs(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	srq, err := pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: 64, MaxSGE: 2})
	if err != nil {
		t.Fatal(err)
	}
	a := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	b1 := newSide(t, d, e.host, verbs.QPTypeRC, srq, pd)
	c := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	b2 := newSide(t, d, e.host, verbs.QPTypeRC, srq, pd)
	connect(t, a, b1)
	connect(t, c, b2)
	if err := b1.qp.PostRecv(verbs.RecvWR{}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("PostRecv on an SRQ QP: %v", err)
	}
	for i := range 8 {
		if err := srq.PostRecv(verbs.RecvWR{ID: uint64(100 + i), SGL: []verbs.SGE{b1.mr.SGE(uint64(i)*1024, 1024)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := srq.Modify(verbs.SRQAttr{Limit: 5}, verbs.SRQAttrLimit); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		s := a
		if i%2 == 1 {
			s = c
		}
		if err := s.qp.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, SGL: []verbs.SGE{s.mr.SGE(0, 100)}}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[uint64]bool{}
	for _, wc := range append(pollN(t, b1.rcq, 2), pollN(t, b2.rcq, 2)...) {
		if wc.Status != verbs.WCSuccess || wc.WRID < 100 || wc.WRID >= 108 {
			t.Fatalf("SRQ receive %+v", wc)
		}
		got[wc.WRID] = true
	}
	if len(got) != 4 {
		t.Fatalf("receives used WQEs %v", got)
	}
	// 8 posted, 4 used: below the limit of 5, the event fired.
	select {
	case ev := <-d.Events():
		if ev.Type != verbs.EventSRQLimit || ev.SRQ != srq {
			t.Fatalf("event %v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no SRQ limit event")
	}
	attr, err := srq.Query()
	if err != nil || attr.Limit != 0 || attr.MaxWR != 64 || attr.MaxSGE != 2 {
		t.Fatalf("SRQ query %+v %v (limit disarms after firing)", attr, err)
	}
	if err := srq.Destroy(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("destroy SRQ in use: %v", err)
	}
}

func TestSRQResizeAndPostErrors(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	pd, _ := d.AllocPD()
	srq, err := pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := srq.Modify(verbs.SRQAttr{MaxWR: 64}, verbs.SRQAttrMaxWR); err != nil {
		t.Fatal(err)
	}
	if a, _ := srq.Query(); a.MaxWR != 64 {
		t.Fatalf("after resize: %+v", a)
	}
	if err := srq.Modify(verbs.SRQAttr{Limit: 100}, verbs.SRQAttrLimit); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("limit over max_wr: %v", err)
	}
	err = srq.PostRecv(verbs.RecvWR{ID: 1}, verbs.RecvWR{ID: 2, SGL: make([]verbs.SGE, 2)})
	var pe *verbs.PostError
	if !errors.As(err, &pe) || pe.Index != 1 || !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("post of 2 SGEs on a 1-SGE SRQ: %v", err)
	}
	// The ring holds 4: the fifth post before the daemon drains may be
	// ENOMEM, never anything else.
	for i := range 64 {
		if err := srq.PostRecv(verbs.RecvWR{ID: uint64(i)}); err != nil && !errors.Is(err, syscall.ENOMEM) {
			t.Fatal(err)
		}
	}
	if err := srq.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := srq.PostRecv(verbs.RecvWR{}); !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("post to a destroyed SRQ: %v", err)
	}
}

// ibv_post_srq_recv counts WRs not yet taken by a QP: max_wr posted and
// nothing taken is ENOMEM however long the daemon is given, a receive
// completion frees a slot, and a resize to a new ring keeps every WR
// posted (they complete in order afterwards) and counts them against the
// new size.
func TestSRQDepthCountsWRsNotTaken(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	pd, _ := d.AllocPD()
	srq, err := pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: 8, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	a := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	b := newSide(t, d, e.host, verbs.QPTypeRC, srq, pd)
	connect(t, a, b)
	id := uint64(0)
	post := func() error {
		err := srq.PostRecv(verbs.RecvWR{ID: id, SGL: []verbs.SGE{b.mr.SGE(id%64*64, 64)}})
		if err == nil {
			id++
		}
		return err
	}
	fill := func(n int) {
		t.Helper()
		for i := range n {
			if err := post(); err != nil {
				t.Fatalf("post %d of %d: %v", i, n, err)
			}
		}
		for range 20 { // the daemon drains the ring meanwhile: still full
			if err := post(); !errors.Is(err, syscall.ENOMEM) {
				t.Fatalf("post past max_wr with none taken: %v, want ENOMEM", err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	next := uint64(0) // the WR the next receive must use
	recv := func(n int) {
		t.Helper()
		for i := range n {
			if err := a.qp.PostSend(verbs.SendWR{ID: next, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 8)}}); err != nil {
				t.Fatal(err)
			}
			w := pollN(t, b.rcq, 1)[0]
			if w.Status != verbs.WCSuccess || w.WRID != next {
				t.Fatalf("receive %d: %+v, want WR %d", i, w, next)
			}
			pollN(t, a.scq, 1)
			next++
		}
	}
	fill(8)
	recv(1)
	fill(1) // the taken WR's slot, and no more

	// Grow with 8 posted: they keep their slots, 24 more fit.
	if err := srq.Modify(verbs.SRQAttr{MaxWR: 32}, verbs.SRQAttrMaxWR); err != nil {
		t.Fatal(err)
	}
	if at, err := srq.Query(); err != nil || at.MaxWR != 32 {
		t.Fatalf("after resize: %+v %v", at, err)
	}
	fill(24)
	recv(32)
	// Shrink: not below what is posted and not taken.
	fill(32)
	if err := srq.Modify(verbs.SRQAttr{MaxWR: 16}, verbs.SRQAttrMaxWR); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("resize to 16 with 32 posted: %v, want EINVAL", err)
	}
	recv(28)
	if err := srq.Modify(verbs.SRQAttr{MaxWR: 4, Limit: 2}, verbs.SRQAttrMaxWR|verbs.SRQAttrLimit); err != nil {
		t.Fatal(err)
	}
	if at, _ := srq.Query(); at.MaxWR != 4 || at.Limit != 2 {
		t.Fatalf("after shrink: %+v", at)
	}
	fill(0) // 4 posted, 4 slots
	recv(4)
	fill(4)
	recv(4)
}
