package main

import (
	"fmt"

	"github.com/vrnic/vrnicd/cmd/internal/cmtool"
	"github.com/vrnic/vrnicd/cmd/internal/docgen"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// optionDocs documents the options of cmtool.ExampleArgs (rdma_client's
// getopt "s:p:" and --socket); docs_test.go checks each is accepted.
var optionDocs = []docgen.Flag{
	{Short: 's', Arg: "ADDR", Help: "the server's address, an IP address or a host name (default " + defaultAddr + ")"},
	{Short: 'p', Arg: "PORT", Help: fmt.Sprintf("the server's rdma_cm port (default %d)", cmtool.DefaultPort)},
	{Long: "socket", Arg: "PATH", Help: "vrnicd's client socket (default $" + verbs.SocketEnv + ", else " + verbs.DefaultSocket + ")"},
}

// docPage is vrnic-rdma-client(1).
func docPage() *docgen.Page {
	flags := append([]docgen.Flag(nil), optionDocs...)
	docgen.SortFlags(flags)
	return &docgen.Page{
		Name: "vrnic-rdma-client", Section: 1,
		Summary:  "librdmacm's rdma_client over vrnicd: one rdma_cm connection, one message each way",
		Synopsis: []string{"[-s ADDR] [-p PORT] [--socket PATH]"},
		Description: []string{
			"vrnic-rdma-client is the vrnicd counterpart of librdmacm's rdma_client (examples/rdma_client.c): it connects to the server at -s's address and -p's port, sends a 16-byte message, receives the 16-byte answer and disconnects, printing \"rdma_client: start\" and \"rdma_client: end 0\". Its peer can be the real rdma_server or vrnic-rdma-server(1).",
			"It reaches the RDMA device through vrnicd's client socket: --socket, else $" + verbs.SocketEnv + ", else " + verbs.DefaultSocket + ".",
		},
		Flags: flags,
		Env:   []docgen.Env{{Name: verbs.SocketEnv, Help: "vrnicd's socket when --socket is not given (default " + verbs.DefaultSocket + ")."}},
		Extra: []docgen.Section{
			{Title: "EXAMPLES", Paragraphs: []string{
				"vrnic-rdma-server -s 192.0.2.1 on the server, whose daemon has the RoCE address 192.0.2.1, then vrnic-rdma-client -s 192.0.2.1 on the client: one message each way on port 7471.",
				"vrnic-rdma-client -s 192.0.2.1 -p 7000 --socket /run/vrnicd/eth1.sock: to a server on port 7000 (rdma_server -s 192.0.2.1 -p 7000, say), through the daemon that vrnicd@eth1 runs.",
			}},
			{Title: "EXIT STATUS", Paragraphs: []string{
				"0 after \"rdma_client: end 0\", when the message went and the answer came; 1 otherwise, or for a bad command line.",
			}},
		},
		SeeAlso: []string{"vrnicd(8)", "vrnicctl(1)", "vrnic-rdma-server(1)", "vrnic-run(1)", "rdma_client(1)"},
	}
}
