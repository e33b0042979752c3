// Command vrnic-perf is the vrnicd counterpart of perftest's bandwidth and
// latency tests:
//
//	vrnic-perf write_bw|read_bw|send_bw|atomic_bw|write_lat|read_lat|send_lat|atomic_lat [options] [server]
//
// with perftest's options (-s, -n, -D, -a, -x, -m, -q, -t, -A, --report_gbits,
// ...), its TCP exchange or, with -R, its rdma_cm mode (so either side can
// be the real ib_write_bw and friends, perftest 4.5 / protocol 6.06) and
// its report, character for character. It reaches the RDMA device through vrnicd's socket
// (--socket). Long runs print a progress line on stderr every 2 seconds.
package main

import (
	"context"
	"fmt"
	"io"

	"github.com/vrnic/vrnicd/cmd/internal/oob"
	"github.com/vrnic/vrnicd/cmd/internal/oob/getopt"
	"github.com/vrnic/vrnicd/cmd/internal/tool"
)

func main() { tool.Docs(docPage); tool.Main(run) }

// run is the whole program: parse, run one test, report on stdout;
// diagnostics on stderr. The returned error has been printed there.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	p, err := parseArgs(args)
	if err != nil {
		getopt.Report(err, stdout, stderr, usage)
		return err
	}
	switch {
	case p.help:
		usage(stdout)
		return nil
	case p.version:
		fmt.Fprintf(stdout, "Version: %s\n", oob.PerftestVersion)
		return nil
	}
	if err := perf(ctx, p, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, err)
		return err
	}
	return nil
}
