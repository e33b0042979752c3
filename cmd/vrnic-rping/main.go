// Command vrnic-rping is the vrnicd counterpart of librdmacm's rping: an
// rdma_cm client and server with rping's command line (-s -c -a -p -C -S
// -v -V -d -P), its protocol (the client advertises a buffer in a SEND,
// struct rping_rdma_info {u64 buf; u32 rkey; u32 size} big-endian; the
// server RDMA READs it, then RDMA WRITEs it back into a second one) and its
// output, so either side can be the kernel's rping. It reaches the RDMA
// device through vrnicd's socket (--socket).
//
//	vrnic-rping -s -a 192.0.2.1 -v              # server
//	vrnic-rping -c -a 192.0.2.1 -C 10 -v -V     # client
//
// The client exits 0 once its pings are done (and, with -V, the data came
// back intact); the server once its client disconnects (never with -P).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/vrnic/vrnicd/cmd/internal/oob/getopt"
	"github.com/vrnic/vrnicd/cmd/internal/tool"
)

func main() { tool.Docs(docPage); tool.Main(run) }

// run is the whole program: diagnostics on stderr (as rping's), ping data
// on stdout. The error it returns has been reported.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseArgs(args)
	if err != nil {
		getopt.Report(err, stdout, stderr, usage)
		return err
	}
	if cfg.help {
		usage(stdout)
		return nil
	}
	if cfg.server {
		err = runServer(ctx, cfg, stdout, stderr)
	} else {
		err = runClient(ctx, cfg, stdout, stderr)
	}
	if err != nil && !errors.Is(err, errReported) {
		fmt.Fprintln(stderr, err)
	}
	return err
}
