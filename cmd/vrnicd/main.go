// Command vrnicd is the vrnicd daemon: a user-space RoCEv2 RDMA NIC on a
// TAP device it creates (--iface tap:NAME) or on an existing Ethernet
// interface in raw mode (--iface IFACE). Clients reach it through a
// SOCK_SEQPACKET Unix socket.
//
// main.go reads the command line, config.go the TOML file, daemon.go wires
// link, netstack, device and socket together and runs the signal loop
// (SIGTERM/SIGINT stop, SIGHUP reloads, SIGUSR1 logs counters).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/vrnic/vrnicd/cmd/internal/docgen"
	"github.com/vrnic/vrnicd/cmd/internal/version"
)

// Exit statuses.
const (
	exitOK     = 0
	exitFail   = 1 // a runtime failure: interface, privileges, socket in use, ...
	exitConfig = 2 // a bad command line or config file; restarting will not help
)

// versionString is vrnicd's --version and the ready line's version.
func versionString() string { return version.String("vrnicd") }

const usageText = `Usage: vrnicd --iface tap:NAME|IFACE [options]

vrnicd is a user-space RDMA NIC speaking RoCEv2 like Linux soft-RoCE
(rdma_rxe). Clients use it through the Unix socket (--socket).

Attach modes:
  --iface tap:NAME     create TAP device NAME (or attach to a persistent
                       one an administrator made, which stays after vrnicd
                       stops); vrnicd is the host on its far side with its
                       own MAC (--mac) and addresses (--ip). Needs
                       CAP_NET_ADMIN.
  --iface IFACE        raw mode on an existing Ethernet interface, with its
                       MAC, MTU and addresses (followed as they change).
                       Needs CAP_NET_RAW (AF_PACKET) and CAP_NET_ADMIN
                       (netlink: neighbour table and resolution requests).

Options:
  --ip ADDR/LEN        an address of the TAP-mode NIC, IPv4 or IPv6, e.g.
                       192.0.2.10/24 or 2001:db8::10/64; repeat for more
  --mac MAC            the TAP-mode NIC's MAC (default: a stable locally
                       administered MAC derived from host and TAP name)
  --mtu N              the TAP's MTU (default 1500, or a persistent TAP's
                       own; the RoCE active MTU is the largest of
                       256..4096 that fits in N-80, and follows the MTU as
                       it changes). In raw mode the interface's MTU rules
                       and --mtu must match it
  --name NAME          device name clients open (default vrnic0)
  --workers N          datapath workers, 1..256 (default 1). Raw mode:
                       each reads its own socket of a PACKET_FANOUT group
                       that steers a QP's packets to the worker that owns it
  --rx-ring-frames N   raw mode: frames each socket's receive ring holds,
                       64..65536 (default 1024): the frames a peer may have
                       in flight before the ring drops them while the
                       daemon is not running (counter link_rx_ring_drops);
                       rounded up to whole ring blocks, so the ready line's
                       rx_ring_frames may say more (1080 for 1024)
  --busy-poll DURATION how long a datapath worker keeps polling its link
                       and rings after its last work, yielding the CPU
                       between looks, before it sleeps: 0..10ms (default
                       100us; 0 sleeps at once). A reply within it costs no
                       wake-up
  --socket PATH        client socket (default /run/vrnicd/vrnicd.sock)
  --socket-group GROUP group of the socket, mode 0660 (default: the
                       daemon's own group)
  --config FILE        TOML config file (make install puts a commented
                       example in /etc/vrnicd/vrnicd.toml); flags override
                       it. -FILE: FILE may be missing (no config then), as
                       systemd's EnvironmentFile=-
  --log-level LEVEL    debug, info, warn or error (default info)
  --log-format FORMAT  text or json (default text)
  --pcap FILE          write every RoCEv2 frame sent and received to FILE
                       (pcap, opens in Wireshark; 'vrnicctl capture'
                       streams them live without one)
  --metrics ADDR       serve Prometheus metrics on http://ADDR/metrics:
                       HOST:PORT (TCP) or unix:PATH (default: off)
  --cpuprofile FILE    write a CPU profile (go tool pprof) to FILE, from
                       start until the daemon stops (SIGTERM or SIGINT)
  --version            print the version and exit
  --help               print this help and exit

Signals: SIGTERM or SIGINT stop the daemon (the TAP and the socket are
removed); SIGHUP re-reads the config file (log level, pcap file, TAP-mode
addresses, socket group) and reopens the pcap file; SIGUSR1 logs counters.
`

// ipFlag is the repeatable --ip.
type ipFlag []string

func (f *ipFlag) String() string { return strings.Join(*f, ",") }
func (f *ipFlag) Set(s string) error {
	*f = append(*f, s)
	return nil
}

// intFlag keeps --mtu's text, so a bad value is reported by validate in the
// same words as a bad config value.
type intFlag struct{ v int }

func (f *intFlag) String() string { return strconv.Itoa(f.v) }
func (f *intFlag) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("not an integer")
	}
	f.v = n
	return nil
}

// options is the parsed command line.
type options struct {
	help, version bool
	config        string
	cpuprofile    string    // --cpuprofile: runtime/pprof CPU profile, written at exit
	flags         rawConfig // only the flags that were given
	fs            *flag.FlagSet
}

// parseArgs reads the command line. Errors are one line.
func parseArgs(args []string) (*options, error) {
	fs := flag.NewFlagSet("vrnicd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	o := &options{fs: fs}
	var (
		iface, mac, name, socket, group, level, format, pcap string
		metricsAddr, busyPoll                                string
		ips                                                  ipFlag
		mtu, workers, rxRing                                 intFlag
	)
	fs.BoolVar(&o.help, "help", false, "")
	fs.BoolVar(&o.help, "h", false, "")
	fs.BoolVar(&o.version, "version", false, "")
	fs.StringVar(&o.config, "config", "", "")
	fs.StringVar(&iface, "iface", "", "")
	fs.Var(&ips, "ip", "")
	fs.StringVar(&mac, "mac", "", "")
	fs.Var(&mtu, "mtu", "")
	fs.Var(&workers, "workers", "")
	fs.Var(&rxRing, "rx-ring-frames", "")
	fs.StringVar(&busyPoll, "busy-poll", "", "")
	fs.StringVar(&name, "name", "", "")
	fs.StringVar(&socket, "socket", "", "")
	fs.StringVar(&group, "socket-group", "", "")
	fs.StringVar(&level, "log-level", "", "")
	fs.StringVar(&format, "log-format", "", "")
	fs.StringVar(&pcap, "pcap", "", "")
	fs.StringVar(&metricsAddr, "metrics", "", "")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			o.help = true
			return o, nil
		}
		msg := strings.Replace(err.Error(), "flag provided but not defined: -", "unknown flag --", 1)
		msg = strings.Replace(msg, "for flag -", "for flag --", 1)
		msg = strings.Replace(msg, "flag needs an argument: -", "flag needs an argument: --", 1)
		return nil, &configError{msg + " (see vrnicd --help)"}
	}
	if fs.NArg() > 0 {
		return nil, &configError{fmt.Sprintf("unexpected argument %q (see vrnicd --help)", fs.Arg(0))}
	}
	r := &o.flags
	fs.Visit(func(f *flag.Flag) {
		origin := "--" + f.Name
		switch f.Name {
		case "iface":
			r.iface = setting[string]{iface, origin}
		case "ip":
			r.ip = setting[[]string]{ips, origin}
		case "mac":
			r.mac = setting[string]{mac, origin}
		case "mtu":
			r.mtu = setting[int]{mtu.v, origin}
		case "workers":
			r.workers = setting[int]{workers.v, origin}
		case "rx-ring-frames":
			r.rxRingFrames = setting[int]{rxRing.v, origin}
		case "busy-poll":
			r.busyPoll = setting[string]{busyPoll, origin}
		case "name":
			r.name = setting[string]{name, origin}
		case "socket":
			r.socket = setting[string]{socket, origin}
		case "socket-group":
			r.socketGroup = setting[string]{group, origin}
		case "log-level":
			r.logLevel = setting[string]{level, origin}
		case "log-format":
			r.logFormat = setting[string]{format, origin}
		case "pcap":
			r.pcap = setting[string]{pcap, origin}
		case "metrics":
			r.metrics = setting[string]{metricsAddr, origin}
		}
	})
	return o, nil
}

// configFile is the config file to read, if any: --config's, unless it
// is -FILE (optional) and FILE does not exist.
func (o *options) configFile() (string, bool) {
	path, optional := strings.CutPrefix(o.config, "-")
	if path == "" {
		return "", false
	}
	if optional {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return "", false
		}
	}
	return path, true
}

// load reads the config file, if any, lays the flags over it and
// validates the result. The daemon calls it at start and on SIGHUP.
func (o *options) load() (*Config, error) {
	var raw rawConfig
	if path, ok := o.configFile(); ok {
		if err := loadFile(path, &raw); err != nil {
			return nil, err
		}
	}
	f := &o.flags
	over := func(dst *setting[string], src setting[string]) {
		if src.set() {
			*dst = src
		}
	}
	over(&raw.iface, f.iface)
	over(&raw.mac, f.mac)
	over(&raw.name, f.name)
	over(&raw.socket, f.socket)
	over(&raw.socketGroup, f.socketGroup)
	over(&raw.logLevel, f.logLevel)
	over(&raw.logFormat, f.logFormat)
	over(&raw.pcap, f.pcap)
	over(&raw.metrics, f.metrics)
	over(&raw.busyPoll, f.busyPoll)
	if f.ip.set() {
		raw.ip = f.ip
	}
	if f.mtu.set() {
		raw.mtu = f.mtu
	}
	if f.workers.set() {
		raw.workers = f.workers
	}
	if f.rxRingFrames.set() {
		raw.rxRingFrames = f.rxRingFrames
	}
	c, err := raw.validate()
	if err != nil {
		return nil, err
	}
	c.File = o.config
	return c, nil
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is the whole program; it returns the exit status. Every failure is
// one line on stderr.
func run(args []string, stdout, stderr io.Writer) int {
	if ok, code := docgen.Handle(args, docPage, stdout, stderr); ok {
		return code
	}
	o, err := parseArgs(args)
	if err != nil {
		return fail(stderr, err)
	}
	if o.help {
		fmt.Fprint(stdout, usageText)
		return exitOK
	}
	if o.version {
		fmt.Fprintln(stdout, versionString())
		return exitOK
	}
	cfg, err := o.load()
	if err != nil {
		return fail(stderr, err)
	}
	if o.cpuprofile != "" {
		stop, err := startCPUProfile(o.cpuprofile)
		if err != nil {
			return fail(stderr, err)
		}
		defer stop()
	}
	d, err := start(o, cfg, stderr)
	if err != nil {
		return fail(stderr, err)
	}
	return d.wait()
}

// fail prints err as one line and returns its exit status.
func fail(stderr io.Writer, err error) int {
	msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
	fmt.Fprintf(stderr, "vrnicd: %s\n", msg)
	var ce *configError
	if errors.As(err, &ce) {
		return exitConfig
	}
	return exitFail
}
