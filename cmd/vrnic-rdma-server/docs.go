package main

import (
	"fmt"

	"github.com/vrnic/vrnicd/cmd/internal/cmtool"
	"github.com/vrnic/vrnicd/cmd/internal/docgen"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// optionDocs documents the options of cmtool.ExampleArgs (rdma_server's
// getopt "s:p:" and --socket); docs_test.go checks each is accepted.
var optionDocs = []docgen.Flag{
	{Short: 's', Arg: "ADDR", Help: "the address to listen on, an IP address or a host name (default " + defaultAddr + ": every IPv4 address)"},
	{Short: 'p', Arg: "PORT", Help: fmt.Sprintf("rdma_cm port (default %d)", cmtool.DefaultPort)},
	{Long: "socket", Arg: "PATH", Help: "vrnicd's client socket (default $" + verbs.SocketEnv + ", else " + verbs.DefaultSocket + ")"},
}

// docPage is vrnic-rdma-server(1).
func docPage() *docgen.Page {
	flags := append([]docgen.Flag(nil), optionDocs...)
	docgen.SortFlags(flags)
	return &docgen.Page{
		Name: "vrnic-rdma-server", Section: 1,
		Summary:  "librdmacm's rdma_server over vrnicd: one rdma_cm connection, one message each way",
		Synopsis: []string{"[-s ADDR] [-p PORT] [--socket PATH]"},
		Description: []string{
			"vrnic-rdma-server is the vrnicd counterpart of librdmacm's rdma_server (examples/rdma_server.c): it listens on -s's address and -p's port, takes one connection, receives a 16-byte message, answers with 16 bytes and disconnects, printing \"rdma_server: start\" and \"rdma_server: end 0\". Its peer can be the real rdma_client or vrnic-rdma-client(1).",
			"It reaches the RDMA device through vrnicd's client socket: --socket, else $" + verbs.SocketEnv + ", else " + verbs.DefaultSocket + ".",
		},
		Flags: flags,
		Env:   []docgen.Env{{Name: verbs.SocketEnv, Help: "vrnicd's socket when --socket is not given (default " + verbs.DefaultSocket + ")."}},
		Extra: []docgen.Section{
			{Title: "EXAMPLES", Paragraphs: []string{
				"vrnic-rdma-server -s 192.0.2.1: the server, on 192.0.2.1 (a RoCE address of its daemon's), port 7471; on another host, vrnic-rdma-client -s 192.0.2.1 (or rdma_client -s 192.0.2.1) is its client.",
				"vrnic-rdma-server -s 192.0.2.1 -p 7000 --socket /run/vrnicd/eth1.sock: port 7000, on the daemon that vrnicd@eth1 runs.",
			}},
			{Title: "EXIT STATUS", Paragraphs: []string{
				"0 after \"rdma_server: end 0\", when the message came and the answer went; 1 otherwise, or for a bad command line.",
			}},
		},
		SeeAlso: []string{"vrnicd(8)", "vrnicctl(1)", "vrnic-rdma-client(1)", "vrnic-run(1)", "rdma_server(1)"},
	}
}
