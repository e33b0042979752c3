package main

import (
	"math"
	"sort"

	"github.com/vrnic/vrnicd/cmd/internal/oob"
)

// Timestamps are nanoseconds of the monotonic clock where perftest has CPU
// cycles: "cycles per second" is 1e9, "cycles per µs" 1000, so its
// formulas carry over unchanged (and no CPU frequency needs measuring).
const (
	cyclesPerSec  = 1e9
	cyclesPerUsec = 1000
)

// bwRun is what run_iter_bw records: when each WR was posted and when the
// completions (one per cq_mod WRs) arrived, and for a duration run the
// sample window's ends and the WRs completed in it.
type bwRun struct {
	tposted, tcompleted []int64 // by WR number over all QPs
	iters               uint64  // per QP (duration: completed in the sample window)
}

// bwReport is print_report_bw: peak and average bandwidth and message
// rate, in MB/sec (2^20 bytes) or Gb/sec.
func bwReport(p *params, r *bwRun) oob.BWReport {
	n := p.iters * uint64(p.numQPs)
	if p.isDuration {
		n = r.iters
	}
	// cycles_t is unsigned in perftest: tcompleted[0] is unset (0) unless
	// cq_mod is 1, so the first opt_delta wraps to a huge value.
	var optDelta uint64
	if len(r.tcompleted) > 0 && len(r.tposted) > 0 {
		optDelta = uint64(r.tcompleted[0] - r.tposted[0])
	}
	if !p.noPeak {
		// The fastest rate any run of WRs ending at a completion achieved.
		cq := uint64(p.cqMod)
		for i := uint64(0); i < n; i++ {
			for j := roundUp(i+1, cq) - 1; j < n; j += cq {
				if t := uint64(r.tcompleted[j]-r.tposted[i]) / (j - i + 1); t < optDelta {
					optDelta = t
				}
			}
			if n%cq != 0 {
				j := n - 1
				if t := uint64(r.tcompleted[j]-r.tposted[i]) / (j - i + 1); t < optDelta {
					optDelta = t
				}
			}
		}
	}
	format := float64(0x100000) // MB
	if p.gbits {
		format = 125000000
	}
	last := uint64(0)
	if !p.noPeak {
		last = n - 1
	}
	var sum float64
	if len(r.tcompleted) > int(last) && len(r.tposted) > 0 {
		sum = float64(r.tcompleted[last] - r.tposted[0])
	}
	rep := oob.BWReport{
		Size:       p.size,
		Iters:      n,
		BWAvg:      float64(p.size) * float64(n) * cyclesPerSec / (sum * format),
		MsgRateAvg: float64(n) * cyclesPerSec / (sum * 1000000),
	}
	if !p.noPeak {
		// perftest: (double)(size·cycles_per_sec) / (opt_delta·format), in
		// integers until the division.
		rep.BWPeak = float64(p.size*uint64(cyclesPerSec)) / float64(optDelta*uint64(format))
	}
	return rep
}

func roundUp(v, a uint64) uint64 {
	if v%a == 0 {
		return v
	}
	return a * (v/a + 1)
}

// latTail is perftest's LAT_MEASURE_TAIL: the two slowest samples dropped.
const latTail = 2

// latReport is print_report_lat over the post times of an iterations run:
// the gaps between consecutive posts, halved for the ping-pong tests
// (write, send) where a gap is a round trip, sorted; the two largest
// dropped; median, mean, stdev (with perftest's integer truncation) and
// the 99 / 99.9 percentiles.
func latReport(p *params, tposted []int64) latResult {
	measure := len(tposted) - 1
	delta := make([]int64, measure)
	for i := range delta {
		delta[i] = tposted[i+1] - tposted[i]
	}
	rtt := 2.0
	if p.test.verb == verbRead || p.test.verb == verbAtomic {
		rtt = 1
	}
	q := cyclesPerUsec * rtt
	sort.Slice(delta, func(i, j int) bool { return delta[i] < delta[j] })
	measure -= latTail
	if measure < 1 {
		return latResult{size: p.size, iters: p.iters}
	}
	var median int64
	if (measure-1)%2 != 0 {
		median = (delta[measure/2] + delta[measure/2-1]) / 2
	} else {
		median = delta[measure/2]
	}
	var avgSum float64
	for _, d := range delta[:measure] {
		avgSum += float64(d) / q
	}
	avg := avgSum / float64(measure)
	var stdevSum float64
	for _, d := range delta[:measure] {
		tmp := int(avg - float64(d)/q) // C: int temp_var, int pow_var
		stdevSum += float64(int(math.Pow(float64(tmp), 2)))
	}
	i99 := int(math.Ceil(float64(measure) * 0.99))
	i999 := int(math.Ceil(float64(measure) * 0.999))
	return latResult{
		size: p.size, iters: p.iters,
		min: float64(delta[0]) / q, max: float64(delta[measure]) / q,
		typical: float64(median) / q, avg: avg, stdev: math.Sqrt(stdevSum / float64(measure)),
		p99: float64(delta[i99]) / q, p999: float64(delta[i999]) / q,
	}
}

// latDurReport is print_report_lat_duration: the mean latency and the
// transactions per second over the sample window.
func latDurReport(p *params, window int64, iters uint64) (lat, tps float64) {
	rtt := 2.0
	if p.test.verb == verbRead || p.test.verb == verbAtomic {
		rtt = 1
	}
	sample := float64(window)
	lat = sample / cyclesPerUsec / rtt / float64(iters)
	tps = float64(iters) / (sample / (cyclesPerUsec * 1000000))
	return lat, tps
}
