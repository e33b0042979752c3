// Command vrnic-udaddy is the vrnicd counterpart of librdmacm's udaddy
// (examples/udaddy.c): UD over rdma_cm's RDMA_PS_UDP port space. The
// client resolves -c UD peers with SIDR and sends -C messages of -S bytes
// to each (SEND with its QPN as immediate data); the server answers each
// SIDR request with a UD QP of its own, receives the messages and sends as
// many back through an address handle made from the first message's GRH.
// Either side can be the kernel's udaddy: the same command line (getopt
// "s:b:c:C:S:t:p:P:f:": -s the server's address makes a client, none a
// server), defaults (port 7174, 1 connection, 10 messages of 100 bytes)
// and output. It reaches the RDMA device through vrnicd's socket
// (--socket).
//
//	vrnic-udaddy -c 4                    # server
//	vrnic-udaddy -s 192.0.2.1 -c 4       # client
//
// As in udaddy, -p is the port space (backwards compatibility for -P; only
// UDP, 0x0111) and the port is fixed at 7174; --port changes it (tests).
// It exits 0 and prints "return status 0" when every peer resolved and
// every message came. udaddy's -t (TOS), -P ipoib and -f gid have no
// counterpart in vrnicd's SDK and are refused.
package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"

	"github.com/vrnic/vrnicd/cmd/internal/cmtool"
	"github.com/vrnic/vrnicd/cmd/internal/oob/getopt"
	"github.com/vrnic/vrnicd/cmd/internal/tool"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

func main() { tool.Docs(docPage); tool.Main(run) }

// defaultPort is udaddy's fixed port.
const defaultPort = 7174

// config is a parsed command line.
type config struct {
	dst    netip.Addr // -s: the server (client mode)
	src    netip.Addr // -b: the address to bind (both modes)
	port   uint16     // --port
	conns  int        // -c
	count  int        // -C
	size   int        // -S
	socket string
}

var options = []getopt.Option{
	{Short: 's', HasArg: true}, {Short: 'b', HasArg: true}, {Short: 'c', HasArg: true}, {Short: 'C', HasArg: true},
	{Short: 'S', HasArg: true}, {Short: 't', HasArg: true}, {Short: 'p', HasArg: true}, {Short: 'P', HasArg: true},
	{Short: 'f', HasArg: true}, {Long: "port", HasArg: true}, {Long: "socket", HasArg: true},
}

// maxConns bounds -c: each connection holds a PD, a CQ, a QP and an MR in
// the daemon (its per-client limits bound them as well).
const maxConns = 1024

func parseArgs(args []string) (*config, error) {
	cfg := &config{port: defaultPort, conns: 1, count: 10, size: 100, socket: verbs.SocketPath()}
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
	return cfg, nil
}

func (cfg *config) apply(o getopt.Opt) error {
	var err error
	switch o.Option.Short {
	case 's':
		cfg.dst, err = cmtool.Lookup(o.Arg)
	case 'b':
		cfg.src, err = cmtool.Lookup(o.Arg)
	case 'c':
		cfg.conns, err = getopt.Range(o, 1, maxConns)
	case 'C':
		cfg.count, err = getopt.Range(o, 0, 1<<16)
	case 'S':
		cfg.size, err = getopt.Range(o, 0, 1<<16)
	case 'p':
		// udaddy reads it with strtol(optarg, NULL, 0).
		if v, perr := strconv.ParseInt(o.Arg, 0, 32); perr != nil || v != verbs.PortSpaceUDP {
			return getopt.Usagef("-p %s: only the UDP port space (%#x)", o.Arg, verbs.PortSpaceUDP)
		}
	case 'P':
		if !strings.HasPrefix(strings.ToLower(o.Arg), "udp") {
			return getopt.Usagef("-P %s: only the udp port space", o.Arg)
		}
	case 'f':
		if l := strings.ToLower(o.Arg); !strings.HasPrefix(l, "ip") && !strings.HasPrefix(l, "name") {
			return getopt.Usagef("-f %s: only ip and name addresses (no AF_IB)", o.Arg)
		}
	case 't':
		return getopt.Usagef("-t is not supported by vrnicd's rdma_cm")
	default:
		if o.Option.Long == "port" {
			cfg.port, err = cmtool.Port(o.Arg)
		} else {
			cfg.socket = o.Arg // --socket
		}
	}
	if err != nil {
		return getopt.Usagef("%s: %v", o.Name(), err)
	}
	return nil
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: vrnic-udaddy
	[-s server_address]
	[-b bind_address]
	[-f address_format]
	    name or ip
	[-P port_space]
	    udp
	[-c connections]
	[-C message_count]
	[-S message_size]
	[-p port_space - 0x111 for UDP (default)]
	[--port port]	the rdma_cm port (default 7174)
	[--socket path]	vrnicd's socket (default `+verbs.DefaultSocket+`, or $`+verbs.SocketEnv+`)
`)
}

// run is the whole program; everything goes to stdout, as udaddy's printf
// does. The error it returns has been reported.
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
