package transport_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/transport"
	tt "github.com/vrnic/vrnicd/transport/transporttest"
)

// A peer whose answers are mostly quick but one in ten late by up to a
// quarter of the IBA timeout (a VM descheduled, an emulated guest: the
// kernel rxe guest of make interop answers in 0.1 to 17 ms), under 1 %
// loss each way: the round-trip variation inflates the probe time, yet
// every loss is recovered by a probe before the IBA timer (no timeout),
// and the late answers draw few spurious probes.
func TestJitteryPeerLossRecoveredByProbes(t *testing.T) {
	p := newPair(t, 25, tt.Options{Timeout: 14, RetryCnt: tt.U8(7)})
	src := p.buf(t, p.a, 16384, 0x1000)
	dst := p.buf(t, p.b, 16384, 0x2000)
	rng := rand.New(rand.NewPCG(25, 26))
	p.net.Faults.Loss = 0.01
	const ops = 400
	for i := range ops {
		p.net.Latency = 50 * time.Microsecond
		if rng.IntN(10) == 0 {
			p.net.Latency = time.Duration(1+rng.IntN(8)) * time.Millisecond
		}
		post(t, p.a, transport.SendWR{ID: uint64(i), Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []transport.SGE{src.SGE(0, 1024)}, RemoteAddr: dst.Addr, RKey: dst.RKey})
		if wc := p.waitWC(t, p.a.SendCQ, 1); wc[0].Status != transport.WCSuccess {
			t.Fatalf("WRITE %d: %v", i, wc[0].Status)
		}
	}
	c := p.a.QP.Counters()
	if c.Get(transport.RetransmitTimeouts) != 0 || c.Get(transport.TLPProbes) > ops/10 || p.net.Stats.Lost == 0 {
		t.Errorf("%s; lost %d: want losses, no timeout and probes under 10 %% of %d WRITEs", nonZero(c), p.net.Stats.Lost, ops)
	}
	t.Logf("%s; lost %d", nonZero(c), p.net.Stats.Lost)
}
