// Command vrnic-linkbench measures what an Ethernet link carries for
// vrnicd: RoCEv2-shaped frames of the sizes vrnicd puts on the wire, sent
// and received through the same nic/link code the daemon uses, so the
// daemon's figures can be set beside the link's.
//
//	vrnic-linkbench bw  --tx NS:IFACE --rx NS:IFACE [options]
//	vrnic-linkbench lat --a NS:IFACE --b NS:IFACE [options]
//	vrnic-linkbench size [--op OP] [-p PAYLOAD] [--ipv6]
//
// bw streams frames from --tx with sendmmsg batches (-b, default 32) and
// counts them at --rx with a PACKET_MMAP TPACKET_V3 ring (or recvmmsg,
// --rx-mode recvmmsg), sleeping until readable when it finds none (or polling,
// --spin); it reports the received rate in Mpps and Gb/s (Ethernet
// frame bytes without FCS) for each of -n samples of -D seconds and the
// best one. lat bounces one frame at a time between --a and --b and
// reports half the round trip; reads sleep until readable (or poll,
// --spin). NS is a namespace from ip netns; without "NS:" the tool's own.
//
// Frame shapes (--op) follow vrnicd's packets: write_middle (BTH), write_first
// and write_only (BTH+RETH), send_only (BTH), read_middle (BTH), each with
// -p payload bytes and the 4-byte ICRC. The last line of output is one
// "RESULT" line of key=value pairs, for scripts. Figures are reported,
// never judged.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/vrnic/vrnicd/cmd/internal/tool"
	"github.com/vrnic/vrnicd/nic/link"
)

func main() { tool.Docs(docPage); tool.Main(run) }

// Limits of the options.
const (
	maxSamples  = 100
	maxDuration = 10 * time.Minute
	maxIters    = 10_000_000
	maxBatch    = 1024
)

func run(_ context.Context, args []string, stdout, stderr io.Writer) error {
	err := dispatch(args, stdout, stderr)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stderr, "vrnic-linkbench:", err)
		return err
	}
	return nil
}

func dispatch(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: vrnic-linkbench bw|lat|size [options] (see -h of each)")
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("vrnic-linkbench "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	op := fs.String("op", "write_middle", "packet shape: write_middle, write_first, write_only, send_only, read_middle")
	payload := fs.Int("p", 4096, "payload bytes per packet (the RoCE path MTU for a WRITE MIDDLE)")
	v6 := fs.Bool("ipv6", false, "IPv6 instead of IPv4")
	samples := fs.Int("n", 3, "samples; the best is reported")
	switch cmd {
	case "bw":
		return cmdBW(fs, args, op, payload, v6, samples, stdout)
	case "lat":
		return cmdLat(fs, args, op, payload, v6, samples, stdout)
	case "size":
		if err := fs.Parse(args); err != nil {
			return err
		}
		s, err := pickShape(*op, *payload)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, describe(s, *payload, *v6))
		fmt.Fprintf(stdout, "RESULT frame=%d\n", frameLen(s, *payload, *v6))
		return nil
	}
	return fmt.Errorf("unknown command %q: want bw, lat or size", cmd)
}

func pickShape(op string, payload int) (shape, error) {
	s, ok := shapes[op]
	if !ok {
		return shape{}, fmt.Errorf("unknown --op %q", op)
	}
	if payload < 0 || payload > 65000 {
		return shape{}, fmt.Errorf("payload %d out of range 0..65000", payload)
	}
	return s, nil
}

func cmdBW(fs *flag.FlagSet, args []string, op *string, payload *int, v6 *bool, samples *int, stdout io.Writer) error {
	tx := fs.String("tx", "", "sender NS:IFACE")
	rx := fs.String("rx", "", "receiver NS:IFACE")
	dur := secondsFlag(2 * time.Second)
	fs.Var(&dur, "D", "length of one sample: seconds, or a duration such as 500ms")
	batch := fs.Int("b", 32, "frames per sendmmsg")
	qps := fs.Int("q", 1, "distinct destination QPs the frames cycle through")
	bypass := fs.Bool("qdisc-bypass", false, "PACKET_QDISC_BYPASS on the sender")
	rxMode := fs.String("rx-mode", "ring", "receive path: ring (TPACKET_V3, in place) or recvmmsg (today's daemon's)")
	blk := fs.Int("block", 1<<20, "ring block size in bytes")
	blocks := fs.Int("blocks", 64, "ring blocks")
	version := fs.Int("ring-version", 3, "ring: 3 (TPACKET_V3) or 2 (TPACKET_V2)")
	workers := fs.Int("workers", 1, "receiving sockets in a PACKET_FANOUT group steering by DestQP (use -q to spread QPs)")
	spin := fs.Bool("spin", false, "the receiver polls, yielding the CPU, instead of sleeping (as a busy vrnicd worker)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s, err := pickShape(*op, *payload)
	if err != nil {
		return err
	}
	o := bwOpts{shape: s, payload: *payload, v6: *v6, dur: time.Duration(dur), warm: 300 * time.Millisecond,
		samples: *samples, batch: *batch, qps: *qps, bypass: *bypass, rxRing: *rxMode == "ring", spin: *spin,
		ring: link.RingConfig{Version: *version, BlockSize: *blk, BlockCount: *blocks}, workers: *workers, progress: stdout}
	switch {
	case *rxMode != "ring" && *rxMode != "recvmmsg":
		return fmt.Errorf("--rx-mode %q: want ring or recvmmsg", *rxMode)
	case *samples < 1 || *samples > maxSamples:
		return fmt.Errorf("-n %d out of range 1..%d", *samples, maxSamples)
	case dur <= 0 || time.Duration(dur) > maxDuration:
		return fmt.Errorf("-D %v out of range (0, %v]", time.Duration(dur), maxDuration)
	case *batch < 1 || *batch > maxBatch:
		return fmt.Errorf("-b %d out of range 1..%d", *batch, maxBatch)
	case *workers < 1 || *workers > link.MaxFanout:
		return fmt.Errorf("--workers %d out of range 1..%d", *workers, link.MaxFanout)
	case *qps < 1 || *qps > *batch:
		return fmt.Errorf("-q %d out of range 1..%d (-b)", *qps, *batch)
	}
	if o.tx, err = parseEndpoint(*tx); err != nil {
		return fmt.Errorf("--tx: %w", err)
	}
	if o.rx, err = parseEndpoint(*rx); err != nil {
		return fmt.Errorf("--rx: %w", err)
	}
	how := *rxMode
	if o.rxRing {
		how = fmt.Sprintf("TPACKET_V%d ring", *version)
	}
	if o.workers > 1 {
		how += fmt.Sprintf(" on %d fanout sockets", o.workers)
	}
	if o.spin {
		how += ", polled"
	}
	fmt.Fprintf(stdout, "link bw %s -> %s: %s, sendmmsg of %d, receive by %s, %d × %v\n",
		o.tx, o.rx, describe(s, o.payload, o.v6), o.batch, how, o.samples, o.dur)
	res, err := runBW(o)
	if err != nil {
		return err
	}
	b := best(res)
	fmt.Fprintf(stdout, "best: %.3f Mpps, %.2f Gb/s (%d B frames)\n", b.mpps, b.gbps, frameLen(s, o.payload, o.v6))
	fmt.Fprintf(stdout, "RESULT mode=bw frame=%d mpps=%.4f gbps=%.3f payload_gbps=%.3f tx_mpps=%.4f\n",
		frameLen(s, o.payload, o.v6), b.mpps, b.gbps, b.mpps*float64(o.payload)*8/1e3, b.txMpps)
	return nil
}

func cmdLat(fs *flag.FlagSet, args []string, op *string, payload *int, v6 *bool, samples *int, stdout io.Writer) error {
	a := fs.String("a", "", "pinger NS:IFACE")
	b := fs.String("b", "", "echoer NS:IFACE")
	iters := fs.Int("iters", 5000, "round trips per sample")
	spin := fs.Bool("spin", false, "poll without sleeping")
	ring := fs.Int("ring", 0, "receive with a ring: 3 (TPACKET_V3: shows its retire-timeout latency) or 2 (TPACKET_V2); 0: recvmmsg")
	timeout := fs.Duration("timeout", 200*time.Millisecond, "a round trip slower than this counts as lost")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s, err := pickShape(*op, *payload)
	if err != nil {
		return err
	}
	switch {
	case *samples < 1 || *samples > maxSamples:
		return fmt.Errorf("-n %d out of range 1..%d", *samples, maxSamples)
	case *iters < 1 || *iters > maxIters:
		return fmt.Errorf("--iters %d out of range 1..%d", *iters, maxIters)
	case *ring != 0 && *ring != 2 && *ring != 3:
		return fmt.Errorf("--ring %d: want 0, 2 or 3", *ring)
	case *timeout <= 0 || *timeout > time.Minute:
		return fmt.Errorf("--timeout %v out of range (0, 1m]", *timeout)
	}
	o := latOpts{shape: s, payload: *payload, v6: *v6, iters: *iters, samples: *samples, spin: *spin,
		ring: *ring, timeout: *timeout, progress: stdout}
	if o.a, err = parseEndpoint(*a); err != nil {
		return fmt.Errorf("--a: %w", err)
	}
	if o.b, err = parseEndpoint(*b); err != nil {
		return fmt.Errorf("--b: %w", err)
	}
	wait := "sleeping reads"
	if o.spin {
		wait = "polling reads"
	}
	fmt.Fprintf(stdout, "link lat %s <-> %s: %s, %s, %d × %d round trips\n",
		o.a, o.b, describe(s, o.payload, o.v6), wait, o.samples, o.iters)
	res, err := runLat(o)
	if err != nil {
		return err
	}
	bst := res[0]
	for _, x := range res[1:] {
		if x.mean < bst.mean {
			bst = x
		}
	}
	fmt.Fprintf(stdout, "best: half round trip mean %.2f us, median %.2f us, p99 %.2f us\n", us(bst.mean), us(bst.p50), us(bst.p99))
	fmt.Fprintf(stdout, "RESULT mode=lat frame=%d half_rtt_us=%.2f median_us=%.2f p99_us=%.2f lost=%d\n",
		frameLen(s, o.payload, o.v6), us(bst.mean), us(bst.p50), us(bst.p99), bst.lost)
	return nil
}

// secondsFlag is -D: perftest's whole seconds, or a Go duration.
type secondsFlag time.Duration

func (f *secondsFlag) String() string { return time.Duration(*f).String() }
func (f *secondsFlag) Set(s string) error {
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		*f = secondsFlag(n * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(s)
	*f = secondsFlag(d)
	return err
}
