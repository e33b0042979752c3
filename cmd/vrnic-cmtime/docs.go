package main

import (
	"fmt"

	"github.com/vrnic/vrnicd/cmd/internal/cmtool"
	"github.com/vrnic/vrnicd/cmd/internal/docgen"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// optionDocs documents each entry of options (getopt's table): cmtime's
// usage text has no option texts for docgen.FromHelp to read, so they are
// here; docs_test.go holds the two lists to each other.
var optionDocs = []docgen.Flag{
	{Short: 's', Arg: "ADDR", Help: "the server's address (an IP address or a host name): this side is the client and connects to it"},
	{Short: 'b', Arg: "ADDR", Help: "the address the server listens on (default every address); not with -s, as the client's source is its device's address"},
	{Short: 'c', Arg: "N", Help: fmt.Sprintf("connections the client opens at once (default 100, at most %d)", maxConns)},
	{Short: 'p', Arg: "PORT", Help: fmt.Sprintf("rdma_cm port (default %d)", cmtool.DefaultPort)},
	{Short: 'r', Arg: "N", Help: "the retry count of the client's connections (their QPs' transport retries), 0 to 7 (default 2); cmtime retries address and route resolution with it, which vrnicd does inside the connect"},
	{Short: 't', Arg: "MS", Help: "cmtime's address resolution timeout: accepted (a number from 1) and unused; the daemon's ARP timeout applies"},
	{Long: "socket", Arg: "PATH", Help: "vrnicd's client socket (default $" + verbs.SocketEnv + ", else " + verbs.DefaultSocket + ")"},
}

// docPage is vrnic-cmtime(1).
func docPage() *docgen.Page {
	flags := append([]docgen.Flag(nil), optionDocs...)
	docgen.SortFlags(flags)
	return &docgen.Page{
		Name: "vrnic-cmtime", Section: 1,
		Summary:  "librdmacm's cmtime over vrnicd: how long rdma_cm takes to set up and tear down many connections",
		Synopsis: []string{"[-b ADDR] [-p PORT] [--socket PATH]", "-s ADDR [-c N] [-p PORT] [-r N] [-t MS] [--socket PATH]"},
		Description: []string{
			"vrnic-cmtime is the vrnicd counterpart of librdmacm's cmtime (examples/cmtime.c as rdma-core v44 ships it): the client (-s) opens -c connections to the server at once, disconnects them all and prints how long each step took, in cmtime's table (each step's total, its slowest and fastest connection's time, and the total per connection); the server (no -s) accepts every connect request with a QP of its own and, when the client disconnects, disconnects and destroys the QP and the ID, until SIGINT or SIGTERM stops it. Either side can be the real cmtime.",
			"vrnicd's SDK resolves the address and the route inside its connect, so the client's \"connect\" row holds cmtime's \"resolve addr\", \"resolve route\" and \"connect\": the table has the rows \"create qp\", \"connect\", \"disconnect\" and \"destroy\".",
			"It reaches the RDMA device through vrnicd's client socket: --socket, else $" + verbs.SocketEnv + ", else " + verbs.DefaultSocket + ".",
		},
		Flags: flags,
		Env:   []docgen.Env{{Name: verbs.SocketEnv, Help: "vrnicd's socket when --socket is not given (default " + verbs.DefaultSocket + ")."}},
		Extra: []docgen.Section{
			{Title: "EXAMPLES", Paragraphs: []string{
				"vrnic-cmtime -b 192.0.2.1: the server, on 192.0.2.1 (a RoCE address of its daemon's), port 7471, until stopped.",
				"vrnic-cmtime -s 192.0.2.1 -c 200: the client, on another host: 200 connections at once, then the table of each step's times.",
				"vrnic-cmtime -s 192.0.2.1 --socket /run/vrnicd/eth1.sock: 100 connections through the daemon that vrnicd@eth1 runs.",
			}},
			{Title: "EXIT STATUS", Paragraphs: []string{
				"The client exits 0 when every connection connected and disconnected and 1 if one failed (cmtime itself exits 0 then); the server exits 0 when SIGINT or SIGTERM stops it. 1 on a failure or a bad command line.",
			}},
		},
		SeeAlso: []string{"vrnicd(8)", "vrnicctl(1)", "vrnic-run(1)", "cmtime(1)"},
	}
}
