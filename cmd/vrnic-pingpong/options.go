package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/vrnic/vrnicd/cmd/internal/oob"
	"github.com/vrnic/vrnicd/cmd/internal/oob/getopt"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// DefaultSocket is where vrnicd listens unless configured otherwise.
const DefaultSocket = verbs.DefaultSocket

// mode is one of the rdma-core examples this tool stands in for: its QP
// type, its command line (getopt string, long names, defaults) and its
// quirks.
type mode struct {
	name    string // rc, uc, ud, srq
	tool    string // the rdma-core program, for usage
	short   string // its getopt string
	long    map[byte]string
	defSize int
	hasMTU  bool // -m (not ud)
	hasNQP  bool // -q (srq)
	// localSep is what the "local address" line puts before the GID:
	// ud_pingpong prints "PSN 0x%06x: GID", the others "PSN 0x%06x, GID".
	localSep string
}

var modes = map[string]*mode{
	"rc": {name: "rc", tool: "ibv_rc_pingpong", short: "p:d:i:s:m:r:n:l:eg:oOPtcjN", defSize: 4096, hasMTU: true, localSep: ",",
		long: map[byte]string{'p': "port", 'd': "ib-dev", 'i': "ib-port", 's': "size", 'm': "mtu", 'r': "rx-depth", 'n': "iters",
			'l': "sl", 'e': "events", 'g': "gid-idx", 'o': "odp", 'O': "iodp", 'P': "prefetch", 't': "ts", 'c': "chk", 'j': "dm", 'N': "new_send"}},
	"uc": {name: "uc", tool: "ibv_uc_pingpong", short: "p:d:i:s:m:r:n:l:eg:c", defSize: 4096, hasMTU: true, localSep: ",",
		long: map[byte]string{'p': "port", 'd': "ib-dev", 'i': "ib-port", 's': "size", 'm': "mtu", 'r': "rx-depth", 'n': "iters",
			'l': "sl", 'e': "events", 'g': "gid-idx", 'c': "chk"}},
	"ud": {name: "ud", tool: "ibv_ud_pingpong", short: "p:d:i:s:r:n:l:eg:c", defSize: 1024, localSep: ":",
		long: map[byte]string{'p': "port", 'd': "ib-dev", 'i': "ib-port", 's': "size", 'r': "rx-depth", 'n': "iters",
			'l': "sl", 'e': "events", 'g': "gid-idx", 'c': "chk"}},
	"srq": {name: "srq", tool: "ibv_srq_pingpong", short: "p:d:i:s:m:q:r:n:l:eog:c", defSize: 4096, hasMTU: true, hasNQP: true, localSep: ",",
		long: map[byte]string{'p': "port", 'd': "ib-dev", 'i': "ib-port", 's': "size", 'm': "mtu", 'q': "num-qp", 'r': "rx-depth",
			'n': "iters", 'l': "sl", 'e': "events", 'o': "odp", 'g': "gid-idx", 'c': "chk"}},
}

// options is the mode's getopt table, from its getopt string and long
// names.
func (m *mode) options() []getopt.Option {
	var opts []getopt.Option
	for i := 0; i < len(m.short); i++ {
		c := m.short[i]
		hasArg := i+1 < len(m.short) && m.short[i+1] == ':'
		if hasArg {
			i++
		}
		opts = append(opts, getopt.Option{Short: c, Long: m.long[c], HasArg: hasArg})
	}
	return opts
}

// config is a parsed command line.
type config struct {
	mode       *mode
	servername string // "" for the server
	port       int
	ibDev      string // -d: must name the daemon's device if given
	ibPort     int
	size       int
	mtu        int // bytes: 256 … 4096
	rxDepth    int
	iters      int
	sl         int
	gidx       int // -1: no GID (rdma-core's default)
	numQP      int
	events     bool
	validate   bool
	socket     string
	help       bool
}

// parseArgs reads a command line: our own --mode and --socket, then the
// chosen tool's options and its optional server name.
func parseArgs(args []string) (*config, error) {
	cfg := &config{mode: modes["rc"], socket: verbs.SocketPath()}
	rest, err := cfg.parseMode(args)
	if err != nil {
		return cfg, err
	}
	m := cfg.mode
	cfg.port, cfg.ibPort, cfg.size, cfg.mtu, cfg.rxDepth, cfg.iters, cfg.gidx, cfg.numQP = oob.DefaultPort, 1, m.defSize, 1024, 500, 1000, -1, 16
	if cfg.help {
		return cfg, nil
	}
	parsed, operands, err := getopt.Parse(m.options(), rest)
	if err != nil {
		return cfg, getopt.Usagef("%v", err)
	}
	for _, o := range parsed {
		if err := cfg.apply(o); err != nil {
			return cfg, err
		}
	}
	if cfg.servername, err = getopt.Server(operands); err != nil {
		return cfg, err
	}
	if m.hasNQP {
		if cfg.numQP > cfg.rxDepth {
			return cfg, fmt.Errorf("rx_depth %d is too small for %d QPs -- must have at least one receive per QP", cfg.rxDepth, cfg.numQP)
		}
		if cfg.numQP >= oob.SRQPingpongSlots {
			return cfg, fmt.Errorf("num_qp %d must be less than %d", cfg.numQP, oob.SRQPingpongSlots-1)
		}
	} else {
		cfg.numQP = 1
	}
	return cfg, nil
}

// parseMode finds --mode (which decides what options there are),
// --socket and --help in args, before the mode's own options are parsed;
// the rest of args is left for them.
func (cfg *config) parseMode(args []string) ([]string, error) {
	m := cfg.mode
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(a, "=")
		switch name {
		case "--mode", "--socket":
			if !hasVal {
				if i+1 >= len(args) {
					return nil, getopt.Usagef("option '%s' requires an argument", name)
				}
				i++
				val = args[i]
			}
			if name == "--socket" {
				cfg.socket = val
				continue
			}
			if m = modes[val]; m == nil {
				return nil, getopt.Usagef("--mode %q: want rc, uc, ud or srq", val)
			}
			continue
		case "--help", "-h":
			cfg.help = true
			continue
		case "--":
			rest = append(rest, args[i:]...)
			i = len(args)
			continue
		}
		rest = append(rest, a)
	}
	cfg.mode = m
	return rest, nil
}

// apply is one of the mode's options.
func (cfg *config) apply(o getopt.Opt) error {
	num := func(lo, hi int64) (int, error) {
		v, err := getopt.Int(o)
		if err != nil {
			return 0, getopt.Usagef("%v", err)
		}
		if v < lo || v > hi {
			return 0, getopt.Usagef("%s %d: out of range %d…%d", o.Name(), v, lo, hi)
		}
		return int(v), nil
	}
	var err error
	switch o.Option.Short {
	case 'p':
		cfg.port, err = num(0, 65535)
	case 'd':
		cfg.ibDev = o.Arg
	case 'i':
		cfg.ibPort, err = num(1, 1)
	case 's':
		cfg.size, err = num(1, 1<<31-1)
	case 'm':
		var v int
		if v, err = num(0, 1<<31-1); err == nil {
			if v != 256 && v != 512 && v != 1024 && v != 2048 && v != 4096 {
				err = getopt.Usagef("-m %d: want 256, 512, 1024, 2048 or 4096", v)
			}
			cfg.mtu = v
		}
	case 'r':
		cfg.rxDepth, err = num(1, 1<<20)
	case 'n':
		cfg.iters, err = num(0, 1<<31-1)
	case 'l':
		cfg.sl, err = num(0, 15) // accepted; RoCE has no SL on the wire
	case 'e':
		cfg.events = true
	case 'g':
		cfg.gidx, err = num(0, 1<<20)
	case 'q':
		cfg.numQP, err = num(1, 1<<20)
	case 'c':
		cfg.validate = true
	default: // -o -O -P -t -j -N: ODP, timestamps, device memory, the new post API
		err = fmt.Errorf("%s: not supported by vrnicd", o.Name())
	}
	return err
}

// usage prints the chosen tool's usage, rdma-core's text plus our options.
func usage(w io.Writer, m *mode) {
	fmt.Fprintf(w, "Usage:\n")
	fmt.Fprintf(w, "  vrnic-pingpong [--mode %s]            start a server and wait for connection\n", m.name)
	fmt.Fprintf(w, "  vrnic-pingpong [--mode %s] <host>     connect to server at <host>\n", m.name)
	fmt.Fprintf(w, "\nThe vrnicd counterpart of %s; either side can be the real one.\n", m.tool)
	fmt.Fprintf(w, "\nOptions:\n")
	fmt.Fprintf(w, "  --mode=rc|uc|ud|srq    which pingpong (default rc)\n")
	fmt.Fprintf(w, "  --socket=<path>        vrnicd's socket (default $%s, else %s)\n", verbs.SocketEnv, DefaultSocket)
	fmt.Fprintf(w, "  -p, --port=<port>      listen on/connect to port <port> (default 18515)\n")
	fmt.Fprintf(w, "  -d, --ib-dev=<dev>     use IB device <dev> (default: the daemon's)\n")
	fmt.Fprintf(w, "  -i, --ib-port=<port>   use port <port> of IB device (default 1)\n")
	fmt.Fprintf(w, "  -s, --size=<size>      size of message to exchange (default %d)\n", m.defSize)
	if m.hasMTU {
		fmt.Fprintf(w, "  -m, --mtu=<size>       path MTU (default 1024)\n")
	}
	if m.hasNQP {
		fmt.Fprintf(w, "  -q, --num-qp=<num>     number of QPs to use (default 16)\n")
	}
	fmt.Fprintf(w, "  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)\n")
	fmt.Fprintf(w, "  -n, --iters=<iters>    number of exchanges (default 1000)\n")
	fmt.Fprintf(w, "  -l, --sl=<sl>          service level value (accepted, unused on RoCE)\n")
	fmt.Fprintf(w, "  -e, --events           sleep on CQ events (default poll)\n")
	fmt.Fprintf(w, "  -g, --gid-idx=<gid index> local port gid index\n")
	fmt.Fprintf(w, "  -c, --chk              validate received buffer\n")
}
