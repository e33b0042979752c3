package main

import (
	"bytes"
	"io"
	"strings"

	"github.com/vrnic/vrnicd/cmd/internal/docgen"
)

// linkbenchCommands are dispatch's commands, with their operands and
// summaries for vrnic-linkbench(1).
var linkbenchCommands = []docgen.Command{
	{Name: "bw", Args: "--tx NS:IFACE --rx NS:IFACE [options]", Summary: "stream frames from --tx to --rx in sendmmsg batches and report the rate received, in Mpps and Gb/s, for each of -n samples of -D seconds and the best one"},
	{Name: "lat", Args: "--a NS:IFACE --b NS:IFACE [options]", Summary: "bounce one frame at a time between --a and --b and report half the round trip (mean, median, p99) of the best of -n samples"},
	{Name: "size", Args: "[--op OP] [-p BYTES] [--ipv6]", Summary: "print the Ethernet frame size (without FCS) of one packet of that shape"},
}

// argNames name the flags' arguments where the flag package's type name
// ("int", "string", "value") says too little; "command/flag" for a flag
// whose meaning differs between commands.
var argNames = map[string]string{
	"op": "OP", "p": "BYTES", "n": "N", "D": "SECONDS", "tx": "NS:IFACE", "rx": "NS:IFACE",
	"bw/b": "N", "lat/a": "NS:IFACE", "lat/b": "NS:IFACE", "q": "N", "rx-mode": "ring|recvmmsg",
	"block": "BYTES", "blocks": "N", "ring-version": "3|2", "workers": "N",
	"iters": "N", "ring": "0|2|3", "timeout": "DURATION",
}

// helpNotes replace the flag set's text of a flag a command accepts but
// does not use ("command/flag").
var helpNotes = map[string]string{
	"size/n": "accepted, as every command's flag set has it, and unused",
}

// commandFlags are the flags command cmd's flag set defines, read from
// what it prints for -h (flag.PrintDefaults: "  -name type" and the text
// on the next lines, indented by a tab; a one-letter switch's text on its
// own line), so the page cannot drift from the parser.
func commandFlags(cmd string) []docgen.Flag {
	var help bytes.Buffer
	_ = dispatch([]string{cmd, "-h"}, io.Discard, &help)
	var flags []docgen.Flag
	for _, line := range strings.Split(help.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "  -"); ok {
			head, text, _ := strings.Cut(rest, "\t")
			name, typ, _ := strings.Cut(head, " ")
			f := docgen.Flag{Long: name, Arg: strings.ToUpper(typ), Help: strings.TrimSpace(text)}
			if a, ok := argNames[cmd+"/"+name]; ok && f.Arg != "" {
				f.Arg = a
			} else if a, ok := argNames[name]; ok && f.Arg != "" {
				f.Arg = a
			}
			if len(name) == 1 {
				f.Short, f.Long = name[0], ""
			}
			flags = append(flags, f)
			continue
		}
		if text, ok := strings.CutPrefix(line, "    \t"); ok && len(flags) > 0 {
			f := &flags[len(flags)-1]
			f.Help = strings.TrimSpace(f.Help + " " + text)
		}
	}
	for i, f := range flags {
		name := f.Long
		if f.Short != 0 {
			name = string(f.Short)
		}
		if h, ok := helpNotes[cmd+"/"+name]; ok {
			flags[i].Help = h
		}
	}
	docgen.SortFlags(flags)
	return flags
}

// docPage is vrnic-linkbench(1), from the flag sets of its commands.
func docPage() *docgen.Page {
	cmds := append([]docgen.Command(nil), linkbenchCommands...)
	for i := range cmds {
		cmds[i].Flags = commandFlags(cmds[i].Name)
	}
	return &docgen.Page{
		Name: "vrnic-linkbench", Section: 1,
		Summary: "measure what an Ethernet link carries of vrnicd's RoCEv2 frames, without vrnicd",
		Synopsis: []string{
			"bw --tx NS:IFACE --rx NS:IFACE [options]",
			"lat --a NS:IFACE --b NS:IFACE [options]",
			"size [--op OP] [-p BYTES] [--ipv6]",
		},
		Description: []string{
			"vrnic-linkbench measures the link's own capacity for vrnicd: it sends and receives RoCEv2-shaped frames of the sizes vrnicd puts on the wire through the same packet-socket code the daemon uses in raw mode (sendmmsg, a PACKET_MMAP ring or recvmmsg), with no daemon, no QPs and no transport, so that vrnicd's figures (vrnic-perf(1)) can be set beside the link's. It is what make perf runs first. It has no counterpart among rdma-core's or perftest's tools.",
			"It does not use vrnicd and has no --socket: it opens AF_PACKET sockets on the interfaces itself, which needs CAP_NET_RAW, and enters the network namespaces (setns), which needs CAP_SYS_ADMIN; run it as root. An endpoint NS:IFACE is the interface IFACE in the namespace NS of ip netns (/run/netns/NS); a bare IFACE is in vrnic-linkbench's own namespace. The receiving side binds UDP port 4791 on its interface with sockets that drop every datagram, as vrnicd does in raw mode, so the kernel treats the frames as the daemon's host does; a vrnicd already running on that interface makes this fail.",
			"Frame shapes (--op) follow vrnicd's packets: write_middle (BTH), write_first and write_only (BTH and RETH), send_only (BTH), read_middle (BTH), each with -p payload bytes and the 4-byte ICRC, over IPv4 or (--ipv6) IPv6, from the sending interface's MAC to the receiving one's and from 192.0.2.1 to 192.0.2.2 (2001:db8::1 to 2001:db8::2), the addresses to give the two interfaces. The last line of output is one RESULT line of key=value pairs, for scripts. Figures are reported, never judged. vrnic-linkbench COMMAND -h lists the command's flags; Go's flag syntax applies (-flag and --flag alike, -flag=value).",
		},
		Commands: cmds,
		Extra: []docgen.Section{
			{Title: "EXAMPLES", Paragraphs: []string{
				"vrnic-linkbench bw --tx A:veth0 --rx B:veth1: the bandwidth of a veth pair between the namespaces A and B (ip netns add A; ip netns add B; ip link add veth0 netns A type veth peer veth1 netns B; both ends up, with 192.0.2.1/24 on veth0 and 192.0.2.2/24 on veth1) for RDMA WRITE MIDDLE packets of 4096 bytes, 3 samples of 2 seconds.",
				"vrnic-linkbench lat --a A:veth0 --b B:veth1 --op send_only -p 64: half the round trip of a 64-byte SEND ONLY frame over the same pair.",
				"vrnic-linkbench bw --tx A:veth0 --rx B:veth1 -p 1024 -D 5 --rx-mode recvmmsg --spin: the same pair with 1024-byte payloads and 5-second samples, received with recvmmsg by a polling receiver.",
				"vrnic-linkbench size --op write_first -p 4096 --ipv6: the size of a 4096-byte RDMA WRITE FIRST frame over IPv6.",
			}},
			{Title: "EXIT STATUS", Paragraphs: []string{
				"0 when the measurement ran (or after -h); 1 for a bad command line or a failure (an interface or namespace missing, no privileges, a vrnicd on the receiving interface).",
			}},
		},
		SeeAlso: []string{"vrnicd(8)", "vrnicctl(1)", "vrnic-perf(1)", "ip-netns(8)", "packet(7)"},
	}
}
