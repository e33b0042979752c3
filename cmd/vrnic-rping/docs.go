package main

import (
	"github.com/vrnic/vrnicd/cmd/internal/docgen"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// optionDocs documents each entry of options (getopt's table): rping's
// usage text is laid out with tabs, which docgen.FromHelp does not read,
// so the texts are here; docs_test.go holds the two lists to each other.
var optionDocs = []docgen.Flag{
	{Short: 's', Help: "server side: listen on -a's address (any address without -a; to bind to any address with IPv6 use -a ::0) and -p's port"},
	{Short: 'c', Help: "client side: connect to the server at -a and ping it"},
	{Short: 'a', Arg: "ADDR", Help: "address: the server's, which the client needs and the server listens on; an IP address (an IPv6 link-local one with its %zone) or a host name"},
	{Short: 'p', Arg: "PORT", Help: "rdma_cm port (default 7174)"},
	{Short: 'C', Arg: "COUNT", Help: "ping COUNT times (default 0: until interrupted)"},
	{Short: 'S', Arg: "SIZE", Help: "ping data size in bytes, 26 to 65535 (default 64)"},
	{Short: 'v', Help: "display ping data on stdout"},
	{Short: 'V', Help: "validate ping data: the client checks each ping came back intact and fails if one did not"},
	{Short: 'd', Help: "debug printfs: each step (rdma_cm events, work requests and completions) on stdout"},
	{Short: 'P', Help: "persistent server mode: serve any number of clients, concurrently, until SIGINT or SIGTERM"},
	{Long: "socket", Arg: "PATH", Help: "vrnicd's client socket (default $" + verbs.SocketEnv + ", else " + DefaultSocket + ")"},
	{Short: 'h', Long: "help", Help: "print the usage and exit"},
}

// docPage is vrnic-rping(1).
func docPage() *docgen.Page {
	flags := append([]docgen.Flag(nil), optionDocs...)
	docgen.SortFlags(flags)
	return &docgen.Page{
		Name: "vrnic-rping", Section: 1,
		Summary: "librdmacm's rping over vrnicd: an rdma_cm ping of RDMA READs and WRITEs",
		Synopsis: []string{
			"-s [-vVd] [-S SIZE] [-C COUNT] [-a ADDR] [-p PORT] [-P] [--socket PATH]",
			"-c [-vVd] [-S SIZE] [-C COUNT] -a ADDR [-p PORT] [--socket PATH]",
		},
		Description: []string{
			"vrnic-rping is the vrnicd counterpart of librdmacm's rping: an rdma_cm client (-c) and server (-s) with rping's command line, protocol and output, so either side can be the real rping on a kernel rdma_rxe or hardware peer. The client advertises a buffer in a SEND (rping's struct rping_rdma_info: address, rkey and size, big-endian); the server RDMA READs it, then RDMA WRITEs it back into a second buffer of the client's; each round is one ping.",
			"It reaches the RDMA device through vrnicd's client socket: --socket, else $" + verbs.SocketEnv + ", else " + DefaultSocket + ".",
		},
		Flags: flags,
		Extra: []docgen.Section{
			{Title: "EXAMPLES", Paragraphs: []string{
				"vrnic-rping -s -a 192.0.2.1 -v: the server, listening on 192.0.2.1 (a RoCE address of its daemon's), port 7174, showing the data of each ping.",
				"vrnic-rping -c -a 192.0.2.1 -C 10 -v -V: the client, on another host: ten pings of 64 bytes, each shown and checked.",
				"vrnic-rping -s -P -a 192.0.2.1 --socket /run/vrnicd/eth1.sock: a persistent server on the daemon that vrnicd@eth1 runs, serving clients until stopped.",
			}},
			{Title: "EXIT STATUS", Paragraphs: []string{
				"The client exits 0 once its pings are done (and, with -V, every one came back intact); the server once its client disconnects, or with -P when SIGINT or SIGTERM stops it. 1 on a failure or a bad command line.",
			}},
		},
		Env:     []docgen.Env{{Name: verbs.SocketEnv, Help: "vrnicd's socket when --socket is not given (default " + DefaultSocket + ")."}},
		SeeAlso: []string{"vrnicd(8)", "vrnicctl(1)", "vrnic-run(1)", "rping(1)"},
	}
}
