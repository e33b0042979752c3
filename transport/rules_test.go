package transport_test

import (
	"bytes"
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
