package main

import (
	"fmt"

	"github.com/vrnic/vrnicd/cmd/internal/docgen"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// optionDocs documents each entry of options (getopt's table): mckey's
// usage text has no option texts for docgen.FromHelp to read, so they
// are here; docs_test.go holds the two lists to each other.
var optionDocs = []docgen.Flag{
	{Short: 'm', Arg: "GROUP", Help: "the multicast group (an IPv4 multicast address or a host name); over RoCEv2 rdma_cm joins IPv4 groups only, an IPv6 one fails to join with the kernel's errno 524"},
	{Short: 'M', Arg: "GID", Help: "the group as an unmapped GID (AF_IB), instead of -m; needs -b. RoCEv2's rdma_cm joins no AF_IB group: the join fails with the kernel's errno 524, which is reported"},
	{Short: 's', Help: "be a sender: send -C messages to the group after joining (without -s: a receiver, which waits for -C messages)"},
	{Short: 'b', Arg: "ADDR", Help: "the local address to join from, one of the device's (default the one rdma_cm picks for the group)"},
	{Short: 'c', Arg: "N", Help: fmt.Sprintf("connections: members of the group, each with its own UD QP (default 1, at most %d)", maxConns)},
	{Short: 'C', Arg: "N", Help: "messages each member sends or receives (default 10, at most 65536)"},
	{Short: 'S', Arg: "BYTES", Help: "message size, at most the port's active MTU (default 100; 0 sends no messages)"},
	{Short: 'p', Arg: "SPACE", Help: fmt.Sprintf("the rdma_cm port space: only %#x (RDMA_PS_UDP, the default); mckey's %#x (RDMA_PS_IPOIB) is refused, vrnicd has no IPoIB", verbs.PortSpaceUDP, portSpaceIPoIB)},
	{Short: 'o', Help: "join as a send-only full member: the QP is not attached and the port does not join the group on its link"},
	{Short: 'l', Help: "join without multicast loopback: the QP is made with BLOCK_SELF_MCAST_LB and does not get its own messages"},
	{Long: "socket", Arg: "PATH", Help: "vrnicd's client socket (default $" + verbs.SocketEnv + ", else " + verbs.DefaultSocket + ")"},
}

// docPage is vrnic-mckey(1).
func docPage() *docgen.Page {
	flags := append([]docgen.Flag(nil), optionDocs...)
	docgen.SortFlags(flags)
	return &docgen.Page{
		Name: "vrnic-mckey", Section: 1,
		Summary:  "librdmacm's mckey over vrnicd: UD multicast, members joining a group through rdma_cm",
		Synopsis: []string{"-m GROUP [-b ADDR] [-c N] [-C N] [-S BYTES] [-l] [--socket PATH]", "-m GROUP -s [-o] [-b ADDR] [-c N] [-C N] [-S BYTES] [-l] [--socket PATH]"},
		Description: []string{
			"vrnic-mckey is the vrnicd counterpart of librdmacm's mckey (examples/mckey.c, rdma-core 44): UD multicast through rdma_cm. Each of -c members resolves the group, makes a UD QP and joins the group (rdma_join_multicast: the QP is attached to it unless the join is send-only), prints the group's GID, and, after mckey's 3-second pause, either sends -C messages of -S bytes to the group (-s: SEND with immediate, the QP's number, unsignaled) or waits for as many (a receiver). Then every member leaves. Start the receivers first: the pause is there so that they have joined when the senders send.",
			"Either side can be the real mckey: the same command line, defaults (1 member, 10 messages of 100 bytes), output and exit status (mckey's return value: 0, else its low byte).",
			"It reaches the RDMA device through vrnicd's client socket: --socket, else $" + verbs.SocketEnv + ", else " + verbs.DefaultSocket + ".",
		},
		Flags: flags,
		Env:   []docgen.Env{{Name: verbs.SocketEnv, Help: "vrnicd's socket when --socket is not given (default " + verbs.DefaultSocket + ")."}},
		Extra: []docgen.Section{
			{Title: "EXAMPLES", Paragraphs: []string{
				"vrnic-mckey -m 239.1.1.1 -b 192.0.2.1: a receiver, joining 239.1.1.1 from 192.0.2.1 (a RoCE address of its daemon's) and waiting for 10 messages.",
				"vrnic-mckey -m 239.1.1.1 -b 192.0.2.2 -s: a sender, on another host: 10 messages of 100 bytes to the group; the receivers of every host in it get them.",
				"vrnic-mckey -m 239.1.1.1 -s -o -C 100 -S 1024 --socket /run/vrnicd/eth1.sock: a send-only sender of 100 messages of 1 KiB through the daemon that vrnicd@eth1 runs.",
			}},
			{Title: "EXIT STATUS", Paragraphs: []string{
				"0, after \"return status 0\", when every member joined and the messages were sent or received; else mckey's return value, its low byte (\"return status -1\": 255; also when interrupted, after leaving the group); 1 for a bad command line.",
			}},
		},
		SeeAlso: []string{"vrnicd(8)", "vrnicctl(1)", "vrnic-udaddy(1)", "mckey(1)"},
	}
}
