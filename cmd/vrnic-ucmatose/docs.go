package main

import (
	"fmt"

	"github.com/vrnic/vrnicd/cmd/internal/cmtool"
	"github.com/vrnic/vrnicd/cmd/internal/docgen"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// refused is the text of ucmatose's options vrnicd's rdma_cm has no
// counterpart for: the parser accepts their spelling and refuses them.
const refused = "; refused: vrnicd's rdma_cm has no such feature"

// optionDocs documents each entry of options (getopt's table):
// ucmatose's usage text has no option texts for docgen.FromHelp to read,
// so they are here; docs_test.go holds the two lists to each other.
var optionDocs = []docgen.Flag{
	{Short: 's', Arg: "ADDR", Help: "the server's address (an IP address or a host name): this side is the client and connects to it"},
	{Short: 'b', Arg: "ADDR", Help: "the address the server listens on (default every address); not with -s, as the client's source is its device's address"},
	{Short: 'f', Arg: "FORMAT", Help: "the address format of -s and -b: ip, ipv6 or name (each takes an IP address or a host name); ucmatose's gid (AF_IB) is refused"},
	{Short: 'P', Arg: "SPACE", Help: "the rdma_cm port space: tcp only (ucmatose's ib is refused)"},
	{Short: 'c', Arg: "N", Help: fmt.Sprintf("connections (default 1, at most %d)", maxConns)},
	{Short: 'C', Arg: "N", Help: "messages each side sends on each connection (default 10, at most 1048576)"},
	{Short: 'S', Arg: "BYTES", Help: "message size (default 100; 0 sends no messages)"},
	{Short: 'p', Arg: "PORT", Help: fmt.Sprintf("rdma_cm port (default %d)", cmtool.DefaultPort)},
	{Short: 't', Arg: "TOS", Help: "ucmatose's type of service" + refused},
	{Short: 'a', Arg: "TIMEOUT", Help: "ucmatose's ACK timeout (RDMA_OPTION_ID_ACK_TIMEOUT)" + refused},
	{Short: 'm', Help: "ucmatose's event channel migration" + refused},
	{Long: "socket", Arg: "PATH", Help: "vrnicd's client socket (default $" + verbs.SocketEnv + ", else " + verbs.DefaultSocket + ")"},
}

// docPage is vrnic-ucmatose(1).
func docPage() *docgen.Page {
	flags := append([]docgen.Flag(nil), optionDocs...)
	docgen.SortFlags(flags)
	return &docgen.Page{
		Name: "vrnic-ucmatose", Section: 1,
		Summary:  "librdmacm's ucmatose over vrnicd: RC connections over rdma_cm exchanging SENDs",
		Synopsis: []string{"[-b ADDR] [-c N] [-C N] [-S BYTES] [-p PORT] [--socket PATH]", "-s ADDR [-c N] [-C N] [-S BYTES] [-p PORT] [--socket PATH]"},
		Description: []string{
			"vrnic-ucmatose is the vrnicd counterpart of librdmacm's ucmatose (examples/cmatose.c): -c rdma_cm connections between a server and a client; on each, the server SENDs -C messages of -S bytes, the client receives them all and SENDs as many back; then the server disconnects. Either side can be the real ucmatose: the same command line (-s, the server's address, makes a client; without it a server), defaults (port 7471, 1 connection, 10 messages of 100 bytes), connection parameters and output.",
			"It reaches the RDMA device through vrnicd's client socket: --socket, else $" + verbs.SocketEnv + ", else " + verbs.DefaultSocket + ".",
		},
		Flags: flags,
		Env:   []docgen.Env{{Name: verbs.SocketEnv, Help: "vrnicd's socket when --socket is not given (default " + verbs.DefaultSocket + ")."}},
		Extra: []docgen.Section{
			{Title: "EXAMPLES", Paragraphs: []string{
				"vrnic-ucmatose -b 192.0.2.1 -c 4: the server, waiting on 192.0.2.1 (a RoCE address of its daemon's), port 7471, for four connections.",
				"vrnic-ucmatose -s 192.0.2.1 -c 4: the client, on another host: four connections, 10 messages of 100 bytes each way on each.",
				"vrnic-ucmatose -s 192.0.2.1 -C 1000 -S 4096 --socket /run/vrnicd/eth1.sock: one connection of 1000 messages of 4 KiB, through the daemon that vrnicd@eth1 runs.",
			}},
			{Title: "EXIT STATUS", Paragraphs: []string{
				"0, after \"return status 0\", when every connection connected, moved its messages and disconnected; 1 otherwise, or for a bad command line.",
			}},
		},
		SeeAlso: []string{"vrnicd(8)", "vrnicctl(1)", "vrnic-run(1)", "ucmatose(1)"},
	}
}
