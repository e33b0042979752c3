package main

import (
	"fmt"
	"io"
	"net"
	"net/netip"

	"github.com/vrnic/vrnicd/cmd/internal/oob/getopt"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// DefaultSocket is where vrnicd listens unless configured otherwise.
const DefaultSocket = "/run/vrnicd/vrnicd.sock"

// rping's limits: RPING_BUFSIZE 64 KiB, RPING_MIN_BUFSIZE the room for
// "rdma-ping-2147483647: " (sizeof(stringify(INT_MAX)) + sizeof(RPING_MSG_FMT)).
const (
	maxBufSize = 64 * 1024
	minBufSize = 11 + 15
)

// config is a parsed command line.
type config struct {
	server     bool
	addr       netip.Addr // -a; the server's any address when not given
	port       uint16     // -p, default 7174
	count      int        // -C; 0: forever
	size       int        // -S, default 64
	verbose    bool       // -v
	validate   bool       // -V
	debug      bool       // -d
	persistent bool       // -P
	socket     string
	help       bool
}

var options = []getopt.Option{
	{Short: 'a', HasArg: true}, {Short: 'P'}, {Short: 'p', HasArg: true}, {Short: 'C', HasArg: true},
	{Short: 'S', HasArg: true}, {Short: 's'}, {Short: 'c'}, {Short: 'v'}, {Short: 'V'}, {Short: 'd'},
	{Long: "socket", HasArg: true}, {Short: 'h', Long: "help"},
}

// parseArgs reads rping's options (getopt "a:Pp:C:S:scvVd") and --socket.
func parseArgs(args []string) (*config, error) {
	cfg := &config{port: 7174, size: 64, socket: verbs.SocketPath()}
	opts, err := getopt.Options(options, args)
	if err != nil {
		return cfg, err
	}
	role := 0
	for _, o := range opts {
		if err := cfg.apply(o, &role); err != nil {
			return cfg, err
		}
	}
	if cfg.help {
		return cfg, nil
	}
	if role == 0 {
		return cfg, getopt.Usagef("one of -s (server) and -c (client) is needed")
	}
	cfg.server = role == 's'
	if !cfg.server && !cfg.addr.IsValid() {
		return cfg, getopt.Usagef("the client needs the server's address (-a)")
	}
	return cfg, nil
}

func (cfg *config) apply(o getopt.Opt, role *int) error {
	switch o.Option.Short {
	case 'a':
		a, err := lookup(o.Arg)
		if err != nil {
			return err
		}
		cfg.addr = a
	case 'P':
		cfg.persistent = true
	case 'p':
		v, err := getopt.Int(o)
		if err != nil || v < 0 || v > 65535 {
			return getopt.Usagef("invalid port %q", o.Arg)
		}
		cfg.port = uint16(v)
	case 'C':
		v, err := getopt.Int(o)
		if err != nil || v < 0 || v > 1<<31-1 {
			return fmt.Errorf("Invalid count %s", o.Arg)
		}
		cfg.count = int(v)
	case 'S':
		v, err := getopt.Int(o)
		if err != nil || v < minBufSize || v > maxBufSize-1 {
			return fmt.Errorf("Invalid size %s (valid range is %d to %d)", o.Arg, minBufSize, maxBufSize)
		}
		cfg.size = int(v)
	case 's', 'c':
		*role = int(o.Option.Short)
	case 'v':
		cfg.verbose = true
	case 'V':
		cfg.validate = true
	case 'd':
		cfg.debug = true
	case 'h':
		cfg.help = true
	default:
		cfg.socket = o.Arg // --socket
	}
	return nil
}

// lookup is rping's get_addr: an IP address or a host name.
func lookup(s string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), nil
	}
	ips, err := net.LookupIP(s)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("getaddrinfo failed (%v) - invalid hostname or IP address", err)
	}
	a, _ := netip.AddrFromSlice(ips[0])
	return a.Unmap(), nil
}

func usage(w io.Writer) {
	fmt.Fprint(w, `vrnic-rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port] [-P] [--socket path]
vrnic-rping -c [-vVd] [-S size] [-C count] -a addr [-p port] [--socket path]
	-c		client side
	-s		server side.  To bind to any address with IPv6 use -a ::0
	-v		display ping data to stdout
	-V		validate ping data
	-d		debug printfs
	-S size 	ping data size
	-C count	ping count times
	-a addr		address
	-p port		port
	-P		persistent server mode allowing multiple connections
	--socket path	vrnicd's socket (default $`+verbs.SocketEnv+`, else `+DefaultSocket+`)
`)
}
