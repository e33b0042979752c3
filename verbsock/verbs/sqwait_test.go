package verbs_test

import (
	"bytes"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/vrnic/vrnicd/nic/link"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// Waits at the head of the send queue, end to end between two devices
// through the SDK, as Lustre's o2iblnd and NFS/RDMA chain their WRs: each
// must resume by itself once what it waits for has completed (the daemon
// runs the send side only on a post, a response or a deadline).

func twoSides(t *testing.T) (*env, *side, *side) {
	e := newEnv(t, verbsock.Limits{})
	a := newSide(t, e.client(), e.host, verbs.QPTypeRC, nil, nil)
	b := newSide(t, e.peerClient(), e.peer, verbs.QPTypeRC, nil, nil)
	return e, a, b
}

func postAll(t *testing.T, q *verbs.QP, wrs ...verbs.SendWR) {
	t.Helper()
	for i := range wrs {
		wrs[i].Flags |= verbs.SendSignaled
		if err := q.PostSend(wrs[i]); err != nil {
			t.Fatalf("post %v: %v", wrs[i].Opcode, err)
		}
	}
}

func wantInOrder(t *testing.T, wcs []verbs.WC, ops ...verbs.WCOpcode) {
	t.Helper()
	for i, wc := range wcs {
		if wc.WRID != uint64(i+1) || wc.Status != verbs.WCSuccess || wc.Opcode != ops[i] {
			t.Fatalf("completion %d: %+v, want WR %d %v success", i, wc, i+1, ops[i])
		}
	}
}

// ibv_post_send(3): a fenced WR waits "until all prior posted RDMA Read
// and Atomic WRs will be completed", and then it runs.
func TestFencedSendRunsAfterItsRead(t *testing.T) {
	_, a, b := twoSides(t)
	connect(t, a, b)
	copy(b.buf.Bytes()[4096:], "remote bytes")
	if err := b.qp.PostRecv(verbs.RecvWR{ID: 9, SGL: []verbs.SGE{b.mr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	copy(a.buf.Bytes()[8192:], "fenced")
	postAll(t, a.qp,
		verbs.SendWR{ID: 1, Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{a.mr.SGE(0, 12)}, RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey()},
		verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendFence, SGL: []verbs.SGE{a.mr.SGE(8192, 6)}})
	wantInOrder(t, pollN(t, a.scq, 2), verbs.WCRDMARead, verbs.WCSend)
	if got := string(a.buf.Bytes()[:12]); got != "remote bytes" {
		t.Fatalf("READ brought %q", got)
	}
	if wc := pollN(t, b.rcq, 1)[0]; wc.Status != verbs.WCSuccess || string(b.buf.Bytes()[:6]) != "fenced" {
		t.Fatalf("fenced SEND arrived as %+v %q", wc, b.buf.Bytes()[:6])
	}
}

// o2iblnd's ordinary chain: a LOCAL_INV waits for every earlier WR to
// complete (kernel rxe holds it the same way), then runs, and what follows
// it runs too, with nothing else posted.
func TestLocalInvChainRunsWithoutAnotherPost(t *testing.T) {
	_, a, b := twoSides(t)
	connect(t, a, b)
	fmr, err := a.pd.AllocMR(1)
	if err != nil {
		t.Fatal(err)
	}
	page, err := a.pd.AllocBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	reg := func() *verbs.RegMRWR {
		return &verbs.RegMRWR{MR: fmr, Pages: []verbs.PageRef{{Buffer: page}}, PageSize: 4096, IOVA: 0x7000000, Length: 4096,
			Access: verbs.AccessLocalWrite}
	}
	postAll(t, a.qp, verbs.SendWR{ID: 1, Opcode: verbs.WRRegMR, RegMR: reg()})
	wantInOrder(t, pollN(t, a.scq, 1), verbs.WCRegMR)
	copy(a.buf.Bytes(), "first")
	copy(page.Bytes(), "second")
	old := fmr.LKey()
	postAll(t, a.qp,
		verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.mr.SGE(0, 5)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		verbs.SendWR{ID: 2, Opcode: verbs.WRLocalInv, ImmData: old},
		verbs.SendWR{ID: 3, Opcode: verbs.WRRegMR, RegMR: reg()},
		verbs.SendWR{ID: 4, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{{Addr: 0x7000000, Length: 6, LKey: mem.NextKey(old)}},
			RemoteAddr: b.mr.Addr() + 100, RKey: b.mr.RKey()})
	wantInOrder(t, pollN(t, a.scq, 4), verbs.WCRDMAWrite, verbs.WCLocalInv, verbs.WCRegMR, verbs.WCRDMAWrite)
	if string(b.buf.Bytes()[:5]) != "first" || string(b.buf.Bytes()[100:106]) != "second" {
		t.Fatalf("WRITEs placed %q and %q", b.buf.Bytes()[:5], b.buf.Bytes()[100:106])
	}
}

// impair drops, duplicates and reorders (holds back) what each end sends,
// each with its own seeded generator.
func impair(e *env, drop, dup, hold int) {
	for i, l := range []*link.PipeEnd{e.host.Link, e.peer.Link} {
		var mu sync.Mutex
		rng := rand.New(rand.NewPCG(uint64(i)+41, 5))
		l.SetHook(func([]byte) link.Action {
			mu.Lock()
			defer mu.Unlock()
			switch r := rng.IntN(100); {
			case r < drop:
				return link.Drop
			case r < drop+dup:
				return link.Duplicate
			case r < drop+dup+hold:
				return link.Hold
			}
			return link.Deliver
		})
	}
}

// An o2iblnd-style loop under 10 % loss, 5 % duplication and 5 %
// reordering both ways: register the fast-reg MR under its next key,
// WRITE from it, READ into it, SEND a fenced completion message, invalidate
// it. Every iteration completes, in order, without waiting for a new post.
func TestO2iblndLoopUnderLoss(t *testing.T) {
	iters := 300
	if raceEnabled {
		iters = 60
	}
	e, a, b := twoSides(t)
	connectTimeout(t, a, b, 8) // 1 ms: loss costs retransmit timeouts
	impair(e, 10, 5, 5)
	fmr, err := a.pd.AllocMR(1)
	if err != nil {
		t.Fatal(err)
	}
	page, err := a.pd.AllocBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	for i := range iters {
		if err := b.qp.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{b.mr.SGE(64<<10, 64)}}); err != nil {
			t.Fatal(err)
		}
		for j := range 4096 {
			page.Bytes()[j] = byte(i + j)
		}
		want := append([]byte(nil), page.Bytes()...)
		remote := b.buf.Bytes()[(i%8)*8192:][:8192]
		for j := range remote[4096:] {
			remote[4096+j] = byte(3*i + j)
		}
		wantRead := append([]byte(nil), remote[4096:]...)
		key := mem.NextKey(fmr.LKey())
		raddr := b.mr.Addr() + uint64((i%8)*8192)
		postAll(t, a.qp,
			verbs.SendWR{ID: 1, Opcode: verbs.WRRegMR, RegMR: &verbs.RegMRWR{MR: fmr, Pages: []verbs.PageRef{{Buffer: page}},
				PageSize: 4096, IOVA: 0x7000000, Length: 4096, Access: verbs.AccessLocalWrite}},
			verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{{Addr: 0x7000000, Length: 4096, LKey: key}},
				RemoteAddr: raddr, RKey: b.mr.RKey()},
			verbs.SendWR{ID: 3, Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{{Addr: 0x7000000, Length: 4096, LKey: key}},
				RemoteAddr: raddr + 4096, RKey: b.mr.RKey()},
			verbs.SendWR{ID: 4, Opcode: verbs.WRSend, Flags: verbs.SendFence, SGL: []verbs.SGE{a.mr.SGE(0, 8)}},
			verbs.SendWR{ID: 5, Opcode: verbs.WRLocalInv, ImmData: key})
		wantInOrder(t, pollN(t, a.scq, 5), verbs.WCRegMR, verbs.WCRDMAWrite, verbs.WCRDMARead, verbs.WCSend, verbs.WCLocalInv)
		if !bytes.Equal(remote[:4096], want) || !bytes.Equal(page.Bytes(), wantRead) {
			t.Fatalf("iteration %d: the WRITE or the READ through the fast-reg MR moved wrong data", i)
		}
		if wc := pollN(t, b.rcq, 1)[0]; wc.Status != verbs.WCSuccess || wc.WRID != uint64(i) {
			t.Fatalf("iteration %d: SEND arrived as %+v", i, wc)
		}
	}
	c := e.host.Dev.Counters()
	if got := c.Get(transport.LocalOpReplays); got != 0 {
		t.Fatalf("local_op_replays = %d", got)
	}
	if c.Get(transport.RetransmittedPkts) == 0 {
		t.Fatal("nothing was retransmitted: the impairment did not act")
	}
	t.Logf("%d iterations; retransmit_timeouts %d, retransmitted_pkts %d, duplicate_request (peer) %d", iters,
		c.Get(transport.RetransmitTimeouts), c.Get(transport.RetransmittedPkts), e.peer.Dev.Counters().Get(transport.DuplicateRequest))
}
