// Command vrnic-ucmatose is the vrnicd counterpart of librdmacm's
// ucmatose (examples/cmatose.c): -c rdma_cm connections between a server
// and a client; on each, the server SENDs -C messages of -S bytes, the
// client receives them all and SENDs as many back; then the server
// disconnects. Either side can be the kernel's ucmatose: the same command
// line (getopt "s:b:f:P:c:C:S:t:p:a:m": -s the server's address makes a
// client, none a server), defaults (port 7471, 1 connection, 10 messages
// of 100 bytes), connection parameters and output. It reaches the RDMA
// device through vrnicd's socket (--socket).
//
//	vrnic-ucmatose -c 4                    # server
//	vrnic-ucmatose -s 192.0.2.1 -c 4       # client
//
// It exits 0 and prints "return status 0" when every connection
// connected, moved its messages and disconnected. ucmatose's -t (TOS),
// -a (ACK timeout), -m (event channel migration) and -P ib have no
// counterpart in vrnicd's SDK and are refused.
package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/vrnic/vrnicd/cmd/internal/cmtool"
	"github.com/vrnic/vrnicd/cmd/internal/oob/getopt"
	"github.com/vrnic/vrnicd/cmd/internal/tool"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

func main() { tool.Docs(docPage); tool.Main(run) }

// config is a parsed command line.
type config struct {
	dst    netip.Addr // -s: the server (client mode)
	src    netip.Addr // -b: the address the server listens on
	port   uint16     // -p
	conns  int        // -c
	count  int        // -C
	size   int        // -S
	socket string
}

var options = []getopt.Option{
	{Short: 's', HasArg: true}, {Short: 'b', HasArg: true}, {Short: 'f', HasArg: true}, {Short: 'P', HasArg: true},
	{Short: 'c', HasArg: true}, {Short: 'C', HasArg: true}, {Short: 'S', HasArg: true}, {Short: 't', HasArg: true},
	{Short: 'p', HasArg: true}, {Short: 'a', HasArg: true}, {Short: 'm'}, {Long: "socket", HasArg: true},
}

// maxConns bounds -c: each connection holds a PD, two CQs, a QP and an MR
// in the daemon (its per-client limits bound them as well).
const (
	maxConns = 1024
	maxSize  = 1 << 30
)

func parseArgs(args []string) (*config, error) {
	cfg := &config{port: cmtool.DefaultPort, conns: 1, count: 10, size: 100, socket: verbs.SocketPath()}
	opts, err := getopt.Options(options, args)
	if err != nil {
		return cfg, err
	}
	for _, o := range opts {
		if err := cfg.apply(o); err != nil {
			return cfg, err
		}
	}
	if cfg.size == 0 {
		cfg.count = 0 // create_message: no messages without a size
	}
	if cfg.dst.IsValid() && cfg.src.IsValid() {
		return cfg, getopt.Usagef("-b: the client's source is the device's address (vrnicd picks it)")
	}
	return cfg, nil
}

func (cfg *config) apply(o getopt.Opt) error {
	var err error
	switch o.Option.Short {
	case 's':
		cfg.dst, err = cmtool.Lookup(o.Arg)
	case 'b':
		cfg.src, err = cmtool.Lookup(o.Arg)
	case 'f':
		if l := strings.ToLower(o.Arg); !strings.HasPrefix(l, "ip") && !strings.HasPrefix(l, "name") {
			return getopt.Usagef("-f %s: only ip and name addresses (no AF_IB)", o.Arg)
		}
	case 'P':
		if !strings.HasPrefix(strings.ToLower(o.Arg), "tcp") {
			return getopt.Usagef("-P %s: only the tcp port space", o.Arg)
		}
	case 'c':
		cfg.conns, err = getopt.Range(o, 1, maxConns)
	case 'C':
		cfg.count, err = getopt.Range(o, 0, 1<<20)
	case 'S':
		cfg.size, err = getopt.Range(o, 0, maxSize)
	case 'p':
		cfg.port, err = cmtool.Port(o.Arg)
	case 't', 'a', 'm':
		return getopt.Usagef("-%c is not supported by vrnicd's rdma_cm", o.Option.Short)
	default:
		cfg.socket = o.Arg // --socket
	}
	if err != nil {
		return getopt.Usagef("-%c: %v", o.Option.Short, err)
	}
	return nil
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: vrnic-ucmatose
	[-s server_address]
	[-b bind_address]
	[-f address_format]
	    name or ip
	[-P port_space]
	    tcp
	[-c connections]
	[-C message_count]
	[-S message_size]
	[-p port_number]
	[--socket path]	vrnicd's socket (default `+verbs.DefaultSocket+`, or $`+verbs.SocketEnv+`)
`)
}

// run is the whole program; everything goes to stdout, as ucmatose's
// printf does. The error it returns has been reported.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseArgs(args)
	if err != nil {
		getopt.Report(err, stdout, stderr, usage)
		return err
	}
	t := &test{cfg: cfg, out: stdout}
	side := t.runServer
	if cfg.dst.IsValid() {
		side = t.runClient
	}
	return cmtool.RunTest(ctx, stdout, side, t.destroy)
}
