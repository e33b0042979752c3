package main

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
)

func mustParse(t *testing.T, args string) *params {
	t.Helper()
	p, err := parseArgs(strings.Fields(args))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBWReport(t *testing.T) {
	p := mustParse(t, "write_bw -s 1000 -n 5 -Q 2 -t 4 host")
	p.iters = 4 // the math for 4 WRs, a completion every 2
	run := &bwRun{tposted: []int64{1000, 1010, 1020, 1030}, tcompleted: []int64{0, 1100, 0, 1200}}
	r := bwReport(p, run)
	// The best run of WRs: 0..1 or 0..3, 50 ns a WR.
	wantPeak := 1000 * 1e9 / (50 * float64(0x100000))
	wantAvg := 1000 * 4 * 1e9 / (200 * float64(0x100000))
	if r.Size != 1000 || r.Iters != 4 || math.Abs(r.BWPeak-wantPeak) > 1e-9 || math.Abs(r.BWAvg-wantAvg) > 1e-9 || math.Abs(r.MsgRateAvg-20) > 1e-12 {
		t.Errorf("%+v, want peak %g avg %g rate 20", r, wantPeak, wantAvg)
	}
	p.gbits = true
	if r := bwReport(p, run); math.Abs(r.BWAvg-1000*4*1e9/(200*125e6)) > 1e-12 {
		t.Errorf("Gb/s: %+v", r)
	}
	// noPeak (the send_bw server, durations): first post to last completion.
	p.gbits, p.noPeak = false, true
	if r := bwReport(p, &bwRun{tposted: []int64{5000}, tcompleted: []int64{5400}}); r.BWPeak != 0 || math.Abs(r.BWAvg-1000*4*1e9/(400*float64(0x100000))) > 1e-9 {
		t.Errorf("noPeak: %+v", r)
	}
	// The last completion may stand for fewer than cq_mod WRs: iters 5,
	// cq_mod 2: completions after WRs 1, 3 and 4 (recorded at index 4).
	p.noPeak, p.iters = false, 5
	run = &bwRun{tposted: []int64{1000, 1010, 1020, 1030, 1040}, tcompleted: []int64{0, 1100, 0, 1200, 1300}}
	if r := bwReport(p, run); math.Abs(r.BWPeak-wantPeak) > 1e-9 || math.Abs(r.BWAvg-1000*5*1e9/(300*float64(0x100000))) > 1e-9 {
		t.Errorf("tail: %+v", r)
	}
}

func TestLatReport(t *testing.T) {
	p := mustParse(t, "write_lat -s 64 -n 7 host")
	// Gaps of 1 … 6 µs between posts; a gap is a round trip: halved.
	r := latReport(p, []int64{0, 1000, 3000, 6000, 10000, 15000, 21000})
	want := latResult{size: 64, iters: 7, min: 0.5, max: 2.5, typical: 1.25, avg: 1.25, stdev: 0, p99: 2.5, p999: 2.5}
	if r != want {
		t.Errorf("got %+v\nwant %+v", r, want)
	}
	// perftest's stdev truncates each deviation to an int µs.
	p = mustParse(t, "read_lat -n 8 host") // reads: a gap is one round trip, not halved
	r = latReport(p, []int64{0, 1000, 4000, 9000, 10000, 20000, 21000, 31000})
	// gaps 1,3,5,1,10,1,10 µs; sorted 1,1,1,3,5,10,10; the 5 kept: 1,1,1,3,5
	if r.min != 1 || r.max != 10 || r.typical != 1 || r.avg != 2.2 || r.p99 != 10 || r.p999 != 10 {
		t.Errorf("got %+v", r)
	}
	// deviations 1.2,1.2,1.2,-0.8,-2.8 → ints 1,1,1,0,-2 → squares 1,1,1,0,4
	if want := math.Sqrt(7.0 / 5); math.Abs(r.stdev-want) > 1e-12 {
		t.Errorf("stdev %g, want %g", r.stdev, want)
	}
	lat, tps := latDurReport(p, 2e9, 1000) // 1000 reads in 2 s
	if lat != 2000 || tps != 500 {
		t.Errorf("duration: %g µs, %g tps", lat, tps)
	}
}

// TestParams: perftest's defaults and force_dependecies' adjustments of the
// options it accepts.
func TestParams(t *testing.T) {
	for args, check := range map[string]func(p *params) bool{
		"write_bw host": func(p *params) bool {
			return p.size == 65536 && p.iters == 5000 && p.txDepth == 128 && p.cqMod == 1 && p.rxDepth == 1
		},
		"read_bw host":               func(p *params) bool { return p.iters == 1000 && p.cqMod == 1 && p.inlineSize == 0 },
		"write_bw -s 3000 -n 5 host": func(p *params) bool { return p.txDepth == 5 && p.cqMod == 5 && !p.noPeak },
		"send_bw -s 3000 -n 5":       func(p *params) bool { return p.rxDepth == 6 && p.noPeak && !p.client() },
		"send_bw -n 50":              func(p *params) bool { return p.rxDepth == 50 && p.txDepth == 50 },
		"write_lat host":             func(p *params) bool { return p.size == 2 && p.txDepth == 1 && p.cqMod == 1 && p.iters == 1000 },
		"atomic_bw host":             func(p *params) bool { return p.size == 8 && p.atomic == fetchAndAdd },
		"atomic_lat -A CMP_AND_SWAP": func(p *params) bool { return p.atomic == cmpAndSwap },
		"write_bw -a -n 5":           func(p *params) bool { return p.runAll && p.size == maxSize && p.cqMod == 5 },
		"write_bw -D 4":              func(p *params) bool { return p.isDuration && p.iters == 0 && p.noPeak && p.margin == 1 },
		"write_bw -n 30000 host":     func(p *params) bool { return p.noPeak },
		"write_bw -s 64K --iters=10": func(p *params) bool { return p.size == 65536 && p.iters == 10 },
		"write_bw -s 1M -Q 4 -n 8":   func(p *params) bool { return p.size == 1<<20 && p.cqMod == 4 && p.reqCQMod },
		"read_bw -o 4 -q 3 -u 18":    func(p *params) bool { return p.outReads == 4 && p.numQPs == 3 && p.qpTimeout == 18 },
		"send_bw --report_gbits -e":  func(p *params) bool { return p.gbits && p.events },
	} {
		p, err := parseArgs(strings.Fields(args))
		if err != nil || !check(p) {
			t.Errorf("%q: %+v %v", args, p, err)
		}
	}
}

// TestParamsRefused: perftest's refusals, with its messages.
func TestParamsRefused(t *testing.T) {
	for args, want := range map[string]string{
		"":                         "no test",
		"bw":                       `unknown test "bw"`,
		"atomic_bw -s 16":          "Message size cannot be changed for Atomic tests",
		"write_lat -q 2":           "Multiple QPs only available on bw tests",
		"write_bw -e":              "Events feature not available on WRITE verb",
		"write_bw -n 3":            "Iteration num should be between 5 and 100000000",
		"write_bw -A CMP_AND_SWAP": "You are not running the atomic_lat/bw test!",
		"atomic_bw -A XOR":         "Invalid Atomic type!",
		"write_bw -c UC":           "vrnic-perf runs RC",
		"write_bw -b":              "-b: not supported by vrnic-perf",
		"write_bw -O":              "-O: not supported by vrnic-perf",
		"write_bw -D 2 -f 1":       "please check that DURATION > 2*MARGIN",
		"write_bw -D 4 -a":         "Duration mode currently doesn't support running on all sizes.",
		"read_bw -D 4 -e":          "Duration mode doesn't work with events.",
		"read_bw -r 4":             "On RDMA verbs rx depth can be only 1",
		"write_bw -s 0":            "Message Size should be between 1 and 2147483647",
		"write_bw -x 70":           "Gid index should be between 0 and 64",
		"write_bw -I 100 -o 3":     "Setting Outstanding reads only available on READ verb",
		"read_lat -I 8":            "Inline feature not available on READ/Atomic verbs",
		"send_lat -I 913":          "Max inline should be between 0 and 912",
		"write_bw a b":             `unexpected arguments ["b"]`,
	} {
		_, err := parseArgs(strings.Fields(args))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", args, err, want)
		}
	}
}

// A mistyped test name is one line on stderr with the list of tests, not
// the whole usage.
func TestUnknownTestIsOneLine(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"wrte_bw"}, &stdout, &stderr); err == nil {
		t.Fatal("wrte_bw accepted")
	}
	if stdout.Len() != 0 || strings.Count(stderr.String(), "\n") != 1 || !strings.Contains(stderr.String(), "write_bw read_bw") {
		t.Errorf("stdout %q, stderr %q: want one line naming the tests", stdout.String(), stderr.String())
	}
}
