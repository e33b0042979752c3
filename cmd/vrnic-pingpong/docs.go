package main

import (
	"sort"
	"strings"

	"github.com/vrnic/vrnicd/cmd/internal/docgen"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// docPage is vrnic-pingpong(1): its own --mode and --socket and, for every
// mode, the getopt table the mode parses (mode.options), with the texts of
// that mode's --help.
func docPage() *docgen.Page {
	names := make([]string, 0, len(modes))
	for n := range modes {
		names = append(names, n)
	}
	sort.Strings(names)
	// An option is documented by the first mode whose --help has it; one
	// no mode's --help has is refused by name.
	const refused = "rdma-core's option; vrnic-pingpong refuses it by name (vrnicd has no such feature)"
	at := map[string]int{}
	var flags []docgen.Flag
	var tools []string
	add := func(help string, short byte, long string, hasArg bool) {
		key := string(short) + "/" + long
		arg, text := docgen.FromHelp(help, short, long)
		if arg == "" && hasArg {
			arg = "ARG"
		}
		i, seen := at[key]
		switch {
		case !seen && text == "":
			at[key] = len(flags)
			flags = append(flags, docgen.Flag{Short: short, Long: long, Arg: arg, Help: refused})
		case !seen:
			at[key] = len(flags)
			flags = append(flags, docgen.Flag{Short: short, Long: long, Arg: arg, Help: text})
		case text != "" && flags[i].Help == refused:
			flags[i].Arg, flags[i].Help = arg, text
		}
	}
	for _, n := range names {
		m := modes[n]
		tools = append(tools, m.tool)
		var b strings.Builder
		usage(&b, m)
		help := b.String()
		if n == names[0] {
			add(help, 0, "mode", true)
			add(help, 0, "socket", true)
			add(help, 'h', "help", false)
		}
		for _, o := range m.options() {
			add(help, o.Short, o.Long, o.HasArg)
		}
	}
	docgen.SortFlags(flags)
	return &docgen.Page{
		Name: "vrnic-pingpong", Section: 1,
		Summary:  "rdma-core's ibv_*_pingpong examples over vrnicd",
		Synopsis: []string{"[--mode rc|uc|ud|srq] [options]", "[--mode rc|uc|ud|srq] [options] HOST"},
		Description: []string{
			"vrnic-pingpong is the vrnicd counterpart of rdma-core's " + strings.Join(tools, ", ") + " (--mode chooses): the same command line, the same TCP exchange of QP addresses (so either side can be the kernel tool), the same QP attributes, traffic and output. Without HOST it is the server; with HOST it connects to the server there. It exits 0 only when every iteration completed (and, with -c, the received data checked out).",
			"Options exist in the modes whose rdma-core tool has them: -m not in ud, -q in srq only.",
		},
		Flags: flags,
		Env:   []docgen.Env{{Name: verbs.SocketEnv, Help: "vrnicd's socket when --socket is not given (default " + verbs.DefaultSocket + ")."}},
		Extra: []docgen.Section{
			{Title: "EXAMPLES", Paragraphs: []string{
				"vrnic-pingpong -g 1 on the server, whose daemon has the RoCE address 192.0.2.1, then vrnic-pingpong -g 1 192.0.2.1 on the client: ibv_rc_pingpong's 1000 RC exchanges of 4096 bytes, GID index 1 (the IPv4-mapped GID); either side may be ibv_rc_pingpong -g 1.",
				"vrnic-pingpong --mode ud -g 1 -c on the server and vrnic-pingpong --mode ud -g 1 -c 192.0.2.1 on the client: ibv_ud_pingpong's UD exchange of 1024-byte messages, the data checked.",
				"vrnic-pingpong --mode srq -q 4 -g 1 --socket /run/vrnicd/eth1.sock (and the same with 192.0.2.1 on the client): ibv_srq_pingpong with 4 QPs sharing a receive queue, through the daemon that vrnicd@eth1 runs.",
			}},
		},
		SeeAlso: []string{"vrnicd(8)", "vrnicctl(1)", "vrnic-perf(1)", "ibv_rc_pingpong(1)"},
	}
}
