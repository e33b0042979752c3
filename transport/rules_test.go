package transport_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/mem"
	tt "github.com/vrnic/vrnicd/transport/transporttest"
	"github.com/vrnic/vrnicd/transport/wire"
)

func post(t *testing.T, ep *tt.Endpoint, wr transport.SendWR) {
	t.Helper()
	if err := ep.PostSend(&wr); err != nil {
		t.Fatalf("post %v: %v", wr.Opcode, err)
	}
}

func postRecv(t *testing.T, ep *tt.Endpoint, id uint64, sge transport.SGE) {
	t.Helper()
	if err := ep.PostRecv(&transport.RecvWR{ID: id, SGL: []transport.SGE{sge}}); err != nil {
		t.Fatal(err)
	}
}

// The o2iblnd pattern from the 2022 bug report, in one send queue:
// REG_MR, RDMA WRITE and READ through the new key, LOCAL_INV, bump the key's
// low byte, again. Kernel rxe's retry re-walks the SQ and re-executes the
// REG_MR, which then fails on a VALID MR. Here retries rewind only the
// network cursor: thousands of rounds under loss, no failure, every local
// operation executed exactly once.
func TestSeedScenarioFastRegUnderLoss(t *testing.T) {
	rounds := 3000
	if raceEnabled {
		rounds = 300
	}
	p := newPair(t, 9, tt.Options{})
	p.net.Faults = tt.Faults{Loss: 0.05, Reorder: 0.1, Duplicate: 0.02}
	const pageSize, npages = 4096, 4
	pages := make([]byte, 8*pageSize)
	backing := mem.NewSliceBacking(pages)
	key, err := p.a.Node.Mem.AllocMR(p.a.PD, npages)
	if err != nil {
		t.Fatal(err)
	}
	remote := p.buf(t, p.b, 2*npages*pageSize, 0x5000_0000)
	for i := range remote.Bytes {
		remote.Bytes[i] = byte(i * 31)
	}
	const iova = 0x9000_0000
	const n = npages * pageSize
	for r := range rounds {
		key = mem.NextKey(key)
		// A different, non-contiguous page set each round.
		var pl []mem.Page
		for i := range npages {
			pl = append(pl, mem.Page{Backing: backing, Offset: uint64(((r + 3*i) % 8) * pageSize)})
		}
		for i, pg := range pl {
			for j := range pageSize {
				pages[int(pg.Offset)+j] = byte(r + i + j)
			}
		}
		want := make([]byte, n)
		for i, pg := range pl {
			copy(want[i*pageSize:], pages[pg.Offset:pg.Offset+pageSize])
		}
		sge := []transport.SGE{{Addr: iova, Length: n, LKey: key}}
		roff := uint64((r % 2) * n)
		post(t, p.a, transport.SendWR{ID: 1, Opcode: transport.WRRegMR, Flags: transport.SendSignaled,
			RegMR: &transport.RegMRWR{Key: key, Pages: pl, PageSize: pageSize, IOVA: iova, Length: n,
				Access: mem.LocalWrite | mem.RemoteRead | mem.RemoteWrite}})
		post(t, p.a, transport.SendWR{ID: 2, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled, SGL: sge,
			RemoteAddr: remote.Addr + roff, RKey: remote.RKey})
		post(t, p.a, transport.SendWR{ID: 3, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled, SGL: sge,
			RemoteAddr: remote.Addr + (n - roff), RKey: remote.RKey})
		post(t, p.a, transport.SendWR{ID: 4, Opcode: transport.WRLocalInv, Flags: transport.SendSignaled, ImmData: key})
		wcs := p.waitWC(t, p.a.SendCQ, 4)
		for i, wc := range wcs {
			if wc.Status != transport.WCSuccess || wc.WRID != uint64(i+1) {
				t.Fatalf("round %d: completion %d is %+v", r, i, wc)
			}
		}
		if !bytes.Equal(remote.Bytes[roff:roff+n], want) {
			t.Fatalf("round %d: WRITE through the fast-registered pages placed wrong data", r)
		}
		for i, pg := range pl {
			if !bytes.Equal(pages[pg.Offset:pg.Offset+pageSize], remote.Bytes[n-roff+uint64(i*pageSize):n-roff+uint64((i+1)*pageSize)]) {
				t.Fatalf("round %d: READ through the fast-registered pages landed wrong", r)
			}
		}
		if info, _ := p.a.Node.Mem.Query(key); info.State != mem.StateFree {
			t.Fatalf("round %d: MR is %v after LOCAL_INV", r, info.State)
		}
	}
	c := p.a.QP.Counters()
	if got := c.Get(transport.LocalOpReplays); got != 0 {
		t.Errorf("local_op_replays = %d", got)
	}
	if got, want := c.Get(transport.LocalOpsExecuted), uint64(2*rounds); got != want {
		t.Errorf("local_ops_executed = %d, want %d", got, want)
	}
	if c.Get(transport.RetransmittedPkts) == 0 {
		t.Error("no retransmission happened: the loss did not exercise retry")
	}
	t.Logf("%d rounds; %s; link %+v", rounds, nonZero(c), p.net.Stats)
}

// The retransmit deadline belongs to the oldest unacknowledged PSN: on a
// lossless link, however long the run and the pauses, it never expires and
// no probe goes. Drop one response (the last ACK: nothing after it would
// speak for the responder) and exactly one retransmission follows: the
// probe a few round trips later (tlp.go), a duplicate the responder
// acknowledges, with no retransmit timeout and no retry spent.
func TestRetransmitTimerLosslessAndOneDrop(t *testing.T) {
	ops := 100_000
	if raceEnabled {
		ops = 10_000
	}
	for _, drop := range []bool{false, true} {
		p := newPair(t, 3, tt.Options{Timeout: 14})
		p.net.Latency = 2 * time.Microsecond
		src := p.buf(t, p.a, 4096, 0x1000)
		dst := p.buf(t, p.b, 4096, 0x2000)
		lastPSN := uint32(ops - 1) // the very last WRITE's (one PSN each from 0): nothing after it covers its ACK
		dropped := 0
		if drop {
			p.net.Faults.Drop = func(f *tt.Frame) bool {
				if dropped == 0 && f.Pkt.BTH.Opcode() == wire.RCAcknowledge && f.Pkt.BTH.PSN() == lastPSN {
					dropped++
					return true
				}
				return false
			}
		}
		done := 0
		for done < ops {
			burst := min(16, ops-done)
			for i := range burst {
				post(t, p.a, transport.SendWR{ID: uint64(done + i), Opcode: transport.WRRDMAWrite,
					Flags: transport.SendSignaled, SGL: []transport.SGE{src.SGE(0, 64)}, RemoteAddr: dst.Addr, RKey: dst.RKey})
			}
			for _, wc := range p.waitWC(t, p.a.SendCQ, burst) {
				if wc.Status != transport.WCSuccess {
					t.Fatal(wc.Status)
				}
			}
			done += burst
			if done%1000 == 0 {
				p.net.Clock.Advance(time.Second) // idle far past the timeout
				p.net.RunQPs()
			}
		}
		c := p.a.QP.Counters()
		probes := uint64(0)
		if drop {
			probes = 1
			if dropped != 1 {
				t.Fatalf("dropped %d ACKs", dropped)
			}
			if got := c.Get(transport.RetransmittedPkts); got != 1 {
				t.Errorf("one dropped ACK: retransmitted_pkts = %d, want 1", got)
			}
			if got := p.b.QP.Counters().Get(transport.DuplicateRequest); got != 1 {
				t.Errorf("one dropped ACK: responder duplicate_request = %d, want 1", got)
			}
		}
		if got := c.Get(transport.RetransmitTimeouts); got != 0 {
			t.Errorf("drop=%v: retransmit_timeouts = %d after %d operations, want 0", drop, got, ops)
		}
		if got := c.Get(transport.TLPProbes); got != probes {
			t.Errorf("drop=%v: tlp_probes = %d, want %d", drop, got, probes)
		}
	}
}

// C9-148 / o9-... RNR: a receiver without a receive WQE answers an RNR NAK
// carrying its min_rnr_timer; the sender waits that long and succeeds once
// a receive is posted.
func TestRNRNakWaitsMinRNRTimerThenSucceeds(t *testing.T) {
	p := newPair(t, 4, tt.Options{MinRNRTimer: 14})
	src := p.buf(t, p.a, 4096, 0x1000)
	dst := p.buf(t, p.b, 4096, 0x2000)
	var nakAt, retryAt time.Time
	naks := 0
	p.net.Tap = func(f *tt.Frame) {
		switch {
		case f.Pkt.BTH.Opcode() == wire.RCAcknowledge && wire.SyndromeType(f.Pkt.AETH.Syndrome()) == wire.AETHRNRNak:
			if got := f.Pkt.AETH.Syndrome(); got != wire.AETHRNRNak|14 {
				t.Errorf("RNR NAK syndrome %#x, want %#x", got, wire.AETHRNRNak|14)
			}
			naks++
			if naks == 2 {
				nakAt = p.net.Clock.Now()
				postRecv(t, p.b, 9, dst.SGE(0, 4096))
			}
		case f.Pkt.BTH.Opcode() == wire.RCSendOnly && naks == 2 && retryAt.IsZero():
			retryAt = p.net.Clock.Now()
		}
	}
	post(t, p.a, transport.SendWR{ID: 1, Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: []transport.SGE{src.SGE(0, 100)}})
	if wc := p.waitWC(t, p.a.SendCQ, 1); wc[0].Status != transport.WCSuccess {
		t.Fatalf("send %v", wc[0].Status)
	}
	if wc := p.waitWC(t, p.b.RecvCQ, 1); wc[0].Status != transport.WCSuccess || wc[0].ByteLen != 100 {
		t.Fatalf("recv %+v", wc[0])
	}
	if waited := retryAt.Sub(nakAt); waited < transport.RNRTimer(14) {
		t.Errorf("retried %v after the RNR NAK, want at least %v", waited, transport.RNRTimer(14))
	}
	if p.a.QP.Counters().Get(transport.RcvdRNRErr) != 2 || p.b.QP.Counters().Get(transport.SendRNRErr) != 2 {
		t.Errorf("rcvd_rnr_err %d, send_rnr_err %d, want 2 and 2", p.a.QP.Counters().Get(transport.RcvdRNRErr),
			p.b.QP.Counters().Get(transport.SendRNRErr))
	}
	if p.a.QP.Counters().Get(transport.RetransmitTimeouts) != 0 {
		t.Error("an RNR wait must not run the retransmit timer")
	}
}

// rnr_retry counts RNR retries (7 would be infinite); when they run out the
// WQE completes RNR_RETRY_EXC_ERR and the rest are flushed.
func TestRNRRetryExhaustedIsRNRRetryExcErr(t *testing.T) {
	p := newPair(t, 5, tt.Options{RNRRetry: tt.U8(3), MinRNRTimer: 1})
	src := p.buf(t, p.a, 4096, 0x1000)
	post(t, p.a, transport.SendWR{ID: 1, Opcode: transport.WRSend, SGL: []transport.SGE{src.SGE(0, 10)}})
	post(t, p.a, transport.SendWR{ID: 2, Opcode: transport.WRSend, SGL: []transport.SGE{src.SGE(0, 10)}})
	wcs := p.waitWC(t, p.a.SendCQ, 2)
	if wcs[0].Status != transport.WCRNRRetryExcErr || wcs[1].Status != transport.WCWRFlushErr {
		t.Fatalf("completions %v, %v; want RNR_RETRY_EXC_ERR, WR_FLUSH_ERR", wcs[0].Status, wcs[1].Status)
	}
	if got := p.b.QP.Counters().Get(transport.SendRNRErr); got != 4 {
		t.Errorf("%d RNR NAKs, want 4 (the first try and 3 retries)", got)
	}
	if p.a.QP.State() != transport.StateErr {
		t.Errorf("QP in %v, want ERR", p.a.QP.State())
	}
}

// retry_cnt retries after timeouts, then RETRY_EXC_ERR; each timeout is
// 4.096 µs × 2^timeout.
func TestRetryExhaustedIsRetryExcErr(t *testing.T) {
	p := newPair(t, 6, tt.Options{RetryCnt: tt.U8(3), Timeout: 14})
	src := p.buf(t, p.a, 4096, 0x1000)
	dst := p.buf(t, p.b, 4096, 0x2000)
	p.net.Faults.Drop = func(f *tt.Frame) bool { return true }
	start := p.net.Clock.Now()
	post(t, p.a, transport.SendWR{ID: 1, Opcode: transport.WRRDMAWrite, SGL: []transport.SGE{src.SGE(0, 64)}, RemoteAddr: dst.Addr, RKey: dst.RKey})
	wcs := p.waitWC(t, p.a.SendCQ, 1)
	if wcs[0].Status != transport.WCRetryExcErr {
		t.Fatalf("status %v, want RETRY_EXC_ERR", wcs[0].Status)
	}
	c := p.a.QP.Counters()
	if c.Get(transport.RetransmitTimeouts) != 4 || c.Get(transport.RetransmittedPkts) != 3 || c.Get(transport.RetryExceededErr) != 1 {
		t.Errorf("timeouts %d, retransmitted %d, retry_exceeded %d; want 4, 3, 1", c.Get(transport.RetransmitTimeouts),
			c.Get(transport.RetransmittedPkts), c.Get(transport.RetryExceededErr))
	}
	if el, want := p.net.Clock.Now().Sub(start), 4*transport.LocalAckTimeout(14); el != want {
		t.Errorf("gave up after %v, want %v (4 timeouts of %v)", el, want, transport.LocalAckTimeout(14))
	}
}

// C9-140: the transport timer starts when the request packet is sent. An
// owner that spends time between reading the clock and handing the batch to
// the link (descheduled, a slow link write) must not take that time out of
// the peer's timeout: the retransmission leaves a whole timeout after the
// first copy left.
func TestRetransmitTimerStartsWhenThePacketLeaves(t *testing.T) {
	p := newPair(t, 16, tt.Options{RetryCnt: tt.U8(1), Timeout: 14})
	src := p.buf(t, p.a, 4096, 0x1000)
	dst := p.buf(t, p.b, 4096, 0x2000)
	const stall = 3 * time.Millisecond
	var left []time.Time
	p.net.Faults.Drop = func(f *tt.Frame) bool {
		if f.From != p.a.Node {
			return false
		}
		if len(left) == 0 {
			p.net.Clock.Advance(stall) // the first batch takes this long to reach the wire
		}
		left = append(left, p.net.Clock.Now())
		return true
	}
	post(t, p.a, transport.SendWR{ID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{src.SGE(0, 64)}, RemoteAddr: dst.Addr, RKey: dst.RKey})
	if wc := p.waitWC(t, p.a.SendCQ, 1); wc[0].Status != transport.WCRetryExcErr {
		t.Fatalf("status %v, want RETRY_EXC_ERR (every copy dropped)", wc[0].Status)
	}
	if len(left) != 2 {
		t.Fatalf("%d copies sent, want 2 (retry_cnt 1)", len(left))
	}
	if gap, want := left[1].Sub(left[0]), transport.LocalAckTimeout(14); gap < want {
		t.Errorf("retransmitted %v after the first copy left, want at least the timeout %v", gap, want)
	}
}

// IBA 9.7.5.2.x error NAKs: the requester completes the WQE with the
// matching status, moves to ERR and flushes the rest; the responder is in
// ERR too and flushes its receives.
func TestErrorNAKsMapToCompletionStatus(t *testing.T) {
	for _, tc := range []struct {
		name     string
		wr       func(src, dst *tt.Buffer) transport.SendWR
		want     transport.WCStatus
		recvWant transport.WCStatus
	}{
		{"bad rkey is REM_ACCESS_ERR", func(src, dst *tt.Buffer) transport.SendWR {
			return transport.SendWR{Opcode: transport.WRRDMAWrite, SGL: []transport.SGE{src.SGE(0, 64)}, RemoteAddr: dst.Addr, RKey: dst.RKey ^ 0x80}
		}, transport.WCRemAccessErr, transport.WCWRFlushErr},
		{"write past the MR is REM_ACCESS_ERR", func(src, dst *tt.Buffer) transport.SendWR {
			return transport.SendWR{Opcode: transport.WRRDMAWrite, SGL: []transport.SGE{src.SGE(0, 64)}, RemoteAddr: dst.Addr + 4090, RKey: dst.RKey}
		}, transport.WCRemAccessErr, transport.WCWRFlushErr},
		{"misaligned atomic is REM_INV_REQ_ERR", func(src, dst *tt.Buffer) transport.SendWR {
			return transport.SendWR{Opcode: transport.WRAtomicFetchAdd, SGL: []transport.SGE{src.SGE(0, 8)}, RemoteAddr: dst.Addr + 4, RKey: dst.RKey, CompareAdd: 1}
		}, transport.WCRemInvReqErr, transport.WCWRFlushErr},
		{"SEND longer than the receive buffer is REM_INV_REQ_ERR", func(src, dst *tt.Buffer) transport.SendWR {
			return transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{src.SGE(0, 3000)}}
		}, transport.WCRemInvReqErr, transport.WCLocLenErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, 7, tt.Options{})
			src := p.buf(t, p.a, 4096, 0x1000)
			dst := p.buf(t, p.b, 4096, 0x2000)
			postRecv(t, p.b, 1, dst.SGE(0, 1000))
			postRecv(t, p.b, 2, dst.SGE(0, 1000))
			wr := tc.wr(src, dst)
			wr.ID = 1
			post(t, p.a, wr)
			post(t, p.a, transport.SendWR{ID: 2, Opcode: transport.WRSend, SGL: []transport.SGE{src.SGE(0, 8)}})
			wcs := p.waitWC(t, p.a.SendCQ, 2)
			if wcs[0].Status != tc.want || wcs[1].Status != transport.WCWRFlushErr {
				t.Fatalf("completions %v, %v; want %v, WR_FLUSH_ERR", wcs[0].Status, wcs[1].Status, tc.want)
			}
			rwcs := p.waitWC(t, p.b.RecvCQ, 2)
			if rwcs[0].Status != tc.recvWant || rwcs[1].Status != transport.WCWRFlushErr {
				t.Errorf("receive completions %v, %v; want %v, WR_FLUSH_ERR", rwcs[0].Status, rwcs[1].Status, tc.recvWant)
			}
			if p.a.QP.State() != transport.StateErr || p.b.QP.State() != transport.StateErr {
				t.Errorf("states %v / %v, want ERR / ERR", p.a.QP.State(), p.b.QP.State())
			}
		})
	}
}

// IBA 10.8.3.3 (LIF): LOCAL_INV executes only after every earlier WQE has
// completed; IBV_SEND_FENCE holds a WQE until earlier READs are done.
func TestLocalInvWaitsForEarlierWQEsAndFenceWaitsForReads(t *testing.T) {
	p := newPair(t, 8, tt.Options{})
	remote := p.buf(t, p.b, 8192, 0x2000)
	// The READ lands in a fast-registered MR (only those can be invalidated).
	backing := make([]byte, 4096)
	key, err := p.a.Node.Mem.AllocMR(p.a.PD, 1)
	if err != nil {
		t.Fatal(err)
	}
	local := &tt.Buffer{Bytes: backing, LKey: key, RKey: key, Addr: 0x1000}
	post(t, p.a, transport.SendWR{ID: 0, Opcode: transport.WRRegMR, RegMR: &transport.RegMRWR{Key: key,
		Pages: []mem.Page{{Backing: mem.NewSliceBacking(backing)}}, PageSize: 4096, IOVA: 0x1000, Length: 4096, Access: mem.LocalWrite}})
	var order []string
	p.net.Tap = func(f *tt.Frame) { order = append(order, f.Pkt.Op.Name) }
	dropFirst := true
	p.net.Faults.Drop = func(f *tt.Frame) bool {
		// the last response: nothing after it shows a gap, so the READ
		// waits for a probe or the timer
		if dropFirst && f.Pkt.BTH.Opcode() == wire.RCRDMAReadResponseLast {
			dropFirst = false
			return true
		}
		return false
	}
	post(t, p.a, transport.SendWR{ID: 1, Opcode: transport.WRRDMARead, SGL: []transport.SGE{local.SGE(0, 4096)}, RemoteAddr: remote.Addr, RKey: remote.RKey})
	post(t, p.a, transport.SendWR{ID: 2, Opcode: transport.WRSend, Flags: transport.SendFence, SGL: []transport.SGE{local.SGE(0, 8)}})
	_ = remote
	post(t, p.a, transport.SendWR{ID: 3, Opcode: transport.WRLocalInv, Flags: transport.SendSignaled, ImmData: local.LKey})
	postRecv(t, p.b, 1, remote.SGE(4096, 64))
	// Run until the wire is quiet but before the retransmit timer.
	if err := p.net.Run(func() bool { return p.net.InFlight() == 0 && p.a.SendCQ.Len() == 0 }, 1000); err != nil {
		t.Fatal(err)
	}
	if info, _ := p.a.Node.Mem.Query(local.LKey); info.State != mem.StateValid {
		t.Fatalf("MR is %v while the READ into it is outstanding: LOCAL_INV ran early", info.State)
	}
	for _, op := range order {
		if op == "RC_SEND_ONLY" {
			t.Fatal("fenced SEND went out before the READ completed")
		}
	}
	wcs := p.waitWC(t, p.a.SendCQ, 1)
	if wcs[0].WRID != 3 || wcs[0].Status != transport.WCSuccess || wcs[0].Opcode != transport.WCLocalInv {
		t.Fatalf("LOCAL_INV completion %+v", wcs[0])
	}
	if info, _ := p.a.Node.Mem.Query(local.LKey); info.State == mem.StateValid {
		t.Error("LOCAL_INV did not invalidate the MR")
	}
}

// A consumer that changes an MR while a WQE using it is unacknowledged is
// counted (mr_changed_under_unacked_wqe), not hidden.
func TestMRChangedUnderUnackedWQEIsCounted(t *testing.T) {
	p := newPair(t, 10, tt.Options{})
	local := p.buf(t, p.a, 4096, 0x1000)
	remote := p.buf(t, p.b, 4096, 0x2000)
	dropped := false
	p.net.Faults.Drop = func(f *tt.Frame) bool {
		if !dropped && f.Pkt.BTH.Opcode() == wire.RCAcknowledge {
			dropped = true
			return true
		}
		return false
	}
	post(t, p.a, transport.SendWR{ID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{local.SGE(0, 64)}, RemoteAddr: remote.Addr, RKey: remote.RKey})
	if err := p.net.Run(func() bool { return dropped && p.net.InFlight() == 0 }, 1000); err != nil {
		t.Fatal(err)
	}
	if err := p.a.Node.Mem.ReregMR(p.a.PD, local.LKey, mem.ReregAccess, mem.Rereg{Access: mem.LocalWrite}); err != nil {
		t.Fatal(err)
	}
	if wc := p.waitWC(t, p.a.SendCQ, 1); wc[0].Status != transport.WCSuccess {
		t.Fatal(wc[0].Status)
	}
	if got := p.a.QP.Counters().Get(transport.MRChangedUnderUnacked); got != 1 {
		t.Errorf("mr_changed_under_unacked_wqe = %d, want 1", got)
	}
}

// UD: the receive buffer starts with the 40-byte GRH (IPv4: 20 zero bytes
// then the IPv4 header); a wrong Q_Key is dropped; a message over the MTU
// fails LOC_LEN_ERR and the QP goes to SQE.
func TestUDGRHQKeyAndMTU(t *testing.T) {
	p := newPair(t, 12, tt.Options{Type: transport.QPTypeUD})
	src := p.buf(t, p.a, 8192, 0x1000)
	dst := p.buf(t, p.b, 8192, 0x2000)
	fill(src.Bytes, 9)
	av := p.a.Node.AV(p.b.Node)
	postRecv(t, p.b, 1, dst.SGE(0, 2048))
	post(t, p.a, transport.SendWR{ID: 1, Opcode: transport.WRSend, SGL: []transport.SGE{src.SGE(0, 7)}, AH: &av,
		RemoteQPN: p.b.QP.QPN(), RemoteQKey: 0x22222222})
	post(t, p.a, transport.SendWR{ID: 2, Opcode: transport.WRSendWithImm, ImmData: 0xabcd, SGL: []transport.SGE{src.SGE(0, 512)},
		AH: &av, RemoteQPN: p.b.QP.QPN(), RemoteQKey: 0x11111111})
	wcs := p.waitWC(t, p.b.RecvCQ, 1)
	if wcs[0].Status != transport.WCSuccess || wcs[0].ByteLen != 552 || wcs[0].SrcQP != p.a.QP.QPN() ||
		wcs[0].Flags&transport.WCWithGRH == 0 || wcs[0].ImmData != 0xabcd {
		t.Fatalf("receive %+v", wcs[0])
	}
	if !bytes.Equal(dst.Bytes[:20], make([]byte, 20)) || dst.Bytes[20] != 0x45 || !bytes.Equal(dst.Bytes[32:36], p.a.Node.GID[12:]) {
		t.Errorf("GRH %x", dst.Bytes[:40])
	}
	if !bytes.Equal(dst.Bytes[40:552], src.Bytes[:512]) {
		t.Error("payload differs")
	}
	if p.b.QP.Counters().Get(transport.RcvdDropped) != 1 {
		t.Error("the datagram with the wrong Q_Key was not dropped")
	}
	post(t, p.a, transport.SendWR{ID: 3, Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: []transport.SGE{src.SGE(0, 2000)},
		AH: &av, RemoteQPN: p.b.QP.QPN(), RemoteQKey: 0x11111111})
	wcs = p.waitWC(t, p.a.SendCQ, 1)
	if wcs[0].Status != transport.WCLocLenErr || p.a.QP.State() != transport.StateSQE {
		t.Errorf("UD over MTU: %v in %v, want LOC_LEN_ERR in SQE", wcs[0].Status, p.a.QP.State())
	}
}

// SRQ: two QPs take receives from one SRQ; the limit event fires once when
// the SRQ drops below its armed limit.
func TestSRQSharedAndLimitEvent(t *testing.T) {
	n := tt.NewNet(13)
	na, nb := n.AddNode(), n.AddNode()
	pd, _ := nb.Mem.AllocPD()
	events := 0
	srq, err := transport.NewSRQ(1, pd, 16, 1, func() { events++ })
	if err != nil {
		t.Fatal(err)
	}
	a1, b1, err := tt.Connect(na, nb, tt.Options{SRQ: [2]*transport.SRQ{nil, srq}, PD: [2]mem.PD{0, pd}})
	if err != nil {
		t.Fatal(err)
	}
	a2, b2, err := tt.Connect(na, nb, tt.Options{SRQ: [2]*transport.SRQ{nil, srq}, PD: [2]mem.PD{0, pd}})
	if err != nil {
		t.Fatal(err)
	}
	dst, _ := b1.RegBuffer(16*256, 0x2000, rw)
	for i := range 8 {
		if err := srq.Post(&transport.RecvWR{ID: uint64(i), SGL: []transport.SGE{dst.SGE(i*256, 256)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := srq.Modify(0, false, 5, true); err != nil {
		t.Fatal(err)
	}
	if err := b1.PostRecv(&transport.RecvWR{ID: 99}); !errors.Is(err, transport.ErrInvalid) {
		t.Errorf("PostRecv on an SRQ QP: %v, want ErrInvalid", err)
	}
	for i, a := range []*tt.Endpoint{a1, a2, a1, a2} {
		src, _ := a.RegBuffer(64, uint64(0x1000+i*0x100), rw)
		post(t, a, transport.SendWR{ID: uint64(i), Opcode: transport.WRSend, SGL: []transport.SGE{src.SGE(0, 64)}})
	}
	if err := n.Run(func() bool { return b1.RecvCQ.Len()+b2.RecvCQ.Len() == 4 }, 10000); err != nil {
		t.Fatal(err)
	}
	if b1.RecvCQ.Len() != 2 || b2.RecvCQ.Len() != 2 {
		t.Errorf("receives %d and %d, want 2 and 2", b1.RecvCQ.Len(), b2.RecvCQ.Len())
	}
	if events != 1 || srq.Len() != 4 {
		t.Errorf("%d limit events with %d WQEs left, want 1 with 4", events, srq.Len())
	}
}

func TestModifyQPFollowsTheTransitionTable(t *testing.T) {
	n := tt.NewNet(14)
	nd := n.AddNode()
	pd, _ := nd.Mem.AllocPD()
	cq := transport.NewMemCQ(16, nil)
	newQP := func(typ transport.QPType) *transport.QP {
		q, err := nd.NewQP(transport.QPConfig{Type: typ, PD: pd, SendCQ: cq, RecvCQ: cq, Cap: transport.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	const (
		S, P, PI, A, Q = transport.AttrState, transport.AttrPort, transport.AttrPKeyIndex, transport.AttrAccessFlags, transport.AttrQKey
	)
	rtr := transport.AttrAV | transport.AttrPathMTU | transport.AttrDestQPN | transport.AttrRQPSN | transport.AttrMaxDestRdAtomic | transport.AttrMinRNRTimer
	rts := transport.AttrSQPSN | transport.AttrTimeout | transport.AttrRetryCnt | transport.AttrRNRRetry | transport.AttrMaxQPRdAtomic
	good := transport.QPAttr{Port: 1, PathMTU: transport.MTU1024, DestQPN: 0x12, AV: nd.AV(nd), RetryCnt: 7, RNRRetry: 7, Timeout: 14}
	steps := []struct {
		name  string
		typ   transport.QPType
		to    transport.QPState
		mask  transport.AttrMask
		tweak func(*transport.QPAttr)
		ok    bool
	}{
		{"RC RESET→INIT needs port, pkey index, access", transport.QPTypeRC, transport.StateInit, S | P | PI, nil, false},
		{"RC RESET→INIT with a Q_Key is not allowed", transport.QPTypeRC, transport.StateInit, S | P | PI | A | Q, nil, false},
		{"RC RESET→RTS is not a transition", transport.QPTypeRC, transport.StateRTS, S | rts, nil, false},
		{"RC RESET→INIT", transport.QPTypeRC, transport.StateInit, S | P | PI | A, nil, true},
		{"RC INIT→RTR without min_rnr_timer", transport.QPTypeRC, transport.StateRTR, S | rtr&^transport.AttrMinRNRTimer, nil, false},
		{"RC INIT→RTR with path MTU 6", transport.QPTypeRC, transport.StateRTR, S | rtr, func(a *transport.QPAttr) { a.PathMTU = 6 }, false},
		{"RC INIT→RTR with rq_psn over 24 bits", transport.QPTypeRC, transport.StateRTR, S | rtr, func(a *transport.QPAttr) { a.RQPSN = 1 << 24 }, false},
		{"RC INIT→RTR", transport.QPTypeRC, transport.StateRTR, S | rtr, nil, true},
		{"RC RTR→RTS without retry_cnt", transport.QPTypeRC, transport.StateRTS, S | rts&^transport.AttrRetryCnt, nil, false},
		{"RC RTR→RTS with retry_cnt 8", transport.QPTypeRC, transport.StateRTS, S | rts, func(a *transport.QPAttr) { a.RetryCnt = 8 }, false},
		{"RC RTR→RTS with max_rd_atomic 129", transport.QPTypeRC, transport.StateRTS, S | rts, func(a *transport.QPAttr) { a.MaxRdAtomic = 129 }, false},
		{"RC RTR→RTS", transport.QPTypeRC, transport.StateRTS, S | rts, nil, true},
		{"RC RTS→RTS may change min_rnr_timer", transport.QPTypeRC, transport.StateRTS, S | transport.AttrMinRNRTimer, nil, true},
		{"RC RTS→RTS may not change the path MTU", transport.QPTypeRC, transport.StateRTS, S | transport.AttrPathMTU, nil, false},
		{"RC RTS→SQD", transport.QPTypeRC, transport.StateSQD, S, nil, true},
		{"RC SQD→RTS", transport.QPTypeRC, transport.StateRTS, S, nil, true},
		{"RC any→ERR", transport.QPTypeRC, transport.StateErr, S, nil, true},
		{"RC ERR→RTS is not a transition", transport.QPTypeRC, transport.StateRTS, S, nil, false},
		{"RC ERR→RESET", transport.QPTypeRC, transport.StateReset, S, nil, true},
	}
	q := newQP(transport.QPTypeRC)
	for _, st := range steps {
		a := good
		a.State = st.to
		if st.tweak != nil {
			st.tweak(&a)
		}
		before := q.State()
		err := q.Modify(&a, st.mask)
		if st.ok && err != nil {
			t.Errorf("%s: %v", st.name, err)
		}
		if !st.ok {
			if !errors.Is(err, transport.ErrInvalid) {
				t.Errorf("%s: got %v, want EINVAL", st.name, err)
			}
			if q.State() != before {
				t.Errorf("%s: failed modify changed the state to %v", st.name, q.State())
			}
		}
	}
	ud := newQP(transport.QPTypeUD)
	if err := ud.Modify(&transport.QPAttr{State: transport.StateInit, Port: 1, QKey: 1}, S|P|PI|Q); err != nil {
		t.Errorf("UD RESET→INIT: %v", err)
	}
	if err := ud.Modify(&transport.QPAttr{State: transport.StateRTR}, S|transport.AttrAV); !errors.Is(err, transport.ErrInvalid) {
		t.Errorf("UD INIT→RTR with an AV: %v, want EINVAL", err)
	}
	if err := ud.PostSend(&transport.SendWR{Opcode: transport.WRSend}); !errors.Is(err, transport.ErrState) {
		t.Errorf("post_send in INIT: %v, want ErrState", err)
	}
}

// A requester that keeps more READs outstanding than the responder's
// max_dest_rd_atomic (plus room for its retries) gets an invalid-request
// NAK instead of an ever-growing response queue. The requester here is
// hand-built packets: our own never exceeds its window.
func TestTooManyOutstandingReadsIsInvalidRequest(t *testing.T) {
	p := newPair(t, 15, tt.Options{RdAtomic: 2, MTU: transport.MTU256})
	dst := p.buf(t, p.b, 1<<20, 0x2000_0000)
	var naks []uint8
	p.net.Tap = func(f *tt.Frame) {
		if f.Pkt.AETH != nil && f.Pkt.BTH.Opcode() == wire.RCAcknowledge {
			naks = append(naks, f.Pkt.AETH.Syndrome())
		}
	}
	psn := uint32(0)
	for i := range 16 {
		f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAReadRequest, PKey: wire.DefaultPKey,
			DestQP: p.b.QP.QPN(), AckReq: true, PSN: psn},
			RETH: wire.RETHFields{VA: dst.Addr, RKey: dst.RKey, Length: 1 << 20}}
		buf := make([]byte, f.EncodedLen())
		f.Encode(buf)
		var rx transport.RxPacket
		if err := rx.Parse(buf); err != nil {
			t.Fatal(err)
		}
		p.b.QP.HandleRequest(&rx)
		psn += (1 << 20) / 256
		if p.b.QP.State() == transport.StateErr {
			if i < 8 {
				t.Fatalf("READ %d refused; max_dest_rd_atomic 2 allows %d queued", i, 2*2+4)
			}
			break
		}
	}
	p.net.Run(func() bool { return p.net.InFlight() == 0 }, 1<<20)
	if len(naks) == 0 || naks[len(naks)-1] != wire.NakInvalidRequest || p.b.QP.State() != transport.StateErr {
		t.Fatalf("NAKs %#x, responder %v; want an invalid-request NAK and ERR", naks, p.b.QP.State())
	}
}

// A receive WQE that failed validation fails the message that reaches it:
// on RC with a remote operational error NAK (the QP goes to ERR).
func TestFaultedRecvWQEIsRemoteOperationalError(t *testing.T) {
	p := newPair(t, 16, tt.Options{})
	src := p.buf(t, p.a, 64, 0x1000)
	if err := p.b.PostRecv(&transport.RecvWR{ID: 5, Fault: transport.WCLocQPOpErr}); err != nil {
		t.Fatal(err)
	}
	post(t, p.a, transport.SendWR{ID: 1, Opcode: transport.WRSend, Flags: transport.SendSolicited, SGL: []transport.SGE{src.SGE(0, 8)}})
	if wc := p.waitWC(t, p.a.SendCQ, 1); wc[0].Status != transport.WCRemOpErr {
		t.Fatalf("sender %v, want REM_OP_ERR", wc[0].Status)
	}
	if wc := p.waitWC(t, p.b.RecvCQ, 1); wc[0].Status != transport.WCLocQPOpErr || wc[0].WRID != 5 {
		t.Fatalf("receiver %+v, want WR 5 with LOC_QP_OP_ERR", wc[0])
	}
}

// The BTH SE bit of a message's last packet reaches its receive completion.
func TestSolicitedEventReachesTheCompletion(t *testing.T) {
	p := newPair(t, 17, tt.Options{})
	src := p.buf(t, p.a, 64, 0x1000)
	dst := p.buf(t, p.b, 64, 0x2000)
	postRecv(t, p.b, 1, dst.SGE(0, 64))
	postRecv(t, p.b, 2, dst.SGE(0, 64))
	post(t, p.a, transport.SendWR{ID: 1, Opcode: transport.WRSend, SGL: []transport.SGE{src.SGE(0, 8)}})
	post(t, p.a, transport.SendWR{ID: 2, Opcode: transport.WRSend, Flags: transport.SendSolicited, SGL: []transport.SGE{src.SGE(0, 8)}})
	wcs := p.waitWC(t, p.b.RecvCQ, 2)
	if wcs[0].Solicited || !wcs[1].Solicited {
		t.Fatalf("solicited flags %v, %v; want false, true", wcs[0].Solicited, wcs[1].Solicited)
	}
}

// QP1 (GSI) is UD with the well-known Q_Key 0x80010000 (IBA 13.5.2.1): its
// datagrams carry that Q_Key whatever the WR says, with source QP 1, and a
// datagram to QP1 with another Q_Key is dropped.
func TestGSIUsesTheWellKnownQKey(t *testing.T) {
	p := newPair(t, 18, tt.Options{Type: transport.QPTypeGSI, QPN: [2]uint32{1, 1}, QKey: wire.GSIQKey})
	src := p.buf(t, p.a, 512, 0x1000)
	dst := p.buf(t, p.b, 512, 0x2000)
	var deths []wire.DETHFields
	p.net.Tap = func(f *tt.Frame) { deths = append(deths, f.Pkt.DETH.Fields()) }
	av := p.a.Node.AV(p.b.Node)
	postRecv(t, p.b, 1, dst.SGE(0, 512))
	post(t, p.a, transport.SendWR{ID: 1, Opcode: transport.WRSend, SGL: []transport.SGE{src.SGE(0, 256)}, AH: &av, RemoteQPN: 1, RemoteQKey: 0x1234})
	wc := p.waitWC(t, p.b.RecvCQ, 1)
	if wc[0].Status != transport.WCSuccess || wc[0].SrcQP != 1 || wc[0].ByteLen != 256+transport.GRHLen {
		t.Fatalf("receive %+v", wc[0])
	}
	if len(deths) != 1 || deths[0] != (wire.DETHFields{QKey: wire.GSIQKey, SrcQP: 1}) {
		t.Errorf("DETH %+v, want Q_Key %#x from QP 1", deths, wire.GSIQKey)
	}
	if err := p.a.QP.Modify(&transport.QPAttr{State: transport.StateRTS, QKey: 0x1111}, transport.AttrState|transport.AttrQKey); !errors.Is(err, transport.ErrInvalid) {
		t.Errorf("setting QP1's Q_Key to 0x1111: %v, want EINVAL", err)
	}
}

// IBA 9.7.5.1.1: one ACK acknowledges every request up to its PSN. The
// responder answers a batch of requests it took in one owner pass with one
// ACK, for the last PSN and the MSN of every message completed; a READ in
// the batch gets its response behind the ACK of what came before it.
func TestAcksOfABatchCoalesce(t *testing.T) {
	for _, withRead := range []bool{false, true} {
		p := newPair(t, 21, tt.Options{PSN: [2]uint32{0x100, 0x100}})
		src := p.buf(t, p.a, 4096, 0x1000)
		dst := p.buf(t, p.b, 8192, 0x2000)
		const n = 8
		for i := range n {
			postRecv(t, p.b, uint64(i), dst.SGE(i*64, 64))
			op := transport.WRSend
			wr := transport.SendWR{ID: uint64(i), Opcode: op, Flags: transport.SendSignaled, SGL: []transport.SGE{src.SGE(0, 16)}}
			if withRead && i == n/2 {
				wr = transport.SendWR{ID: uint64(i), Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
					SGL: []transport.SGE{src.SGE(64, 32)}, RemoteAddr: dst.Addr + 4096, RKey: dst.RKey}
			}
			post(t, p.a, wr)
		}
		p.net.RunQPs() // a sends its n requests, each LAST/ONLY with AckReq
		if got := p.net.InFlight(); got != n {
			t.Fatalf("%d requests on the wire, want %d", got, n)
		}
		var out []string
		p.net.Tap = func(f *tt.Frame) {
			if f.Pkt.Op.Flags&wire.FlagRequest == 0 {
				out = append(out, fmt.Sprintf("%s psn %#x msn %d", f.Pkt.Op.Name, f.Pkt.BTH.PSN(), f.Pkt.AETH.MSN()))
			}
		}
		for range n { // one receive batch: every request before the owner runs
			p.net.Step()
		}
		p.net.RunQPs()
		for p.net.InFlight() > 0 {
			p.net.Step()
		}
		want := []string{"RC_ACKNOWLEDGE psn 0x107 msn 8"}
		if withRead {
			want = []string{"RC_ACKNOWLEDGE psn 0x103 msn 4", "RC_RDMA_READ_RESPONSE_ONLY psn 0x104 msn 5",
				"RC_ACKNOWLEDGE psn 0x107 msn 8"}
		}
		if fmt.Sprint(out) != fmt.Sprint(want) {
			t.Errorf("read %v: responses %v, want %v", withRead, out, want)
		}
		if wcs := p.waitWC(t, p.a.SendCQ, n); len(wcs) != n {
			t.Fatalf("%d completions", len(wcs))
		}
	}
}

// A request the responder has executed and completed is acknowledged even
// if the QP goes to ERR before its coalesced ACK left: the receive
// completion is already the application's (it may react to it, e.g. by
// disconnecting, which moves the QP to ERR), and a requester left without
// the ACK would retry into a QP that no longer answers.
func TestPendingAckLeavesWhenQPGoesToErr(t *testing.T) {
	p := newPair(t, 17, tt.Options{})
	dst := p.buf(t, p.b, 64, 0x3000)
	if err := p.b.PostRecv(&transport.RecvWR{ID: 9, SGL: []transport.SGE{dst.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	p.net.Run(func() bool { return p.net.InFlight() == 0 }, 1<<16)
	var acked []uint32
	p.net.Tap = func(f *tt.Frame) {
		if f.Pkt.AETH != nil && f.Pkt.BTH.Opcode() == wire.RCAcknowledge && wire.SyndromeType(f.Pkt.AETH.Syndrome()) == wire.AETHAck {
			acked = append(acked, f.Pkt.BTH.PSN())
		}
	}
	f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey,
		DestQP: p.b.QP.QPN(), AckReq: true, PSN: 0}}
	buf := make([]byte, f.EncodedLen())
	f.Encode(buf)
	var rx transport.RxPacket
	if err := rx.Parse(buf); err != nil {
		t.Fatal(err)
	}
	p.b.QP.HandleRequest(&rx)
	if wc := tt.Poll(p.b.RecvCQ); len(wc) != 1 || wc[0].Status != transport.WCSuccess || wc[0].WRID != 9 {
		t.Fatalf("receive completion %+v", wc)
	}
	if err := p.b.QP.Modify(&transport.QPAttr{State: transport.StateErr}, transport.AttrState); err != nil {
		t.Fatal(err)
	}
	p.b.QP.RunRecv()
	_ = p.net.Run(func() bool { return len(acked) > 0 }, 1<<16) // ErrStalled if no ACK ever leaves
	if len(acked) != 1 || acked[0] != 0 {
		t.Fatalf("ACKs for PSNs %v, want one for PSN 0", acked)
	}
}
