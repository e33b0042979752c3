package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/vrnic/vrnicd/cmd/internal/oob"
	"github.com/vrnic/vrnicd/cmd/internal/oob/getopt"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// DefaultSocket is where vrnicd listens unless configured otherwise.
const DefaultSocket = verbs.DefaultSocket

// verb is perftest's VerbType, in its order (testsStr).
type verb int

const (
	verbSend verb = iota
	verbWrite
	verbRead
	verbAtomic
)

var verbNames = [...]string{"Send", "RDMA_Write", "RDMA_Read", "Atomic"}

// perftest's defaults and limits (perftest_parameters.h).
const (
	defSizeBW     = 65536
	defSizeLat    = 2
	defSizeAtomic = 8
	defIters      = 1000
	defItersWB    = 5000 // ib_write_bw's
	defTxBW       = 128
	defTxLat      = 1
	defQPTime     = 14
	defRxSend     = 512
	defRxRDMA     = 1
	defCQMod      = 100
	defDuration   = 5
	maxSize       = 8388608 // -a runs 2 … 2^23
	cqModLimit    = 8192    // above it, CQ moderation is off unless asked for
	minIters      = 5
	maxIters      = 100000000
)

// Inline sizes: -I's range (MAX_INLINE; a device may take less), and
// ctx_set_max_inline's defaults for the latency tests on RC.
const (
	maxInline       = 912
	defInlineWrite  = 220 // DEF_INLINE_WRITE
	defInlineSendRC = 236 // DEF_INLINE_SEND_RC_UC_XRC
)

type atomicType int

const (
	cmpAndSwap atomicType = iota
	fetchAndAdd
)

var atomicNames = [...]string{"CMP_AND_SWAP", "FETCH_AND_ADD"}

// test is one of the perftest programs.
type test struct {
	name string // vrnic-perf's subcommand
	tool string // perftest's program
	verb verb
	lat  bool
}

// testNames are the tests in perftest's order (the usage's).
var testNames = []string{"write_bw", "read_bw", "send_bw", "atomic_bw", "write_lat", "read_lat", "send_lat", "atomic_lat"}

var tests = map[string]test{
	"write_bw":   {"write_bw", "ib_write_bw", verbWrite, false},
	"read_bw":    {"read_bw", "ib_read_bw", verbRead, false},
	"send_bw":    {"send_bw", "ib_send_bw", verbSend, false},
	"atomic_bw":  {"atomic_bw", "ib_atomic_bw", verbAtomic, false},
	"write_lat":  {"write_lat", "ib_write_lat", verbWrite, true},
	"read_lat":   {"read_lat", "ib_read_lat", verbRead, true},
	"send_lat":   {"send_lat", "ib_send_lat", verbSend, true},
	"atomic_lat": {"atomic_lat", "ib_atomic_lat", verbAtomic, true},
}

// params is perftest's struct perftest_parameters, the part this tool uses.
type params struct {
	test       test
	servername string // "" for the server
	port       int
	ibDev      string
	ibPort     int
	userMTU    int // -m; 0 = the port's active MTU
	size       uint64
	reqSize    bool
	iters      uint64
	txDepth    int
	rxDepth    int
	qpTimeout  uint8
	sl         int
	gidIndex   int // -1 until -x or the port picks one
	useGIDUser bool
	numQPs     int
	inlineSize int // -1 (DEF_INLINE) unless -I
	userInline bool
	outReads   int // -o; the device's maximum when 0
	cqMod      int
	reqCQMod   bool
	atomic     atomicType
	duration   int
	margin     int // -1 until set
	isDuration bool
	runAll     bool
	events     bool
	noPeak     bool
	gbits      bool
	cmComm     bool // -z (use_rdma_cm): the exchange over rdma_cm
	cmQPs      bool // -R (work_rdma_cm): the QPs connected by rdma_cm; implies cmComm
	socket     string
	quiet      bool // no progress lines on stderr
	help       bool
	version    bool
}

func (p *params) client() bool { return p.servername != "" }

// perftest's options (its long names), the ones vrnic-perf takes (some
// only in some tests: testRefuses) and those it refuses by name rather than
// as unknown.
var options = slices.Concat(takenOptions, refusedOptions)

var takenOptions = []getopt.Option{
	{Short: 'p', Long: "port", HasArg: true},
	{Short: 'd', Long: "ib-dev", HasArg: true},
	{Short: 'i', Long: "ib-port", HasArg: true},
	{Short: 'm', Long: "mtu", HasArg: true},
	{Short: 's', Long: "size", HasArg: true},
	{Short: 'n', Long: "iters", HasArg: true},
	{Short: 't', Long: "tx-depth", HasArg: true},
	{Short: 'u', Long: "qp-timeout", HasArg: true},
	{Short: 'S', Long: "sl", HasArg: true},
	{Short: 'x', Long: "gid-index", HasArg: true},
	{Short: 'a', Long: "all"},
	{Short: 'F', Long: "CPU-freq"},
	{Short: 'c', Long: "connection", HasArg: true},
	{Short: 'q', Long: "qp", HasArg: true},
	{Short: 'e', Long: "events"},
	{Short: 'I', Long: "inline_size", HasArg: true},
	{Short: 'o', Long: "outs", HasArg: true},
	{Short: 'r', Long: "rx-depth", HasArg: true},
	{Short: 'Q', Long: "cq-mod", HasArg: true},
	{Short: 'N', Long: "noPeak"},
	{Short: 'A', Long: "atomic_type", HasArg: true},
	{Short: 'D', Long: "duration", HasArg: true},
	{Short: 'f', Long: "margin", HasArg: true},
	{Short: 'h', Long: "help"},
	{Short: 'V', Long: "version"},
	{Long: "report_gbits"},
	{Long: "socket", HasArg: true},
	{Long: "quiet"},
	{Short: 'z', Long: "comm_rdma_cm"},
	{Short: 'R', Long: "rdma_cm"},
}

// refusedOptions are perftest features vrnicd's tools do not have.
var refusedOptions = []getopt.Option{
	{Short: 'b', Long: "bidirectional"},
	{Short: 'l', Long: "post_list", HasArg: true},
	{Short: 'O', Long: "dualport"},
	{Short: 'g', Long: "mcg"},
	{Short: 'M', Long: "MGID", HasArg: true},
	{Short: 'T', Long: "tos", HasArg: true},
	{Short: 'L', Long: "hop_limit", HasArg: true},
	{Short: 'C', Long: "report-cycles"},
	{Short: 'H', Long: "report-histogrm"},
	{Short: 'U', Long: "report-unsorted"},
	{Long: "use-srq"},
	{Long: "run_infinitely"},
	{Long: "report-both"},
	{Long: "odp"},
	{Long: "use_hugepages"},
}

// parseArgs reads "TEST [options] [server]" into perftest's parameters,
// with its defaults, range checks and force_dependecies adjustments.
func parseArgs(args []string) (*params, error) {
	if len(args) == 0 {
		return nil, getopt.Usagef("no test: want one of %s", strings.Join(testNames, " "))
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		return &params{help: true}, nil
	}
	t, ok := tests[args[0]]
	if !ok {
		// One line, not the whole usage: a mistyped name needs the list.
		return nil, fmt.Errorf("unknown test %q: want one of %s (vrnic-perf --help for the options)", args[0], strings.Join(testNames, " "))
	}
	p := &params{test: t, port: oob.DefaultPort, ibPort: 1, gidIndex: -1, numQPs: 1, inlineSize: -1, cqMod: defCQMod,
		duration: defDuration, margin: -1, qpTimeout: defQPTime, atomic: fetchAndAdd, socket: verbs.SocketPath()}
	if t.lat {
		p.size, p.txDepth = defSizeLat, defTxLat
	} else {
		p.size, p.txDepth = defSizeBW, defTxBW
	}
	p.rxDepth = defRxRDMA
	if t.verb == verbSend {
		p.rxDepth = defRxSend
	}
	p.iters = defIters
	if !t.lat && t.verb == verbWrite {
		p.iters = defItersWB
	}
	if t.verb == verbAtomic {
		p.size = defSizeAtomic
	}
	opts, operands, err := getopt.Parse(options, args[1:])
	if err != nil {
		return p, getopt.Usagef("%v", err)
	}
	for _, o := range opts {
		if err := p.set(o); err != nil {
			return p, err
		}
	}
	if p.help || p.version {
		return p, nil
	}
	if p.servername, err = getopt.Server(operands); err != nil {
		return p, err
	}
	return p, p.force()
}

// optInt is o's integer argument, checked against lo … hi with perftest's
// messages.
func optInt(o getopt.Opt, lo, hi int64, name string) (int64, error) {
	v, err := getopt.Int(o)
	if err != nil {
		return 0, getopt.Usagef(" %s argument %s should be int", name, o.Arg)
	}
	if v < lo || v > hi {
		return 0, getopt.Usagef(" %s should be between %d and %d", name, lo, hi)
	}
	return v, nil
}

// testRefuses is perftest's refusal of an option (by its short name) that
// test t does not take, or nil.
func testRefuses(t test, short byte) error {
	oneSided := t.verb == verbRead || t.verb == verbAtomic
	switch {
	case short == 'q' && t.lat:
		return getopt.Usagef(" Multiple QPs only available on bw tests")
	case short == 'I' && oneSided:
		return getopt.Usagef(" Inline feature not available on READ/Atomic verbs")
	case short == 'o' && !oneSided:
		return getopt.Usagef(" Setting Outstanding reads only available on READ verb")
	case short == 'e' && t.verb == verbWrite:
		return getopt.Usagef(" Events feature not available on WRITE verb")
	case short == 'A' && t.verb != verbAtomic:
		return getopt.Usagef(" You are not running the atomic_lat/bw test!\n To change the atomic action type, you must run one of the atomic tests")
	}
	return nil
}

// takes says whether test t takes option short at all: not one it
// refuses as it parses (testRefuses), nor -a in the atomic tests, whose
// largest size force_dependecies refuses.
func takes(t test, short byte) bool {
	return testRefuses(t, short) == nil && !(short == 'a' && t.verb == verbAtomic)
}

func (p *params) set(o getopt.Opt) error {
	if err := testRefuses(p.test, o.Option.Short); err != nil {
		return err
	}
	num := func(lo, hi int64, name string) (int64, error) { return optInt(o, lo, hi, name) }
	var v int64
	var err error
	switch o.Option.Short {
	case 'p':
		v, err = num(0, 65535, "Port")
		p.port = int(v)
	case 'd':
		p.ibDev = o.Arg
	case 'i':
		v, err = num(1, 1, "IB Port")
		p.ibPort = int(v)
	case 'm':
		v, err = num(0, 1<<31-1, "MTU")
		p.userMTU = int(v)
	case 's':
		err = p.setSize(o.Arg)
	case 'n':
		v, err = num(minIters, maxIters, "Iteration num")
		p.iters = uint64(v)
	case 't':
		v, err = num(1, 15000, "Tx depth")
		p.txDepth = int(v)
	case 'u':
		v, err = num(0, 31, "QP Timeout")
		p.qpTimeout = uint8(v)
	case 'S':
		v, err = num(0, 15, "Service Level")
		p.sl = int(v)
	case 'x':
		v, err = num(0, 64, "Gid index")
		p.gidIndex, p.useGIDUser = int(v), true
	case 'c':
		if o.Arg != "RC" {
			return fmt.Errorf(" connection type %s: vrnic-perf runs RC", o.Arg)
		}
	case 'q', 'I', 'o', 'r':
		err = p.setForTest(o)
	case 'Q':
		v, err = num(1, 1024, "CQ moderation")
		p.cqMod, p.reqCQMod = int(v), true
	case 'A':
		err = p.setAtomic(o.Arg)
	case 'D':
		v, err = num(1, 1<<31-1, "Duration period")
		p.duration, p.isDuration = int(v), true
	case 'f':
		v, err = num(0, 1<<31-1, "Margin")
		p.margin = int(v)
	default:
		if o.Option.Long == "socket" {
			p.socket = o.Arg
			break
		}
		if !p.setFlag(o) {
			return fmt.Errorf(" %s: not supported by vrnic-perf", o.Name())
		}
	}
	return err
}

// setForTest sets the options that only some tests take (set has checked
// with testRefuses) or take only some values of.
func (p *params) setForTest(o getopt.Opt) error {
	var v int64
	var err error
	switch o.Option.Short {
	case 'q':
		v, err = optInt(o, 1, 16384, "num of Qps")
		p.numQPs = int(v)
	case 'I':
		v, err = optInt(o, 0, maxInline, "Max inline")
		p.inlineSize, p.userInline = int(v), true
	case 'o':
		v, err = optInt(o, -1<<31, 1<<31-1, "Outstanding Reads")
		p.outReads = int(v)
	case 'r':
		v, err = optInt(o, 1, 16384, " Rx depth")
		if err == nil && p.test.verb != verbSend && v > defRxRDMA {
			return getopt.Usagef(" On RDMA verbs rx depth can be only 1")
		}
		p.rxDepth = int(v)
	}
	return err
}

// setFlag sets an option without an argument; false for one vrnic-perf
// does not take.
func (p *params) setFlag(o getopt.Opt) bool {
	switch o.Option.Short {
	case 'a':
		p.runAll = true
	case 'F': // no CPU frequency to check: vrnic-perf times with the monotonic clock
	case 'e':
		p.events = true
	case 'N':
		p.noPeak = true
	case 'z':
		p.cmComm = true
	case 'R':
		p.cmQPs, p.cmComm = true, true
	case 'h':
		p.help = true
	case 'V':
		p.version = true
	default:
		switch o.Option.Long {
		case "report_gbits":
			p.gbits = true
		case "quiet":
			p.quiet = true
		default:
			return false
		}
	}
	return true
}

// setSize is -s: bytes, or with a K or M suffix.
func (p *params) setSize(arg string) error {
	factor := uint64(1)
	switch {
	case strings.HasSuffix(arg, "K"):
		factor, arg = 1024, strings.TrimSuffix(arg, "K")
	case strings.HasSuffix(arg, "M"):
		factor, arg = 1024*1024, strings.TrimSuffix(arg, "M")
	}
	n, err := strconv.ParseUint(arg, 0, 64)
	if err != nil || n*factor < 1 || n*factor > (1<<32-1)/2 {
		return getopt.Usagef(" Message Size should be between %d and %d", 1, (1<<32-1)/2)
	}
	p.size, p.reqSize = n*factor, true
	return nil
}

// setAtomic is -A, for the atomic tests only (testRefuses).
func (p *params) setAtomic(arg string) error {
	switch arg {
	case atomicNames[cmpAndSwap]:
		p.atomic = cmpAndSwap
	case atomicNames[fetchAndAdd]:
		p.atomic = fetchAndAdd
	default:
		return getopt.Usagef(" Invalid Atomic type! please choose from {CMP_AND_SWAP,FETCH_AND_ADD}")
	}
	return nil
}

// force applies force_dependecies and the parser's checks after it, in
// perftest's order, with its messages: the mode checks, the depths, the
// message size, then the duration and peak settings.
func (p *params) force() error {
	if err := p.checkModes(); err != nil {
		return err
	}
	p.forceDepths()
	if err := p.forceSize(); err != nil {
		return err
	}
	return p.forceDuration()
}

// checkModes refuses the mode combinations perftest refuses first.
func (p *params) checkModes() error {
	if p.runAll && p.isDuration {
		return fmt.Errorf("Duration mode currently doesn't support running on all sizes.")
	}
	if p.isDuration && p.events {
		return fmt.Errorf("Duration mode doesn't work with events.")
	}
	return nil
}

// forceDepths caps the queue depths at the iteration count and the CQ
// moderation at the send depth.
func (p *params) forceDepths() {
	if !p.isDuration {
		if uint64(p.txDepth) > p.iters {
			p.txDepth = int(p.iters)
		}
		if p.test.verb == verbSend && uint64(p.rxDepth) > p.iters {
			p.rxDepth = int(p.iters)
		}
	}
	if p.size > cqModLimit && !p.runAll && !p.events && !p.reqCQMod {
		p.cqMod = 1
	}
	if p.cqMod > p.txDepth {
		p.cqMod = p.txDepth
	}
}

// forceSize disables inline for READ and atomics, takes the largest size
// for --all and refuses a changed atomic size.
func (p *params) forceSize() error {
	if p.test.verb == verbRead || p.test.verb == verbAtomic {
		p.inlineSize = 0
	}
	if p.runAll {
		p.size = maxSize
	}
	if p.test.verb == verbAtomic && p.size != defSizeAtomic {
		return fmt.Errorf("Message size cannot be changed for Atomic tests ")
	}
	return nil
}

// forceDuration sets what duration mode, the send_bw server and long runs
// imply (no iterations, no peak, the margin), evens SEND's rx depth and
// checks the margin.
func (p *params) forceDuration() error {
	if p.isDuration {
		p.iters = 0
		p.noPeak = true
	}
	if p.test.verb == verbSend && !p.test.lat && !p.client() {
		p.noPeak = true // the send_bw server only times the whole run
	}
	if p.isDuration && p.margin == -1 {
		p.margin = p.duration / 4
	}
	// perftest: "WA for a bug when rx_depth is odd in SEND".
	if p.test.verb == verbSend && p.rxDepth%2 == 1 && !p.runAll {
		p.rxDepth++
	}
	if !p.isDuration && p.iters > 20000 && !p.test.lat {
		p.noPeak = true
	}
	if p.margin >= 0 && !(p.duration > 2*p.margin) {
		return fmt.Errorf("please check that DURATION > 2*MARGIN")
	}
	return nil
}

func usage(w io.Writer) {
	fmt.Fprintf(w, `Usage: vrnic-perf TEST [options]            start a server and wait for connection
       vrnic-perf TEST [options] <host>     connect to server at <host>

The vrnicd counterpart of perftest's ib_write_bw, ib_read_bw, ib_send_bw,
ib_atomic_bw, ib_write_lat, ib_read_lat, ib_send_lat and ib_atomic_lat
(perftest %s): the same options, TCP exchange (or with -R rdma_cm mode)
and report, so either side can be the real tool.

Tests: write_bw read_bw send_bw atomic_bw write_lat read_lat send_lat atomic_lat

Options:
  --socket=<path>         vrnicd's socket (default $VRNICD_SOCKET, else %s)
  --quiet                 no progress lines on stderr
  -p, --port=<port>       listen on/connect to port <port> (default 18515; rdma_cm's with -R, -z)
  -d, --ib-dev=<dev>      the device's name, checked against the daemon's
  -i, --ib-port=<port>    port of the device (1)
  -m, --mtu=<mtu>         MTU size: 256 - 4096 (default: the port's active MTU)
  -s, --size=<size>       size of message to exchange (default: 65536 bw, 2 lat)
  -n, --iters=<iters>     number of exchanges (at least 5; default 1000, write_bw 5000)
  -t, --tx-depth=<dep>    size of tx queue (default 128 bw, 1 lat)
  -r, --rx-depth=<dep>    rx queue size (default 512; send tests)
  -u, --qp-timeout=<t>    QP timeout, timeout value is 4 usec * 2 ^(timeout) (default 14)
  -S, --sl=<sl>           SL (accepted; RoCE has none on the wire)
  -x, --gid-index=<i>     GID index (default: the first IPv4-mapped GID)
  -a, --all               run sizes from 2 till 2^23
  -F, --CPU-freq          accepted (no CPU frequency is used)
  -c, --connection=RC     connection type (RC only)
  -q, --qp=<num>          num of qp's (default 1; bw tests)
  -e, --events            sleep on CQ events (not with write)
  -I, --inline_size=<n>   max size of message to be sent in inline (0 - 912; default 220 write_lat,
                          236 send_lat, else 0; vrnicd takes up to its max_inline_data, 512)
  -o, --outs=<num>        outstanding reads/atomics (default: the device's maximum)
  -Q, --cq-mod=<n>        generate a completion every n WRs (default 100)
  -N, --noPeak            skip the peak bandwidth computation
  -A, --atomic_type=<t>   CMP_AND_SWAP or FETCH_AND_ADD (default FETCH_AND_ADD)
  -D, --duration=<sec>    run for this many seconds instead of -n iterations
  -f, --margin=<sec>      measure within these margins (default duration/4)
      --report_gbits      report in Gb/sec instead of MB/sec
  -R, --rdma_cm           connect the QPs with rdma_cm on the port (and exchange as -z)
  -z, --comm_rdma_cm      exchange perftest's messages over an rdma_cm connection, not TCP
  -h, --help              this text
  -V, --version           the perftest version spoken
`, oob.PerftestVersion, DefaultSocket)
}

// cacheLineSize reads the CPU's cache line size as perftest does
// (get_cache_line_size), 64 if unknown.
func cacheLineSize() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/cpu0/cache/index0/coherency_line_size")
	if err == nil {
		if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && v > 0 {
			return v
		}
	}
	return 64
}
