package interop_test

// The suite's summary: each case's row, recorded as it ends, and the table
// of figures and the loss table TestMain prints after the run.

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
)

// row is one line of the summary table.
type row struct {
	bed, name, dir string
	mtu            int
	gid            string
	result         string // PASS, FAIL, SKIP
	figure, note   string
	fig            figure // the parsed figure of a PASS (the loss table's ratios)
	secs           float64
	why            string // a failure's message, for the digest that ends the log
}

var (
	summaryMu sync.Mutex
	summary   []row
)

func (r *row) fail(t *testing.T, format string, args ...any) {
	t.Helper()
	r.result = "FAIL"
	msg := fmt.Sprintf(format, args...)
	r.why = msg
	t.Error(msg)
}

// digest is the head and the tail of a failure's message: CI keeps only
// the end of a long log, so the reason a case failed is printed again
// after the tables.
func digest(msg string) string {
	lines := strings.Split(strings.TrimRight(msg, "\n"), "\n")
	if len(lines) <= 18 {
		return strings.Join(lines, "\n")
	}
	return strings.Join(lines[:12], "\n") + fmt.Sprintf("\n[... %d lines ...]\n", len(lines)-18) + strings.Join(lines[len(lines)-6:], "\n")
}

// record adds the row to the summary; a row left without a result is one
// whose test stopped early (t.Fatal in a helper): FAIL.
func (r *row) record(t *testing.T) {
	if r.result == "" {
		r.result = "FAIL"
	}
	if t.Failed() {
		r.result = "FAIL"
	}
	summaryMu.Lock()
	summary = append(summary, *r)
	summaryMu.Unlock()
}

// printSummary writes the table of every case run, at the end of the
// test binary (TestMain), so `make interop` ends with it.
func printSummary() {
	summaryMu.Lock()
	defer summaryMu.Unlock()
	if len(summary) == 0 {
		return
	}
	counts := map[string]int{}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "\n=== interop summary (kernel rxe "+"in QEMU vs vrnicd)")
	fmt.Fprintln(w, "bed\tcase\tdirection\tMTU\tGID\tresult\tfigure\tnotes\tsecs")
	for _, r := range summary {
		counts[r.result]++
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%.1f\n", r.bed, r.name, r.dir, r.mtu, r.gid, r.result, r.figure, r.note, r.secs)
	}
	w.Flush()
	fmt.Printf("=== %d cases: %d PASS, %d FAIL, %d SKIP\n", len(summary), counts["PASS"], counts["FAIL"], counts["SKIP"])
	// The figures the issue asks for side by side: against the kernel peer
	// and between two vrnicd daemons on the same bridge, same run.
	w = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	header := false
	for _, pr := range summary {
		if pr.dir != "vrnicd-vrnicd" {
			continue
		}
		if !header {
			fmt.Fprintln(w, "\n=== figures: vrnicd against kernel rxe (guest under "+accelName()+") and vrnicd against vrnicd, same bridge, same run")
			fmt.Fprintln(w, "bed\ttest\tMTU\tkernel server, vrnicd client\tvrnicd server, kernel client\tvrnicd - vrnicd")
			header = true
		}
		cells := map[string]string{}
		for _, r := range summary {
			if r.bed == pr.bed && r.name == pr.name && r.gid == pr.gid && r.result == "PASS" {
				cells[r.dir] = r.figure
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\n", pr.bed, pr.name, pr.mtu, dash(cells["kernel-server"]), dash(cells["kernel-client"]), dash(cells["vrnicd-vrnicd"]))
	}
	w.Flush()
	printLossTable()
	var reasons []string
	for _, r := range summary {
		if r.result == "FAIL" && r.why != "" {
			where := fmt.Sprintf("%s / %s / %s / MTU %d / %s", r.bed, r.name, r.dir, r.mtu, r.gid)
			fmt.Printf("\n=== FAIL %s:\n%s\n", where, digest(r.why))
			first, _, _ := strings.Cut(r.why, "\n")
			reasons = append(reasons, where+": "+first)
		}
	}
	// Last, one line per failure: what a truncated log still shows.
	for _, l := range reasons {
		fmt.Println("=== FAILED " + l)
	}
}

// lossBeds pairs each impaired bed with the clean bed of its MTU.
var lossBeds = [][2]string{{"impaired", "link1500"}, {"impaired9000", "link9000"}}

// printLossTable writes each bandwidth case of the impaired beds beside the
// same case, direction and GID on the clean bed of the same run: the
// guest is slow, so the figures are small, but the ratio of the same pair
// with and without the impairment carries over.
func printLossTable() {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	header := false
	for _, lb := range lossBeds {
		for _, r := range summary {
			if r.bed != lb[0] || r.result != "PASS" || r.fig.kind != "bw" {
				continue
			}
			for _, c := range summary {
				if c.bed != lb[1] || c.name != r.name || c.dir != r.dir || c.gid != r.gid || c.result != "PASS" || c.fig.a <= 0 {
					continue
				}
				if !header {
					fmt.Fprintf(w, "\n=== loss: %.0f %% loss and %.0f %% reordering of RoCEv2 frames each way against the same bed unimpaired (MB/s), same run\n", impairLoss*100, impairReorder*100)
					fmt.Fprintln(w, "bed\ttest\tdirection\tGID\timpaired\tclean\tratio\tnotes")
					header = true
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%.2f\t%.2f\t%.2f\t%s\n", r.bed, r.name, r.dir, r.gid, r.fig.a, c.fig.a, r.fig.a/c.fig.a, r.note)
			}
		}
	}
	w.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// accel is how the guests ran ("tcg" or "kvm"), for the figures' header.
var accel string

func accelName() string {
	if accel == "" {
		return "?"
	}
	return accel
}
