// Command vrnic-mckey is the vrnicd counterpart of librdmacm's mckey
// (examples/mckey.c, rdma-core 44): UD multicast through rdma_cm. Each of
// -c nodes resolves the group (-m), makes a UD QP, joins the group
// (rdma_join_multicast: the QP is attached to it unless the join is
// send-only, -o) and, after mckey's 3 s pause, either sends -C messages of
// -S bytes to it (-s, SEND_WITH_IMM with the QP's number, unsignaled) or
// waits for as many (a receiver). Either side can be the kernel's mckey:
// the same command line (getopt "m:M:sb:c:C:S:p:ol"), defaults (1 node, 10
// messages of 100 bytes), output and exit status. It reaches the RDMA
// device through vrnicd's socket (--socket).
//
//	vrnic-mckey -m 239.1.1.1             # receiver
//	vrnic-mckey -m 239.1.1.1 -s          # sender
//
// Over RoCEv2 rdma_cm joins IPv4 groups only: an IPv6 group, or -M's GID
// (an AF_IB address), fails to join with the kernel's ENOTSUPP (errno 524),
// which mckey reports. -p takes only the UDP port space (0x111): vrnicd has
// no IPoIB, so 0x2 is refused.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/vrnic/vrnicd/cmd/internal/oob/getopt"
	"github.com/vrnic/vrnicd/cmd/internal/tool"
	"github.com/vrnic/vrnicd/cmd/internal/version"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// main is tool.Main but for the exit status, which is mckey's: main's
// return value, its "return status" (-1 exits 255).
func main() {
	tool.Docs(docPage)
	if version.Handle(os.Args[1:], filepath.Base(os.Args[0]), os.Stdout) {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err))
}

// statusError is a run that ended with mckey's nonzero return status.
type statusError int

func (s statusError) Error() string { return fmt.Sprintf("return status %d", int(s)) }

// exitCode is the process's exit status for run's error: the low byte of
// a return status, 1 for anything else (a bad command line: mckey's
// exit(1)).
func exitCode(err error) int {
	var s statusError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &s):
		return int(s) & 0xff
	}
	return 1
}

// portSpaceIPoIB is RDMA_PS_IPOIB, mckey's other -p.
const portSpaceIPoIB = 0x2

// config is a parsed command line.
type config struct {
	group    string // -m or -M: the group, looked up when the test starts
	unmapped bool   // -M: the group is a GID (AF_IB), not an IP address
	sender   bool   // -s
	bind     string // -b
	conns    int    // -c
	count    int    // -C
	size     int    // -S
	sendOnly bool   // -o: a send-only full member
	loopback bool   // not -l: the sender's QP gets its own messages back
	socket   string
}

var options = []getopt.Option{
	{Short: 'm', HasArg: true}, {Short: 'M', HasArg: true}, {Short: 's'}, {Short: 'b', HasArg: true},
	{Short: 'c', HasArg: true}, {Short: 'C', HasArg: true}, {Short: 'S', HasArg: true}, {Short: 'p', HasArg: true},
	{Short: 'o'}, {Short: 'l'}, {Long: "socket", HasArg: true},
}

// maxConns bounds -c: each node holds a PD, a CQ, a QP, an MR and a join
// in the daemon (its per-client limits bound them as well).
const maxConns = 1024

func parseArgs(args []string) (*config, error) {
	cfg := &config{conns: 1, count: 10, size: 100, loopback: true, socket: verbs.SocketPath()}
	opts, err := getopt.Options(options, args)
	if err != nil {
		return cfg, err
	}
	for _, o := range opts {
		if err := cfg.apply(o); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

func (cfg *config) apply(o getopt.Opt) error {
	var err error
	switch o.Option.Short {
	case 'm', 'M':
		cfg.group, cfg.unmapped = o.Arg, o.Option.Short == 'M'
	case 's':
		cfg.sender = true
	case 'b':
		cfg.bind = o.Arg
	case 'c':
		cfg.conns, err = getopt.Range(o, 1, maxConns)
	case 'C':
		cfg.count, err = getopt.Range(o, 0, 1<<16)
	case 'S':
		cfg.size, err = getopt.Range(o, 0, 1<<16)
	case 'p':
		return portSpace(o.Arg)
	case 'o':
		cfg.sendOnly = true
	case 'l':
		cfg.loopback = false
	default:
		cfg.socket = o.Arg // --socket
	}
	if err != nil {
		return getopt.Usagef("%s: %v", o.Name(), err)
	}
	return nil
}

// portSpace checks -p, which mckey reads with strtol(optarg, NULL, 0).
func portSpace(arg string) error {
	v, err := strconv.ParseInt(arg, 0, 32)
	switch {
	case err == nil && v == verbs.PortSpaceUDP:
		return nil
	case err == nil && v == portSpaceIPoIB:
		return getopt.Usagef("-p %s: RDMA_PS_IPOIB needs IPoIB, which vrnicd (RoCEv2 only) does not have; use %#x (UDP)", arg, verbs.PortSpaceUDP)
	}
	return getopt.Usagef("-p %s: only the UDP port space (%#x)", arg, verbs.PortSpaceUDP)
}

func usage(w io.Writer) {
	fmt.Fprintf(w, `usage: vrnic-mckey
	-m multicast_address
	[-M unmapped_multicast_address]
	 replaces -m and requires -b
	[-s(ender)]
	[-b bind_address]
	[-c connections]
	[-C message_count]
	[-S message_size]
	[-p port_space - %#x for UDP (default), %#x for IPOIB (refused: vrnicd has no IPoIB)]
	[-o join as a send-only full-member]
	[-l join without multicast loopback]
	[--socket path]	vrnicd's socket (default %s, or $%s)
`, verbs.PortSpaceUDP, portSpaceIPoIB, verbs.DefaultSocket, verbs.SocketEnv)
}

// run is the whole program: mckey's main. Its printf goes to stdout,
// perror to stderr. The error it returns has been reported; a
// statusError carries mckey's return status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseArgs(args)
	if err != nil {
		getopt.Report(err, stdout, stderr, usage)
		return err
	}
	if cfg.unmapped && cfg.bind == "" {
		fmt.Fprintf(stdout, "unmapped multicast address requires binding to source address\n")
		return errors.New("-M without -b")
	}
	t := &test{cfg: cfg, out: stdout, errOut: stderr, count: cfg.count}
	if err := t.open(); err != nil {
		fmt.Fprintf(stderr, "vrnic-mckey: %v\n", err) // mckey's create_event_channel
		return err
	}
	status := t.run(ctx)
	fmt.Fprintf(stdout, "test complete\n")
	t.destroy()
	fmt.Fprintf(stdout, "return status %d\n", status)
	if status != 0 {
		return statusError(status)
	}
	return nil
}
