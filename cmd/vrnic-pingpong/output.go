package main

import (
	"fmt"
	"io"
	"time"

	"github.com/vrnic/vrnicd/cmd/internal/oob"
	"github.com/vrnic/vrnicd/cmd/internal/tool"
)

// The lines rdma-core's pingpong examples print, character for character.

// printLocal is the "  local address:" line (ud_pingpong has a ':' where
// the others have a ',' before the GID).
func printLocal(w io.Writer, m *mode, d oob.PingpongDest) {
	fmt.Fprintf(w, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n",
		d.LID, d.QPN, d.PSN, m.localSep, oob.GIDString(d.GID))
}

func printRemote(w io.Writer, d oob.PingpongDest) {
	fmt.Fprintf(w, "  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n",
		d.LID, d.QPN, d.PSN, oob.GIDString(d.GID))
}

// printSummary is the two result lines. rdma-core measures with
// gettimeofday into a float (single precision) of microseconds and mixes
// float and double arithmetic; this does the same so the figures match.
func printSummary(w io.Writer, size, iters int, elapsed time.Duration) {
	usec := float32(elapsed.Microseconds())
	bytes := int64(size) * int64(iters) * 2
	fmt.Fprintf(w, "%d bytes in %s seconds = %s Mbit/sec\n",
		bytes, cf(float64(usec)/1000000.), cf(float64(bytes)*8./float64(usec)))
	fmt.Fprintf(w, "%d iters in %s seconds = %s usec/iter\n",
		iters, cf(float64(usec)/1000000.), cf(float64(usec/float32(iters))))
}

// cf is C's "%.2f".
func cf(v float64) string { return tool.CFloat(v, 2) }
