// Command vrnic-pingpong is the vrnicd counterpart of rdma-core's
// ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong
// (--mode rc|uc|ud|srq): the same command line, the same TCP exchange of
// QP addresses (so either side can be the kernel tool), the same QP
// attributes and traffic, the same output. It reaches the RDMA device
// through vrnicd's socket (--socket).
//
//	vrnic-pingpong -g 1 -s 2500 -n 2                # server
//	vrnic-pingpong -g 1 -s 2500 -n 2 192.0.2.11     # client
//
// It exits 0 only when every iteration completed (and, with -c, the
// received data checked out).
package main

import (
	"context"
	"fmt"
	"io"

	"github.com/vrnic/vrnicd/cmd/internal/oob/getopt"
	"github.com/vrnic/vrnicd/cmd/internal/tool"
)

func main() { tool.Docs(docPage); tool.Main(run) }

// run is the whole program: it parses args, runs one pingpong and writes
// the tool's output to stdout, diagnostics to stderr. The error it returns
// has already been reported on stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseArgs(args)
	if err != nil {
		getopt.Report(err, stdout, stderr, func(w io.Writer) { usage(w, cfg.mode) })
		return err
	}
	if cfg.help {
		usage(stdout, cfg.mode)
		return nil
	}
	if err := pingpong(ctx, cfg, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, err)
		return err
	}
	return nil
}
