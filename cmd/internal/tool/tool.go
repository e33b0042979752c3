// Package tool holds what vrnic-pingpong and vrnic-perf, the counterparts
// of rdma-core's and perftest's C tools, share besides their TCP
// exchanges (cmd/internal/oob).
package tool

import (
	"context"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/vrnic/vrnicd/cmd/internal/docgen"
	"github.com/vrnic/vrnicd/cmd/internal/version"
)

// Main runs a tool's whole program with a context that SIGINT and SIGTERM
// end, and exits 1 if it fails (run has reported why on stderr).
func Main(run func(ctx context.Context, args []string, stdout, stderr io.Writer) error) {
	if version.Handle(os.Args[1:], filepath.Base(os.Args[0]), os.Stdout) {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		os.Exit(1)
	}
}

// CFloat formats v as C's "%.<prec>f", which spells infinities and NaNs
// "inf", "-inf" and "-nan" (0/0 on x86 is the negative default NaN) where
// Go says "+Inf" and "NaN".
func CFloat(v float64, prec int) string {
	switch {
	case math.IsInf(v, 1):
		return "inf"
	case math.IsInf(v, -1):
		return "-inf"
	case math.IsNaN(v):
		return "-nan"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// Docs runs the hidden --generate-man and --generate-completion SHELL of
// a tool (cmd/internal/docgen) and exits, if the command line asks for
// one; otherwise it returns.
func Docs(page func() *docgen.Page) {
	if ok, code := docgen.Handle(os.Args[1:], page, os.Stdout, os.Stderr); ok {
		os.Exit(code)
	}
}
