package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/vrnic/vrnicd/cmd/internal/docgen"
	"github.com/vrnic/vrnicd/cmd/internal/oob"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// docPage is vrnic-perf(1), from getopt's option table (options) and the
// option texts of --help (usage).
func docPage() *docgen.Page {
	var b strings.Builder
	usage(&b)
	help := b.String()
	var flags []docgen.Flag
	for _, o := range options {
		arg, text := docgen.FromHelp(help, o.Short, o.Long)
		refused := slices.Contains(refusedOptions, o)
		if refused {
			text = "perftest's option; vrnic-perf refuses it by name (vrnicd has no such feature)"
		}
		if arg == "" && o.HasArg {
			arg = "ARG"
		}
		flags = append(flags, docgen.Flag{Short: o.Short, Long: o.Long, Arg: arg, Help: text, NoComplete: refused})
	}
	docgen.SortFlags(flags)
	// The tests, each with the options it does not take.
	var cmds []docgen.Command
	for _, name := range testNames {
		t := tests[name]
		c := docgen.Command{Name: name, Summary: testSummary(t)}
		for _, o := range takenOptions {
			if o.Short != 0 && !takes(t, o.Short) {
				c.Omit = append(c.Omit, "-"+string(o.Short), "--"+o.Long)
			}
		}
		cmds = append(cmds, c)
	}
	return &docgen.Page{
		Name: "vrnic-perf", Section: 1,
		Summary:  "perftest's bandwidth and latency tests over vrnicd",
		Synopsis: []string{"TEST [options]", "TEST [options] HOST"},
		Description: []string{
			"vrnic-perf is the vrnicd counterpart of perftest's ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw, ib_write_lat, ib_read_lat, ib_send_lat and ib_atomic_lat (perftest " + oob.PerftestVersion + "): the same options, TCP exchange and report, so either side can be the real tool. Without HOST it is the server and waits for a client; with HOST it connects to the server there.",
			"With -R (perftest's rdma_cm mode) there is no TCP: the exchange goes as SENDs over an rdma_cm connection of its own on the port, and each of the test's QPs is connected by rdma_cm on the same port; HOST is then the server's RoCE address. -z alone moves only the exchange.",
			"TEST is one of write_bw, read_bw, send_bw, atomic_bw, write_lat, read_lat, send_lat, atomic_lat.",
		},
		Flags:        flags,
		Commands:     cmds,
		CommandFirst: true,
		CommandName:  "test",
		Env:          []docgen.Env{{Name: verbs.SocketEnv, Help: "vrnicd's socket when --socket is not given (default " + verbs.DefaultSocket + ")."}},
		Extra: []docgen.Section{
			{Title: "EXAMPLES", Paragraphs: []string{
				"vrnic-perf write_bw on the server, whose daemon has the RoCE address 192.0.2.1, then vrnic-perf write_bw 192.0.2.1 on the client: RDMA WRITE bandwidth, 5000 messages of 64 KiB, over perftest's TCP exchange on port 18515 (either side may be ib_write_bw).",
				"vrnic-perf send_lat -a on the server and vrnic-perf send_lat -a 192.0.2.1 on the client: SEND latency for every size from 2 bytes to 8 MiB.",
				"vrnic-perf read_bw -R -q 4 -D 10 --report_gbits (and the same with 192.0.2.1 on the client): RDMA READ bandwidth over 4 QPs connected by rdma_cm, for 10 seconds, in Gb/s.",
			}},
		},
		SeeAlso: []string{"vrnicd(8)", "vrnicctl(1)", "vrnic-pingpong(1)", "ib_write_bw(1)"},
	}
}

// testSummary is a test's line in vrnic-perf(1) and the completions.
func testSummary(t test) string {
	what := map[verb]string{verbSend: "SEND", verbWrite: "RDMA WRITE", verbRead: "RDMA READ",
		verbAtomic: "atomic fetch-and-add or compare-and-swap"}[t.verb]
	kind := "bandwidth"
	if t.lat {
		kind = "latency"
	}
	return fmt.Sprintf("%s %s, as perftest's %s", what, kind, t.tool)
}
