package main

import (
	"flag"
	"sort"

	"github.com/vrnic/vrnicd/cmd/internal/docgen"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// docPage is vrnicctl(1), from the registered commands' own flag sets.
func docPage() *docgen.Page {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	p := &docgen.Page{
		Name: "vrnicctl", Section: 1,
		Summary:  "inspect a vrnicd device: attributes, counters, QPs, the objects clients hold, the host's daemons, live capture, pcap decoding",
		Synopsis: []string{"[--socket PATH] [--json] COMMAND [ARGS]", "help [COMMAND]"},
		Description: []string{
			"vrnicctl talks to vrnicd(8) through its client socket. Every command's flags may come before or after its arguments; --socket and --json may also come before the command.",
		},
		Env: []docgen.Env{{Name: verbs.SocketEnv, Help: "the daemon's socket when --socket is not given (default " + verbs.DefaultSocket + "); for devices, a colon-separated list of sockets, as the drop-in libibverbs reads it."}},
		Extra: []docgen.Section{
			{Title: "EXAMPLES", Paragraphs: []string{
				"vrnicctl devinfo: the device's attributes, its port and GID table, as ibv_devinfo -v shows them, then its netdev, mode (tap or raw), the daemon's version and uptime; vrnicctl devinfo --json gives the same as one object, the ports and their GIDs as lists; vrnicctl --socket /run/vrnicd/eth1.sock devinfo for the daemon that vrnicd@eth1 runs.",
				"vrnicctl devices: every vrnicd on the host, as ibv_devices lists devices: the sockets in /run/vrnicd and those $VRNICD_SOCKET names, each with its device name, node GUID and netdev, or \"not running\" for a socket whose daemon has gone.",
				"vrnicctl res: how many PDs, MRs, MWs, CQs, QPs, SRQs, AHs and clients the device has, as rdma resource show; vrnicctl res mr lists every client's MRs with lkey, rkey, IOVA, length, access and the owner's pid and process name, vrnicctl res qp the QPs with type, state and depths, vrnicctl res client each connection's objects against its quotas (2/64: two PDs of 64) and its user's. Another user's keys show as - unless you are root or the daemon's user, as rdma shows keys to CAP_NET_ADMIN only.",
				"vrnicctl qp: the QPs, with their state, peer and PSNs; vrnicctl --json qp for scripts.",
				"vrnicctl stat: the device's counters, then each QP's on one line with only the counters that are not zero; vrnicctl stat -a shows every counter of each QP.",
				"vrnicctl stat --watch: the counters' rates every second until interrupted; vrnicctl stat --watch 5 --count 12 for a minute of 5-second intervals.",
				"vrnicctl capture | tshark -r -: the daemon's RoCEv2 frames live, decoded by tshark; vrnicctl capture --qp 0x11 --count 100 -w qp17.pcap keeps 100 frames of QP 17 and its peer in a file, and vrnicctl decode qp17.pcap prints them one a line (--json: {\"packets\": [...]}, a packet a line).",
				"vrnicctl impair --loss 1 --direction out: drop 1 % of the frames the port sends (to see a transfer retransmit); vrnicctl impair shows what is set, vrnicctl impair off ends it.",
			}},
			{Title: "EXIT STATUS", Paragraphs: []string{
				"0 on success, 1 when the command failed (its error is one line on stderr), 2 for a bad command line."}},
		},
		SeeAlso: []string{"vrnicd(8)", "vrnic-perf(1)", "vrnic-pingpong(1)", "tshark(1)", "rdma(8)"},
	}
	global := map[string]docgen.Flag{}
	for _, n := range names {
		c := commands[n]
		cmd := docgen.Command{Name: c.Name, Args: c.Args, Summary: c.Summary, Flags: commandFlags(c)}
		for _, f := range cmd.Flags {
			if _, ok := globalFlags[f.Long]; ok {
				if _, seen := global[f.Long]; !seen {
					global[f.Long] = f
				}
			}
		}
		p.Commands = append(p.Commands, cmd)
	}
	p.Commands = append(p.Commands, docgen.Command{Name: "help", Args: "[COMMAND]", Summary: "list the commands, or show one command's arguments and flags"})
	for n := range globalFlags {
		f := global[n]
		if n == "json" {
			f.Help = "JSON output, for the commands that have it (see each command); before the command as well as after it"
		}
		p.Flags = append(p.Flags, f)
	}
	p.Flags = append(p.Flags, docgen.Flag{Long: "help", Help: "list the commands"})
	docgen.SortFlags(p.Flags)
	return p
}

// commandFlags are the flags c's Setup defines, as docgen flags.
func commandFlags(c *command) []docgen.Flag {
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	c.Setup(fs)
	var out []docgen.Flag
	fs.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		df := docgen.Flag{Long: f.Name, Arg: arg, Help: usage}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			df.OptArg = arg != ""
			if !df.OptArg {
				df.Arg = ""
			}
		}
		if len(f.Name) == 1 {
			df.Short, df.Long = f.Name[0], ""
		}
		out = append(out, df)
	})
	return out
}
