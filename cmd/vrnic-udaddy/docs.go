package main

import (
	"fmt"

	"github.com/vrnic/vrnicd/cmd/internal/docgen"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// optionDocs documents each entry of options (getopt's table): udaddy's
// usage text has no option texts for docgen.FromHelp to read, so they
// are here; docs_test.go holds the two lists to each other.
var optionDocs = []docgen.Flag{
	{Short: 's', Arg: "ADDR", Help: "the server's address (an IP address or a host name): this side is the client and resolves -c UD peers there"},
	{Short: 'b', Arg: "ADDR", Help: "the local address to bind: the server's listen address (default every address), the client's source"},
	{Short: 'f', Arg: "FORMAT", Help: "the address format of -s and -b: ip, ipv6 or name (each takes an IP address or a host name); udaddy's gid (AF_IB) is refused"},
	{Short: 'P', Arg: "SPACE", Help: "the rdma_cm port space: udp only (udaddy's ipoib is refused)"},
	{Short: 'p', Arg: "SPACE", Help: fmt.Sprintf("the port space as a number, udaddy's older spelling of -P: only %#x (RDMA_PS_UDP, the default)", verbs.PortSpaceUDP)},
	{Short: 'c', Arg: "N", Help: fmt.Sprintf("connections: UD peers the client resolves, SIDR requests the server answers (default 1, at most %d)", maxConns)},
	{Short: 'C', Arg: "N", Help: "messages each side sends to each peer (default 10, at most 65536)"},
	{Short: 'S', Arg: "BYTES", Help: "message size, at most the port's active MTU (default 100; 0 sends no messages)"},
	{Short: 't', Arg: "TOS", Help: "udaddy's type of service; refused: vrnicd's rdma_cm has no such feature"},
	{Long: "port", Arg: "PORT", Help: fmt.Sprintf("the rdma_cm port (default %d, udaddy's fixed one)", defaultPort)},
	{Long: "socket", Arg: "PATH", Help: "vrnicd's client socket (default $" + verbs.SocketEnv + ", else " + verbs.DefaultSocket + ")"},
}

// docPage is vrnic-udaddy(1).
func docPage() *docgen.Page {
	flags := append([]docgen.Flag(nil), optionDocs...)
	docgen.SortFlags(flags)
	return &docgen.Page{
		Name: "vrnic-udaddy", Section: 1,
		Summary:  "librdmacm's udaddy over vrnicd: UD peers resolved by rdma_cm exchanging SENDs",
		Synopsis: []string{"[-b ADDR] [-c N] [-C N] [-S BYTES] [--port PORT] [--socket PATH]", "-s ADDR [-b ADDR] [-c N] [-C N] [-S BYTES] [--port PORT] [--socket PATH]"},
		Description: []string{
			"vrnic-udaddy is the vrnicd counterpart of librdmacm's udaddy (examples/udaddy.c): UD over rdma_cm's RDMA_PS_UDP port space. The client resolves -c UD peers at the server with SIDR and sends -C messages of -S bytes to each (SENDs with its QPN as immediate data); the server answers each SIDR request with a UD QP of its own, receives the messages and sends as many back through an address handle made from the first message's GRH. Either side can be the real udaddy: the same command line (-s, the server's address, makes a client; without it a server), defaults (port 7174, 1 connection, 10 messages of 100 bytes) and output.",
			"As in udaddy, -p is the port space, not the port, which is fixed at 7174; --port changes it.",
			"It reaches the RDMA device through vrnicd's client socket: --socket, else $" + verbs.SocketEnv + ", else " + verbs.DefaultSocket + ".",
		},
		Flags: flags,
		Env:   []docgen.Env{{Name: verbs.SocketEnv, Help: "vrnicd's socket when --socket is not given (default " + verbs.DefaultSocket + ")."}},
		Extra: []docgen.Section{
			{Title: "EXAMPLES", Paragraphs: []string{
				"vrnic-udaddy -b 192.0.2.1 -c 4: the server, answering four SIDR requests on 192.0.2.1 (a RoCE address of its daemon's), port 7174.",
				"vrnic-udaddy -s 192.0.2.1 -c 4: the client, on another host: four UD peers, 10 messages of 100 bytes each way with each.",
				"vrnic-udaddy -s 192.0.2.1 -C 100 -S 1024 --socket /run/vrnicd/eth1.sock: one peer, 100 messages of 1 KiB, through the daemon that vrnicd@eth1 runs.",
			}},
			{Title: "EXIT STATUS", Paragraphs: []string{
				"0, after \"return status 0\", when every peer resolved and every message came; 1 otherwise, or for a bad command line.",
			}},
		},
		SeeAlso: []string{"vrnicd(8)", "vrnicctl(1)", "vrnic-run(1)", "udaddy(1)"},
	}
}
