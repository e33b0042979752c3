package transport_test

import (
	"testing"
	"time"

	"github.com/vrnic/vrnicd/transport"
	tt "github.com/vrnic/vrnicd/transport/transporttest"
	"github.com/vrnic/vrnicd/transport/wire"
)

// warmUp runs n one-packet WRITEs so that a has measured the round trip.
func warmUp(t *testing.T, p *pair, src, dst *tt.Buffer, n int) {
	t.Helper()
	for i := range n {
		post(t, p.a, transport.SendWR{ID: uint64(1000 + i), Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []transport.SGE{src.SGE(0, 64)}, RemoteAddr: dst.Addr, RKey: dst.RKey})
		if wc := p.waitWC(t, p.a.SendCQ, 1); wc[0].Status != transport.WCSuccess {
			t.Fatal(wc[0].Status)
		}
	}
}

// A lost tail (the last packet of a message, or its ACK, or the one NAK
// of a gap) is recovered by a probe a few round trips later, not by the
// IBA timer: 10 µs a frame, timeout 14 (67 ms); the message completes in
// well under a millisecond with no retransmit timeout and no retry spent.
func TestProbeRecoversTailInRoundTrips(t *testing.T) {
	for _, tc := range []struct {
		name           string
		reqPSN, ackPSN int // offsets of the request and of the ACK or NAK dropped once (-1: none)
	}{
		{"last request", 7, -1},
		{"its ACK", -1, 7},
		{"a middle request and its NAK", 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, 21, tt.Options{Timeout: 14, MTU: transport.MTU1024})
			p.net.Latency = 10 * time.Microsecond
			src := p.buf(t, p.a, 8192, 0x1000)
			dst := p.buf(t, p.b, 8192, 0x2000)
			warmUp(t, p, src, dst, 20)
			first := nextPSN(t, p)
			reqLeft, ackLeft := tc.reqPSN >= 0, tc.ackPSN >= 0
			p.net.Faults.Drop = func(f *tt.Frame) bool {
				off := int(wire.PSN(f.Pkt.BTH.PSN()).Diff(first))
				switch {
				case reqLeft && f.From == p.a.Node && off == tc.reqPSN:
					reqLeft = false
					return true
				case ackLeft && f.From == p.b.Node && f.Pkt.BTH.Opcode() == wire.RCAcknowledge && off == tc.ackPSN:
					ackLeft = false
					return true
				}
				return false
			}
			start := p.net.Clock.Now()
			post(t, p.a, transport.SendWR{ID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
				SGL: []transport.SGE{src.SGE(0, 8192)}, RemoteAddr: dst.Addr, RKey: dst.RKey})
			if wc := p.waitWC(t, p.a.SendCQ, 1); wc[0].Status != transport.WCSuccess {
				t.Fatal(wc[0].Status)
			}
			took := p.net.Clock.Now().Sub(start)
			if reqLeft || ackLeft {
				t.Fatal("the chosen packets were not all dropped")
			}
			c := p.a.QP.Counters()
			if c.Get(transport.RetransmitTimeouts) != 0 || c.Get(transport.TLPProbes) == 0 || took > time.Millisecond {
				t.Errorf("took %v; retransmit_timeouts %d, tlp_probes %d: want a probe, no timeout, under 1 ms",
					took, c.Get(transport.RetransmitTimeouts), c.Get(transport.TLPProbes))
			}
			t.Logf("recovered in %v; %s", took, nonZero(c))
		})
	}
}

// nextPSN is the PSN a's next request takes (its send PSN after the
// warm-up: SQPSN plus what it sent).
func nextPSN(t *testing.T, p *pair) wire.PSN {
	t.Helper()
	var psn wire.PSN
	seen := false
	p.net.Tap = func(f *tt.Frame) {
		if f.From == p.a.Node {
			psn, seen = wire.PSN(f.Pkt.BTH.PSN()).Add(1), true
		}
	}
	defer func() { p.net.Tap = nil }()
	// one more one-packet WRITE shows where the PSNs are
	src := p.buf(t, p.a, 64, 0x9000)
	dst := p.buf(t, p.b, 64, 0x9000)
	warmUp(t, p, src, dst, 1)
	if !seen {
		t.Fatal("no request seen")
	}
	return psn
}

// A peer that stops answering after the round trip was measured: probes
// go (backing off), but none spends a retry, and the QP fails with
// RETRY_EXC_ERR exactly (retry_cnt + 1) × the timeout after the packet
// left, as without probes; the probes stay few.
func TestProbesDoNotHastenRetryExceeded(t *testing.T) {
	p := newPair(t, 22, tt.Options{Timeout: 14, RetryCnt: tt.U8(3)})
	p.net.Latency = 10 * time.Microsecond
	src := p.buf(t, p.a, 4096, 0x1000)
	dst := p.buf(t, p.b, 4096, 0x2000)
	warmUp(t, p, src, dst, 20)
	var left time.Time
	p.net.Faults.Drop = func(f *tt.Frame) bool {
		if f.From == p.a.Node && left.IsZero() {
			left = p.net.Clock.Now()
		}
		return true
	}
	post(t, p.a, transport.SendWR{ID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{src.SGE(0, 64)}, RemoteAddr: dst.Addr, RKey: dst.RKey})
	if wc := p.waitWC(t, p.a.SendCQ, 1); wc[0].Status != transport.WCRetryExcErr {
		t.Fatalf("status %v, want RETRY_EXC_ERR", wc[0].Status)
	}
	c := p.a.QP.Counters()
	if el, want := p.net.Clock.Now().Sub(left), 4*transport.LocalAckTimeout(14); el != want {
		t.Errorf("gave up %v after the packet left, want %v (4 timeouts)", el, want)
	}
	if got := c.Get(transport.RetransmitTimeouts); got != 4 {
		t.Errorf("retransmit_timeouts %d, want 4", got)
	}
	if n := c.Get(transport.TLPProbes); n == 0 || n > 16 {
		t.Errorf("tlp_probes %d, want a few (backing off)", n)
	}
	t.Log(nonZero(c))
}

// A peer that gets slower and slower (10 µs a frame growing to 20 ms, a
// round trip of more than half the IBA timeout) is not declared dead: every WRITE
// completes, and the round-trip estimate keeps up well enough that
// probes stay a small share of the packets.
func TestSlowPeerNotDeclaredDead(t *testing.T) {
	p := newPair(t, 23, tt.Options{Timeout: 14, RetryCnt: tt.U8(1)})
	p.net.Latency = 10 * time.Microsecond
	src := p.buf(t, p.a, 4096, 0x1000)
	dst := p.buf(t, p.b, 4096, 0x2000)
	const ops = 600
	for i := range ops {
		if i%50 == 49 && p.net.Latency < 16*time.Millisecond {
			p.net.Latency *= 2
		}
		post(t, p.a, transport.SendWR{ID: uint64(i), Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []transport.SGE{src.SGE(0, 64)}, RemoteAddr: dst.Addr, RKey: dst.RKey})
		if wc := p.waitWC(t, p.a.SendCQ, 1); wc[0].Status != transport.WCSuccess {
			t.Fatalf("WRITE %d at %v a frame: %v", i, p.net.Latency, wc[0].Status)
		}
	}
	c := p.a.QP.Counters()
	if c.Get(transport.RetransmitTimeouts) != 0 || c.Get(transport.TLPProbes) > ops/20 {
		t.Errorf("%s: want no timeout and probes under 5 %% of %d WRITEs", nonZero(c), ops)
	}
	t.Logf("last latency %v a frame; %s", p.net.Latency, nonZero(c))
}

// A gap in a READ's responses is an implied NAK: the requester asks again
// from the first missing response at once (one request per gap), not after
// a probe or the timer.
func TestReadResponseGapAskedAgainAtOnce(t *testing.T) {
	p := newPair(t, 24, tt.Options{Timeout: 14, MTU: transport.MTU1024})
	p.net.Latency = 10 * time.Microsecond
	local := p.buf(t, p.a, 16384, 0x1000)
	remote := p.buf(t, p.b, 16384, 0x2000)
	for i := range remote.Bytes {
		remote.Bytes[i] = byte(i * 7)
	}
	dropped := false
	var rereads int
	p.net.Faults.Drop = func(f *tt.Frame) bool {
		switch op := f.Pkt.BTH.Opcode(); {
		case op == wire.RCRDMAReadRequest:
			rereads++
		case !dropped && op == wire.RCRDMAReadResponseMiddle:
			dropped = true
			return true
		}
		return false
	}
	start := p.net.Clock.Now()
	post(t, p.a, transport.SendWR{ID: 1, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
		SGL: []transport.SGE{local.SGE(0, 16384)}, RemoteAddr: remote.Addr, RKey: remote.RKey})
	if wc := p.waitWC(t, p.a.SendCQ, 1); wc[0].Status != transport.WCSuccess {
		t.Fatal(wc[0].Status)
	}
	took := p.net.Clock.Now().Sub(start)
	c := p.a.QP.Counters()
	if !dropped || rereads != 2 || c.Get(transport.TLPProbes) != 0 || c.Get(transport.RetransmitTimeouts) != 0 {
		t.Errorf("%d READ requests (want 2), %s", rereads, nonZero(c))
	}
	if !bytesEqual(local.Bytes, remote.Bytes) {
		t.Error("the READ's data differ")
	}
	t.Logf("READ of 16 KiB with a lost response in %v; %s", took, nonZero(c))
}

func bytesEqual(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The send window halves on a loss, once per loss episode, never below
// the floor, and grows back to 128 PSNs when the loss stops; every WRITE
// completes once, in order.
func TestWindowShrinksOnLossAndGrowsBack(t *testing.T) {
	p := newPair(t, 25, tt.Options{Timeout: 14, MTU: transport.MTU1024})
	p.net.Latency = 2 * time.Microsecond
	src := p.buf(t, p.a, 8192, 0x1000)
	dst := p.buf(t, p.b, 8192, 0x2000)
	run := func(n int) {
		t.Helper()
		for i := 0; i < n; i += 16 {
			for j := range 16 {
				post(t, p.a, transport.SendWR{ID: uint64(i + j), Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
					SGL: []transport.SGE{src.SGE(0, 8192)}, RemoteAddr: dst.Addr, RKey: dst.RKey})
			}
			for j, wc := range p.waitWC(t, p.a.SendCQ, 16) {
				if wc.Status != transport.WCSuccess || wc.WRID != uint64(i+j) {
					t.Fatalf("completion %d: %+v", i+j, wc)
				}
			}
		}
	}
	run(64)
	if w := p.a.QP.Info().Window; w != 128 {
		t.Fatalf("window %d before any loss, want 128", w)
	}
	p.net.Faults.Loss = 0.02
	run(400)
	lossy := p.a.QP.Info().Window
	if lossy >= 128 || lossy < 32 {
		t.Errorf("window %d after 2 %% loss, want 32 to 127", lossy)
	}
	p.net.Faults.Loss = 0
	run(4000)
	if w := p.a.QP.Info().Window; w != 128 {
		t.Errorf("window %d after 4000 lossless WRITEs, want 128 again", w)
	}
	c := p.a.QP.Counters()
	t.Logf("window %d under loss; %s", lossy, nonZero(c))
}

// A window shrunk below a message's packets still asks for ACKs within
// it: after a silence long enough for a retransmit timeout (the window
// falls to its floor of 32 PSNs), 64-packet WRITEs go a window a round
// trip, as IBA lets any request carry AckReq, and not a window a timeout
// or a probe (a link flap once left ib_write_bw at 16 messages a second
// so: the packet that asked for an ACK was always past the window).
func TestShrunkWindowStillAsksForAcks(t *testing.T) {
	p := newPair(t, 26, tt.Options{Timeout: 14, MTU: transport.MTU1024})
	p.net.Latency = 10 * time.Microsecond
	src := p.buf(t, p.a, 65536, 0x1000)
	dst := p.buf(t, p.b, 65536, 0x2000)
	warmUp(t, p, src, dst, 20)
	write := func(id uint64) {
		t.Helper()
		post(t, p.a, transport.SendWR{ID: id, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []transport.SGE{src.SGE(0, 65536)}, RemoteAddr: dst.Addr, RKey: dst.RKey})
		if wc := p.waitWC(t, p.a.SendCQ, 1); wc[0].Status != transport.WCSuccess {
			t.Fatal(wc[0].Status)
		}
	}
	// The link is down for 100 ms: one retransmit timeout (67 ms).
	down := p.net.Clock.Now().Add(100 * time.Millisecond)
	p.net.Faults.Drop = func(*tt.Frame) bool { return p.net.Clock.Now().Before(down) }
	write(1)
	p.net.Faults.Drop = nil
	c := p.a.QP.Counters()
	if w := p.a.QP.Info().Window; c.Get(transport.RetransmitTimeouts) == 0 || w >= 64 {
		t.Fatalf("window %d after the outage (%s): want a timeout and a window under 64 PSNs", w, nonZero(c))
	}
	// The first WRITE after the outage may still need a probe (what was in
	// flight when the link came back); the rest none.
	write(2)
	timeouts, probes := c.Get(transport.RetransmitTimeouts), c.Get(transport.TLPProbes)
	start := p.net.Clock.Now()
	for i := range 10 {
		write(uint64(3 + i))
	}
	took := p.net.Clock.Now().Sub(start)
	// 640 packets at 10 us each: 6.4 ms on this link if the window never
	// waits; the defect took 75 ms.
	if c.Get(transport.RetransmitTimeouts) != timeouts || c.Get(transport.TLPProbes) != probes || took > 8*time.Millisecond {
		t.Errorf("10 WRITEs of 64 packets took %v, with %d timeouts and %d probes: want round trips only",
			took, c.Get(transport.RetransmitTimeouts)-timeouts, c.Get(transport.TLPProbes)-probes)
	}
	t.Logf("10 WRITEs in %v after the outage; window now %d; %s", took, p.a.QP.Info().Window, nonZero(c))
}
