package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// Bounds of stat --watch's interval.
const (
	watchDefault = time.Second
	watchMin     = 10 * time.Millisecond
	watchMax     = time.Hour
)

// watchFlag is --watch [SECONDS]: a flag that may stand alone (every
// second) or take a value (--watch=2, or --watch 2: the positional form is
// taken by stat's run, see watch.positional).
type watchFlag struct {
	on    bool
	every time.Duration
}

func (w *watchFlag) IsBoolFlag() bool { return true }
func (w *watchFlag) String() string {
	if w == nil || !w.on {
		return ""
	}
	return strconv.FormatFloat(w.every.Seconds(), 'g', -1, 64)
}

func (w *watchFlag) Set(s string) error {
	switch s {
	case "true":
		w.on, w.every = true, watchDefault
		return nil
	case "false":
		w.on = false
		return nil
	}
	d, err := parseSeconds(s)
	if err != nil {
		return err
	}
	w.on, w.every = true, d
	return nil
}

func parseSeconds(s string) (time.Duration, error) {
	f, err := strconv.ParseFloat(s, 64)
	d := time.Duration(f * float64(time.Second))
	if err != nil || d < watchMin || d > watchMax {
		return 0, fmt.Errorf("%q is not a number of seconds between %v and %v", s, watchMin.Seconds(), watchMax.Seconds())
	}
	return d, nil
}

// watchOpts are stat's --watch and --count.
type watchOpts struct {
	w     watchFlag
	count *int
}

func addWatchFlags(fs *flag.FlagSet) *watchOpts {
	o := &watchOpts{}
	fs.Var(&o.w, "watch", "print per-second rates every `SECONDS` (default 1) until SIGINT, as 'rdma statistic' users watch a run")
	o.count = fs.Int("count", 0, "with --watch: stop after `N` intervals (0: until SIGINT)")
	return o
}

// usageError is a bad command line found by a command's run: exit 2 with
// the command's usage, as for a bad flag.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// positional takes "stat --watch 2"'s 2; stat has no other argument.
func (o *watchOpts) positional(args []string) error {
	switch {
	case len(args) == 0:
	case len(args) == 1 && o.w.on:
		d, err := parseSeconds(args[0])
		if err != nil {
			return &usageError{fmt.Sprintf("--watch: %v", err)}
		}
		o.w.every = d
	default:
		return &usageError{fmt.Sprintf("unexpected argument %q", args[0])}
	}
	if *o.count < 0 {
		return &usageError{"--count: must be 0 or more"}
	}
	if *o.count > 0 && !o.w.on {
		return &usageError{"--count goes with --watch"}
	}
	return nil
}

// run prints the rates of every interval until --count intervals have
// passed or SIGINT (or SIGTERM) comes.
func (o *watchOpts) run(d *verbs.Device, asJSON bool, stdout io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	prev, err := d.Stats()
	if err != nil {
		return err
	}
	t0 := time.Now()
	tick := time.NewTicker(o.w.every)
	defer tick.Stop()
	for i := 0; *o.count == 0 || i < *o.count; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		cur, err := d.Stats()
		if err != nil {
			return err
		}
		now := time.Now()
		r := rates(prev, cur, now.Sub(t0))
		if asJSON {
			err = r.writeJSON(now, stdout)
		} else {
			err = r.writeText(d.Name(), now, stdout)
		}
		if err != nil {
			return err
		}
		prev, t0 = cur, now
	}
	return nil
}

type rate struct {
	name string
	v    float64
}

type qpRates struct {
	qpn   uint32
	rates []rate
}

// rateSet is one interval's rates.
type rateSet struct {
	secs   float64
	device []rate
	qps    []qpRates
}

// rates is (cur - prev) / dt for every counter; a QP new in cur counts from
// 0. A counter that went down (it cannot, but a restarted daemon's can)
// rates 0.
func rates(prev, cur verbs.Stats, dt time.Duration) rateSet {
	s := rateSet{secs: dt.Seconds()}
	per := func(a, b uint64) float64 {
		if b < a || s.secs <= 0 {
			return 0
		}
		return float64(b-a) / s.secs
	}
	diff := func(p, c []verbs.Counter) []rate {
		old := map[string]uint64{}
		for _, x := range p {
			old[x.Name] = x.Value
		}
		out := make([]rate, 0, len(c))
		for _, x := range c {
			out = append(out, rate{x.Name, per(old[x.Name], x.Value)})
		}
		return out
	}
	s.device = diff(prev.Device, cur.Device)
	before := map[uint32][]verbs.Counter{}
	for _, q := range prev.QPs {
		before[q.QPN] = q.Counters
	}
	for _, q := range cur.QPs {
		s.qps = append(s.qps, qpRates{q.QPN, diff(before[q.QPN], q.Counters)})
	}
	return s
}

// writeText prints the counters that moved, one device line each and one
// line per QP, "NAME RATE/s" pairs as rdma statistic prints values.
func (s rateSet) writeText(dev string, now time.Time, w io.Writer) error {
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, "%s device %s, per second over %.2f s\n", now.Format("15:04:05"), dev, s.secs)
	moved := 0
	for _, r := range s.device {
		if r.v != 0 {
			fmt.Fprintf(b, "    %-30s %.1f/s\n", r.name, r.v)
			moved++
		}
	}
	if moved == 0 {
		b.WriteString("    (no counter moved)\n")
	}
	for _, q := range s.qps {
		line := fmt.Sprintf("qp 0x%06x", q.qpn)
		n := 0
		for _, r := range q.rates {
			if r.v != 0 {
				line += fmt.Sprintf(" %s %.1f/s", r.name, r.v)
				n++
			}
		}
		if n > 0 {
			b.WriteString(line + "\n")
		}
	}
	return b.Flush()
}

// writeJSON writes one object a line: {"time": RFC 3339, "interval_s": S,
// "device": {NAME: RATE, ...}, "qps": [{"qpn": N, NAME: RATE, ...}]}, every
// counter present, in the daemon's order.
func (s rateSet) writeJSON(now time.Time, w io.Writer) error {
	head := fmt.Sprintf(`"time":%q,"interval_s":%s,`, now.UTC().Format(time.RFC3339Nano), jsonFloat(s.secs))
	return countersJSON(w, head, s.device, len(s.qps), func(i int) (uint32, []rate) {
		return s.qps[i].qpn, s.qps[i].rates
	}, func(r rate) (string, string) { return r.name, jsonFloat(r.v) })
}

func jsonFloat(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
