// Command vrnic-cmtime is the vrnicd counterpart of librdmacm's cmtime
// (examples/cmtime.c as rdma-core v44 ships it): the client opens -c
// connections (100) to the server at -s at once, disconnects them all and
// prints how long each step took in cmtime's table; the server (no -s)
// accepts every connect request with a QP of its own and, when the client
// disconnects, disconnects, destroys the QP and the ID, until it is
// stopped (SIGINT, SIGTERM). Port -p (7471). Either side can be the
// kernel's cmtime. It reaches the RDMA device through vrnicd's socket
// (--socket).
//
//	vrnic-cmtime                          # server
//	vrnic-cmtime -s 192.0.2.1 -c 200      # client
//
// vrnicd's SDK resolves the address and the route inside Dial, so the
// client's "connect" step holds cmtime's "resolve addr", "resolve route"
// and "connect", and there is no "create id" apart from it: the table
// has the rows "create qp", "connect", "disconnect" and "destroy". Unlike
// cmtime, the client exits 1 if a connection failed. -b (bind address)
// is the server's listen address only; -r and -t (address resolution
// retries and timeout) are accepted for cmtime's command line and do not
// apply (the daemon's ARP timeout does).
package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"

	"github.com/vrnic/vrnicd/cmd/internal/cmtool"
	"github.com/vrnic/vrnicd/cmd/internal/oob/getopt"
	"github.com/vrnic/vrnicd/cmd/internal/tool"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

func main() { tool.Docs(docPage); tool.Main(run) }

// config is a parsed command line.
type config struct {
	dst     netip.Addr // -s: the server (client mode)
	src     netip.Addr // -b
	port    uint16     // -p
	conns   int        // -c
	retries int        // -r: the connections' retry count
	socket  string
}

// maxConns bounds -c (the daemon's CM table holds 1024 by default).
const maxConns = 1000

var options = []getopt.Option{
	{Short: 's', HasArg: true}, {Short: 'b', HasArg: true}, {Short: 'c', HasArg: true}, {Short: 'p', HasArg: true},
	{Short: 'r', HasArg: true}, {Short: 't', HasArg: true}, {Long: "socket", HasArg: true},
}

func parseArgs(args []string) (*config, error) {
	cfg := &config{port: cmtool.DefaultPort, conns: 100, retries: 2, socket: verbs.SocketPath()}
	opts, err := getopt.Options(options, args)
	if err != nil {
		return cfg, err
	}
	for _, o := range opts {
		var err error
		switch o.Option.Short {
		case 's':
			cfg.dst, err = cmtool.Lookup(o.Arg)
		case 'b':
			cfg.src, err = cmtool.Lookup(o.Arg)
		case 'c':
			cfg.conns, err = getopt.Range(o, 1, maxConns)
		case 'p':
			cfg.port, err = cmtool.Port(o.Arg)
		case 'r':
			cfg.retries, err = getopt.Range(o, 0, 7)
		case 't':
			_, err = getopt.Range(o, 1, 1<<31-1)
		default:
			cfg.socket = o.Arg
		}
		if err != nil {
			return cfg, getopt.Usagef("-%c: %v", o.Option.Short, err)
		}
	}
	if cfg.dst.IsValid() && cfg.src.IsValid() {
		return cfg, getopt.Usagef("-b: the client's source is the device's address (vrnicd picks it)")
	}
	return cfg, nil
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: vrnic-cmtime
	[-s server_address]
	[-b bind_address]
	[-c connections]
	[-p port_number]
	[-r retries]
	[-t timeout_ms]
	[--socket path]	vrnicd's socket (default `+verbs.DefaultSocket+`, or $`+verbs.SocketEnv+`)
`)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseArgs(args)
	if err != nil {
		getopt.Report(err, stdout, stderr, usage)
		return err
	}
	dev, err := verbs.Open(cfg.socket)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return err
	}
	defer dev.Close()
	if cfg.dst.IsValid() {
		err = runClient(ctx, cfg, dev, stdout)
	} else {
		err = runServer(ctx, cfg, dev, stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
	}
	return err
}
