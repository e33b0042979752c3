package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

func init() {
	register(&command{
		Name:    "stat",
		Args:    "[-a] [--json] [--socket PATH] [--watch [SECONDS] [--count N]]",
		Summary: "print the device's counters (transport and port) and every QP's on one line (those not zero; -a: all), or with --watch their rates",
		NArgs:   -1, // --watch's SECONDS
		Setup: func(fs *flag.FlagSet) runFunc {
			asJSON := fs.Bool("json", false, `print one JSON object: {"device": {NAME: N, ...}, "qps": [{"qpn": N, NAME: N, ...}]}; with --watch one a line, of rates`)
			all := fs.Bool("a", false, "print every counter of each QP, zeros too (the JSON has them all anyway)")
			watch := addWatchFlags(fs)
			run := withDevice(fs, func(d *verbs.Device, stdout io.Writer) error {
				if watch.w.on {
					return watch.run(d, *asJSON, stdout)
				}
				st, err := d.Stats()
				if err != nil {
					return err
				}
				if *asJSON {
					return statJSON(st, stdout)
				}
				return statText(d.Name(), st, *all, stdout)
			})
			return func(args []string, stdout, stderr io.Writer) error {
				if err := watch.positional(args); err != nil {
					return err
				}
				return run(args, stdout, stderr)
			}
		},
	})
}

// statText prints the device counters one a line, then one line per QP in
// the form of `rdma statistic show`: name value pairs, only those not zero
// unless all (a QP has a score of counters, most of them zero: the errors).
func statText(name string, st verbs.Stats, all bool, w io.Writer) error {
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, "device %s\n", name)
	for _, c := range st.Device {
		fmt.Fprintf(b, "    %-30s %d\n", c.Name, c.Value)
	}
	for _, q := range st.QPs {
		fmt.Fprintf(b, "qp 0x%06x", q.QPN)
		for _, c := range q.Counters {
			if all || c.Value != 0 {
				fmt.Fprintf(b, " %s %d", c.Name, c.Value)
			}
		}
		b.WriteByte('\n')
	}
	return b.Flush()
}

// statJSON writes one object, the counters in the daemon's order.
func statJSON(st verbs.Stats, w io.Writer) error {
	return countersJSON(w, "", st.Device, len(st.QPs), func(i int) (uint32, []verbs.Counter) {
		return st.QPs[i].QPN, st.QPs[i].Counters
	}, func(c verbs.Counter) (string, string) { return c.Name, strconv.FormatUint(c.Value, 10) })
}
