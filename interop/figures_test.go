package interop_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// figure is what a tool reported about a run, parsed from its output.
type figure struct {
	kind string // "pingpong", "bw", "lat"
	// pingpong: usec/iter and Mbit/s; bw: average MB/s and Mpps; lat:
	// t_typical and t_avg in µs.
	a, b float64
	// iters is the iteration count the tool reports (pingpong: "N iters";
	// perftest: #iterations).
	iters int
}

func (f figure) String() string {
	switch f.kind {
	case "pingpong":
		return fmt.Sprintf("%.1f us/iter, %.2f Mbit/s", f.a, f.b)
	case "bw":
		return fmt.Sprintf("%.2f MB/s, %.6f Mpps", f.a, f.b)
	case "lat":
		return fmt.Sprintf("t_typical %.2f us, t_avg %.2f us", f.a, f.b)
	}
	return ""
}

// ibv_*_pingpong's last two lines (rdma-core pingpong.c and its copies):
//
//	%d bytes in %.2f seconds = %.2f Mbit/sec
//	%d iters in %.2f seconds = %.2f usec/iter
var (
	rePPBytes = regexp.MustCompile(`(?m)^(\d+) bytes in ([\d.]+) seconds = ([\d.]+|inf|nan) Mbit/sec$`)
	rePPIters = regexp.MustCompile(`(?m)^(\d+) iters in ([\d.]+) seconds = ([\d.]+|inf|nan) usec/iter$`)
)

// parsePingpong reads a pingpong summary; ok is false when there is none.
func parsePingpong(out string) (figure, bool) {
	mb, mi := rePPBytes.FindStringSubmatch(out), rePPIters.FindStringSubmatch(out)
	if mb == nil || mi == nil {
		return figure{}, false
	}
	f := figure{kind: "pingpong"}
	f.iters, _ = strconv.Atoi(mi[1])
	f.a, _ = strconv.ParseFloat(mi[3], 64)
	f.b, _ = strconv.ParseFloat(mb[3], 64)
	return f, true
}

// parsePerftest reads perftest's report: the line after the header that
// names the columns (" #bytes     #iterations    BW peak[MB/sec]    BW
// average[MB/sec]   MsgRate[Mpps]" for bandwidth, " #bytes #iterations
// t_min[usec] t_max[usec] t_typical[usec] t_avg[usec] ..." for latency).
// With --report_gbits the bandwidth columns are Gb/sec; that is not used
// here.
func parsePerftest(out string) (figure, bool) {
	lines := strings.Split(out, "\n")
	for i := 0; i+1 < len(lines); i++ {
		h := strings.Fields(lines[i])
		if len(h) < 2 || h[0] != "#bytes" || h[1] != "#iterations" {
			continue
		}
		v := strings.Fields(lines[i+1])
		col := func(name string) (float64, bool) {
			// Header words are split on spaces ("BW peak[MB/sec]" is two);
			// count columns by the words that end in ']' or start with '#'.
			n := 0
			for _, w := range h {
				if strings.HasPrefix(w, "#") || strings.HasSuffix(w, "]") {
					if strings.HasPrefix(w, name) {
						if n >= len(v) {
							return 0, false
						}
						x, err := strconv.ParseFloat(v[n], 64)
						return x, err == nil
					}
					n++
				}
			}
			return 0, false
		}
		iters, ok := col("#iterations")
		if !ok {
			return figure{}, false
		}
		f := figure{iters: int(iters)}
		if a, ok := col("average[MB/sec]"); ok {
			f.kind, f.a = "bw", a
			f.b, _ = col("MsgRate[Mpps]")
			return f, true
		}
		if a, ok := col("t_typical[usec]"); ok {
			f.kind, f.a = "lat", a
			if f.b, ok = col("t_avg[usec]"); !ok {
				return figure{}, false
			}
			return f, true
		}
	}
	return figure{}, false
}

// The parsers against the tools' real output (rdma-core 44 and perftest
// 4.5 under kernel rxe; vrnic-pingpong and vrnic-perf print the same).
func TestParseFigures(t *testing.T) {
	pp := "  local address:  LID 0x0000, QPN 0x000011, PSN 0x2316f4, GID ::ffff:192.0.2.2\n" +
		"  remote address: LID 0x0000, QPN 0x000011, PSN 0xd39e52, GID ::ffff:192.0.2.10\n" +
		"2621440 bytes in 0.38 seconds = 55.52 Mbit/sec\n20 iters in 0.38 seconds = 18887.95 usec/iter\n"
	if f, ok := parsePingpong(pp); !ok || f.iters != 20 || f.a != 18887.95 || f.b != 55.52 {
		t.Errorf("pingpong: %+v %v", f, ok)
	}
	if _, ok := parsePingpong("40 bytes in 0.20 seconds = 0.00 Mbit/sec\n"); ok {
		t.Error("pingpong without its iters line parsed")
	}
	bw := `---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 65536      200              12.34              11.93                0.190880
---------------------------------------------------------------------------------------
`
	if f, ok := parsePerftest(bw); !ok || f.kind != "bw" || f.iters != 200 || f.a != 11.93 || f.b != 0.190880 {
		t.Errorf("bw: %+v %v", f, ok)
	}
	lat := `---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 2       200          1043.21        9824.55      1611.82            1872.05        951.22          6321.10                 9824.55
---------------------------------------------------------------------------------------
`
	if f, ok := parsePerftest(lat); !ok || f.kind != "lat" || f.iters != 200 || f.a != 1611.82 || f.b != 1872.05 {
		t.Errorf("lat: %+v %v", f, ok)
	}
	if _, ok := parsePerftest(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"); ok {
		t.Error("a header without values parsed")
	}
	if _, ok := parsePerftest(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n" +
		"---------------------------------------------------------------------------------------\n"); ok {
		t.Error("a header followed by a rule parsed")
	}
}
