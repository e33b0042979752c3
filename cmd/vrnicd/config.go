package main

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/user"
	"regexp"
	"strconv"
	"strings"
	"time"

	toml "github.com/pelletier/go-toml/v2"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/nic/link"
	"github.com/vrnic/vrnicd/nic/netstack"
	"github.com/vrnic/vrnicd/verbsock"
)

// Defaults.
const (
	defaultSocket = "/run/vrnicd/vrnicd.sock"
	defaultName   = "vrnic0"
	defaultMTU    = 1500
	// minMTU: vrnicd always has an IPv6 link-local GID, and IPv6 needs
	// 1280. maxMTU: the largest IP MTU an Ethernet frame of 64 KiB holds.
	minMTU = 1280
	maxMTU = 65535 - 14
	// maxSocketPath is sun_path's size less the terminating NUL.
	maxSocketPath = 107
)

// fileConfig is the TOML file. Pointers tell a key that is absent from one
// set to its zero value. Keys are documented in configs/vrnicd.toml.
type fileConfig struct {
	Iface       *string  `toml:"iface"`
	IP          []string `toml:"ip"`
	MAC         *string  `toml:"mac"`
	MTU         *int     `toml:"mtu"`
	Name        *string  `toml:"name"`
	Socket      *string  `toml:"socket"`
	SocketGroup *string  `toml:"socket_group"`
	LogLevel    *string  `toml:"log_level"`
	LogFormat   *string  `toml:"log_format"`
	Pcap        *string  `toml:"pcap"`
	// Operations (issue 17).
	Metrics            *string `toml:"metrics"`
	CaptureMaxReaders  *int    `toml:"capture_max_readers"`
	CaptureReaderBytes *int    `toml:"capture_reader_bytes"`
	Workers            *int    `toml:"workers"`
	RxRingFrames       *int    `toml:"rx_ring_frames"`
	BusyPoll           *string `toml:"busy_poll"`

	MaxConnections        *int        `toml:"max_connections"`
	MaxConnectionsPerUser *int        `toml:"max_connections_per_user"`
	HelloTimeout          *string     `toml:"hello_timeout"`
	PrivilegedGroups      []string    `toml:"privileged_groups"`
	ConnectionLimits      *limitsFile `toml:"connection_limits"`
	UserLimits            *limitsFile `toml:"user_limits"`
	Multicast             *mcastFile  `toml:"multicast"`
}

// mcastFile is the device's UD multicast limits (ibv_query_device's
// max_mcast_grp, max_mcast_qp_attach, max_total_mcast_qp_attach); 0 or
// absent keys keep kernel rxe's 8192, 56 and 458752.
type mcastFile struct {
	MaxGroups      int `toml:"max_groups"`
	MaxQPsPerGroup int `toml:"max_qps_per_group"`
	MaxAttachments int `toml:"max_attachments"`
}

// limitsFile is a quota table (connection_limits, user_limits); 0 or
// absent keys take the server's defaults.
type limitsFile struct {
	MaxPD       uint64 `toml:"max_pd"`
	MaxCQ       uint64 `toml:"max_cq"`
	MaxQP       uint64 `toml:"max_qp"`
	MaxSRQ      uint64 `toml:"max_srq"`
	MaxMR       uint64 `toml:"max_mr"`
	MaxMW       uint64 `toml:"max_mw"`
	MaxAH       uint64 `toml:"max_ah"`
	MaxMem      uint64 `toml:"max_mem"`
	MaxMemBytes uint64 `toml:"max_mem_bytes"`
	MaxMRBytes  uint64 `toml:"max_mr_bytes"`
	MaxMcast    uint64 `toml:"max_mcast"`
}

// setting is one raw value with where it came from, so an error can name
// the flag or the key the user has to fix.
type setting[T any] struct {
	v      T
	origin string // "--mtu" or "config FILE: mtu"; "" for the default
}

func (s setting[T]) set() bool { return s.origin != "" }

// errorf formats an error about the setting, naming its flag or key.
func (s setting[T]) errorf(format string, args ...any) error {
	return &configError{fmt.Sprintf("%s: %s", s.origin, fmt.Sprintf(format, args...))}
}

// rawConfig is the merged settings before validation.
type rawConfig struct {
	iface, mac, name, socket, socketGroup, logLevel, logFormat, pcap setting[string]
	ip                                                               setting[[]string]
	mtu                                                              setting[int]
	metrics                                                          setting[string]
	captureReaders, captureBytes                                     setting[int]
	workers, rxRingFrames                                            setting[int]
	busyPoll                                                         setting[string]

	maxConns, maxConnsPerUser setting[int]
	helloTimeout              setting[string]
	privilegedGroups          setting[[]string]
	connLimits, userLimits    setting[*limitsFile]
	mcast                     setting[*mcastFile]
}

// configError is a bad command line or configuration: the daemon exits with
// exitConfig, and systemd is told not to restart it (RestartPreventExitStatus).
type configError struct{ msg string }

func (e *configError) Error() string { return e.msg }

// Config is the validated configuration.
type Config struct {
	File string // the --config file, "" for none

	Mode   netstack.Mode
	Iface  string           // TAP name (tap mode) or the existing interface (raw mode)
	Addrs  []netip.Prefix   // tap mode only
	MAC    net.HardwareAddr // tap mode; derived when not set
	MACSet bool
	MTU    int // tap mode: the TAP's MTU; raw mode: 0, or what the user asked (must match)
	Name   string

	Socket      string
	SocketGroup string // "" keeps the daemon's group
	SocketGID   int    // -1 when SocketGroup is ""

	LogLevel  slog.Level
	LogFormat string // "text" or "json"
	Pcap      string
	Metrics   string // --metrics: "host:port" or "unix:PATH"; "" for none
	// Live captures (vrnicctl capture): readers at once, and bytes of
	// frames queued for each before frames are dropped; 0: the defaults.
	CaptureMaxReaders, CaptureReaderBytes int
	// Workers is the number of datapath workers (--workers); in raw mode
	// each reads its own socket of a PACKET_FANOUT group that steers a
	// QP's packets to the worker owning it. 0 until validated: the default.
	Workers int
	// RxRingFrames is the slots of each raw-mode socket's TPACKET_V2
	// receive ring (--rx-ring-frames).
	RxRingFrames int
	// BusyPoll is how long a datapath worker polls after its last work
	// before it sleeps (--busy-poll).
	BusyPoll time.Duration

	// What clients may hold and how they connect (server.Config); zero
	// values are the server's defaults.
	ConnLimits, UserLimits    verbsock.Limits
	MaxConns, MaxConnsPerUser int
	// The device's UD multicast limits (nic.Limits); 0: kernel rxe's.
	McastGroups, McastQPsPerGroup, McastAttachments int
	HelloTimeout                                    time.Duration
	PrivilegedGIDs                                  []uint32
}

// loadFile reads a TOML config strictly: unknown keys and values of the
// wrong type are errors that name the key and its line.
func loadFile(path string, raw *rawConfig) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return &configError{fmt.Sprintf("config %s", strings.TrimPrefix(err.Error(), "open "))}
	}
	var fc fileConfig
	d := toml.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(&fc); err != nil {
		return &configError{fmt.Sprintf("config %s: %s", path, tomlError(err))}
	}
	in := func(key string) string { return fmt.Sprintf("config %s: %s", path, key) }
	str := func(dst *setting[string], v *string, key string) {
		if v != nil {
			*dst = setting[string]{*v, in(key)}
		}
	}
	str(&raw.iface, fc.Iface, "iface")
	str(&raw.mac, fc.MAC, "mac")
	str(&raw.name, fc.Name, "name")
	str(&raw.socket, fc.Socket, "socket")
	str(&raw.socketGroup, fc.SocketGroup, "socket_group")
	str(&raw.logLevel, fc.LogLevel, "log_level")
	str(&raw.logFormat, fc.LogFormat, "log_format")
	str(&raw.pcap, fc.Pcap, "pcap")
	str(&raw.metrics, fc.Metrics, "metrics")
	if fc.CaptureMaxReaders != nil {
		raw.captureReaders = setting[int]{*fc.CaptureMaxReaders, in("capture_max_readers")}
	}
	if fc.CaptureReaderBytes != nil {
		raw.captureBytes = setting[int]{*fc.CaptureReaderBytes, in("capture_reader_bytes")}
	}
	if fc.IP != nil {
		raw.ip = setting[[]string]{fc.IP, in("ip")}
	}
	if fc.MTU != nil {
		raw.mtu = setting[int]{*fc.MTU, in("mtu")}
	}
	if fc.Workers != nil {
		raw.workers = setting[int]{*fc.Workers, in("workers")}
	}
	if fc.RxRingFrames != nil {
		raw.rxRingFrames = setting[int]{*fc.RxRingFrames, in("rx_ring_frames")}
	}
	str(&raw.busyPoll, fc.BusyPoll, "busy_poll")
	loadClientLimits(&fc, raw, in)
	return nil
}

func loadClientLimits(fc *fileConfig, raw *rawConfig, in func(string) string) {
	if fc.MaxConnections != nil {
		raw.maxConns = setting[int]{*fc.MaxConnections, in("max_connections")}
	}
	if fc.MaxConnectionsPerUser != nil {
		raw.maxConnsPerUser = setting[int]{*fc.MaxConnectionsPerUser, in("max_connections_per_user")}
	}
	if fc.HelloTimeout != nil {
		raw.helloTimeout = setting[string]{*fc.HelloTimeout, in("hello_timeout")}
	}
	if fc.PrivilegedGroups != nil {
		raw.privilegedGroups = setting[[]string]{fc.PrivilegedGroups, in("privileged_groups")}
	}
	if fc.ConnectionLimits != nil {
		raw.connLimits = setting[*limitsFile]{fc.ConnectionLimits, in("connection_limits")}
	}
	if fc.UserLimits != nil {
		raw.userLimits = setting[*limitsFile]{fc.UserLimits, in("user_limits")}
	}
	if fc.Multicast != nil {
		raw.mcast = setting[*mcastFile]{fc.Multicast, in("multicast")}
	}
}

// validateClientLimits checks the connection and quota keys.
func (raw *rawConfig) validateClientLimits(c *Config) error {
	for _, v := range []struct {
		s        setting[int]
		dst      *int
		min, max int
	}{{raw.maxConns, &c.MaxConns, 1, 1 << 20}, {raw.maxConnsPerUser, &c.MaxConnsPerUser, 1, 1 << 20},
		{raw.captureReaders, &c.CaptureMaxReaders, 1, 256}, {raw.captureBytes, &c.CaptureReaderBytes, 1 << 16, 1 << 30},
		{raw.workers, &c.Workers, 1, link.MaxFanout}, {raw.rxRingFrames, &c.RxRingFrames, 64, 65536}} {
		if v.s.set() {
			if v.s.v < v.min || v.s.v > v.max {
				return v.s.errorf("%d is out of range (%d..%d)", v.s.v, v.min, v.max)
			}
			*v.dst = v.s.v
		}
	}
	if c.MaxConns > 0 && c.MaxConnsPerUser > c.MaxConns {
		return raw.maxConnsPerUser.errorf("%d is more than max_connections %d", c.MaxConnsPerUser, c.MaxConns)
	}
	if raw.busyPoll.set() {
		d, err := time.ParseDuration(raw.busyPoll.v)
		if err != nil || d < 0 || d > maxBusyPoll {
			return raw.busyPoll.errorf("%q is not a duration from 0 to %v, like \"100us\"", raw.busyPoll.v, maxBusyPoll)
		}
		c.BusyPoll = d
	}
	if raw.helloTimeout.set() {
		d, err := time.ParseDuration(raw.helloTimeout.v)
		if err != nil || d < 10*time.Millisecond || d > time.Hour {
			return raw.helloTimeout.errorf("%q is not a duration from 10ms to 1h, like \"5s\"", raw.helloTimeout.v)
		}
		c.HelloTimeout = d
	}
	for _, g := range raw.privilegedGroups.v {
		gid, err := lookupGroup(g)
		if err != nil {
			return raw.privilegedGroups.errorf("%v", err)
		}
		c.PrivilegedGIDs = append(c.PrivilegedGIDs, uint32(gid))
	}
	if err := raw.mcast.mcastLimits(c); err != nil {
		return err
	}
	var err error
	if c.ConnLimits, err = raw.connLimits.limits(); err != nil {
		return err
	}
	c.UserLimits, err = raw.userLimits.limits()
	return err
}

// limits turns a quota table into verbsock.Limits; object counts must fit
// 32 bits.
func (s setting[T]) limits() (verbsock.Limits, error) {
	lf, _ := any(s.v).(*limitsFile)
	if lf == nil {
		return verbsock.Limits{}, nil
	}
	var l verbsock.Limits
	for _, f := range []struct {
		key string
		v   uint64
		dst *uint32
	}{{"max_pd", lf.MaxPD, &l.MaxPD}, {"max_cq", lf.MaxCQ, &l.MaxCQ}, {"max_qp", lf.MaxQP, &l.MaxQP},
		{"max_srq", lf.MaxSRQ, &l.MaxSRQ}, {"max_mr", lf.MaxMR, &l.MaxMR}, {"max_mw", lf.MaxMW, &l.MaxMW},
		{"max_ah", lf.MaxAH, &l.MaxAH}, {"max_mem", lf.MaxMem, &l.MaxMem}, {"max_mcast", lf.MaxMcast, &l.MaxMcast}} {
		if f.v > 1<<31 {
			return l, s.errorf("%s = %d is out of range (0..%d; 0 is the default)", f.key, f.v, uint64(1)<<31)
		}
		*f.dst = uint32(f.v)
	}
	l.MaxMemBytes, l.MaxMRBytes = lf.MaxMemBytes, lf.MaxMRBytes
	return l, nil
}

// mcastLimits checks the [multicast] table into c: each limit from 1 to
// 1<<20 (0 or absent: kernel rxe's).
func (s setting[T]) mcastLimits(c *Config) error {
	m, _ := any(s.v).(*mcastFile)
	if m == nil {
		return nil
	}
	for _, f := range []struct {
		key string
		v   int
		dst *int
	}{{"max_groups", m.MaxGroups, &c.McastGroups}, {"max_qps_per_group", m.MaxQPsPerGroup, &c.McastQPsPerGroup},
		{"max_attachments", m.MaxAttachments, &c.McastAttachments}} {
		if f.v < 0 || f.v > 1<<20 {
			return s.errorf("%s = %d is out of range (0..%d; 0 is the default)", f.key, f.v, 1<<20)
		}
		*f.dst = f.v
	}
	return nil
}

var tomlTypeMsg = regexp.MustCompile(`cannot decode TOML (\w+) into .* of type (\S+)$`)

// tomlError turns a go-toml error into one line naming the key and its
// position.
func tomlError(err error) string {
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) && len(strict.Errors) > 0 {
		var keys []string
		for i := range strict.Errors {
			e := &strict.Errors[i]
			row, _ := e.Position()
			keys = append(keys, fmt.Sprintf("%q (line %d)", strings.Join(e.Key(), "."), row))
		}
		word := "key"
		if len(keys) > 1 {
			word = "keys"
		}
		return fmt.Sprintf("unknown %s %s", word, strings.Join(keys, ", "))
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, col := de.Position()
		msg := strings.TrimPrefix(de.Error(), "toml: ")
		if m := tomlTypeMsg.FindStringSubmatch(msg); m != nil {
			msg = fmt.Sprintf("want %s, got a TOML %s", goTypeWord(m[2]), m[1])
		}
		if k := de.Key(); len(k) > 0 {
			return fmt.Sprintf("%s (line %d): %s", strings.Join(k, "."), row, msg)
		}
		return fmt.Sprintf("line %d column %d: %s", row, col, msg)
	}
	return strings.TrimPrefix(err.Error(), "toml: ")
}

func goTypeWord(t string) string {
	switch {
	case t == "string":
		return "a string"
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "[]"):
		return "an array of " + strings.TrimPrefix(goTypeWord(t[2:]), "a ") + "s"
	}
	return t
}

// validate checks the merged settings and turns them into a Config, in
// named steps: the link (interface, addresses, MAC, MTU), the device name,
// the socket, logging and outputs, the client limits.
func (raw *rawConfig) validate() (*Config, error) {
	c := &Config{Name: defaultName, Socket: defaultSocket, SocketGID: -1, LogLevel: slog.LevelInfo, LogFormat: "text",
		Workers: defaultWorkers, RxRingFrames: defaultRxRingFrames, BusyPoll: nic.DefaultBusyPoll}
	for _, step := range []func(*Config) error{raw.validateLink, raw.validateSocket, raw.validateOutputs, raw.validateClientLimits} {
		if err := step(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// validateLink: the interface and its mode, addresses, MAC and MTU (the
// kernel's own for a raw interface), then the device name.
func (raw *rawConfig) validateLink(c *Config) error {
	iface := raw.iface
	if !iface.set() || iface.v == "" {
		return &configError{"no interface: give --iface tap:NAME (a new TAP) or --iface IFACE (raw mode on an existing interface), or iface in the config file"}
	}
	if name, ok := strings.CutPrefix(iface.v, "tap:"); ok {
		c.Mode = netstack.ModeTAP
		if err := checkIfName(name); err != nil {
			return iface.errorf("TAP name %q %v", name, err)
		}
		c.Iface = name
	} else {
		c.Mode = netstack.ModeRaw
		if err := checkIfName(iface.v); err != nil {
			return iface.errorf("interface name %q %v", iface.v, err)
		}
		c.Iface = iface.v
	}

	for _, s := range raw.ip.v {
		p, err := parsePrefix(s)
		if err != nil {
			return raw.ip.errorf("%v", err)
		}
		c.Addrs = append(c.Addrs, p)
	}
	if raw.mac.set() && raw.mac.v != "" {
		m, err := parseMAC(raw.mac.v)
		if err != nil {
			return raw.mac.errorf("%v", err)
		}
		c.MAC, c.MACSet = m, true
	}
	if raw.mtu.set() {
		if raw.mtu.v < minMTU || raw.mtu.v > maxMTU {
			return raw.mtu.errorf("%d is out of range (%d..%d; IPv6, which every vrnicd port has, needs %d)", raw.mtu.v, minMTU, maxMTU, minMTU)
		}
		c.MTU = raw.mtu.v
	}
	if c.Mode == netstack.ModeRaw {
		// The kernel owns a raw interface: its MAC and addresses are the
		// NIC's, and are followed as they change.
		if len(c.Addrs) > 0 {
			return raw.ip.errorf("raw mode uses %s's own addresses (add them with 'ip addr add ... dev %s'); ip is for tap: interfaces only", c.Iface, c.Iface)
		}
		if c.MACSet {
			return raw.mac.errorf("raw mode uses %s's own MAC; mac is for tap: interfaces only", c.Iface)
		}
	} else {
		// MTU 0: OpenTAP makes a new TAP's 1500 (defaultMTU) and keeps
		// an adopted TAP's own.
		if !c.MACSet {
			c.MAC = stableMAC(c.Iface)
		}
	}
	if raw.name.set() {
		if err := checkDevName(raw.name.v); err != nil {
			return raw.name.errorf("%v", err)
		}
		c.Name = raw.name.v
	}
	return nil
}

// validateSocket: the socket's path and group.
func (raw *rawConfig) validateSocket(c *Config) error {
	if raw.socket.set() {
		c.Socket = raw.socket.v
	}
	switch {
	case c.Socket == "":
		return raw.socket.errorf("empty socket path")
	case !strings.HasPrefix(c.Socket, "/"):
		return raw.socket.errorf("%q is not an absolute path", c.Socket)
	case len(c.Socket) > maxSocketPath:
		return raw.socket.errorf("path is %d bytes; a Unix socket path holds at most %d", len(c.Socket), maxSocketPath)
	}
	if raw.socketGroup.set() && raw.socketGroup.v != "" {
		gid, err := lookupGroup(raw.socketGroup.v)
		if err != nil {
			return raw.socketGroup.errorf("%v", err)
		}
		c.SocketGroup, c.SocketGID = raw.socketGroup.v, gid
	}
	return nil
}

// validateOutputs: the log level and format, the pcap file, the metrics
// endpoint.
func (raw *rawConfig) validateOutputs(c *Config) error {
	if raw.logLevel.set() {
		l, err := parseLevel(raw.logLevel.v)
		if err != nil {
			return raw.logLevel.errorf("%v", err)
		}
		c.LogLevel = l
	}
	if raw.logFormat.set() {
		switch f := strings.ToLower(raw.logFormat.v); f {
		case "text", "json":
			c.LogFormat = f
		default:
			return raw.logFormat.errorf("%q is not text or json", raw.logFormat.v)
		}
	}
	if raw.pcap.set() {
		c.Pcap = raw.pcap.v
	}
	if raw.metrics.set() && raw.metrics.v != "" {
		if err := checkMetricsAddr(raw.metrics.v); err != nil {
			return raw.metrics.errorf("%v", err)
		}
		c.Metrics = raw.metrics.v
	}
	return nil
}

// defaultWorkers: one datapath worker. On a machine whose cores the
// daemons share with busy-polling clients, more cost more than they give
// (docs/performance.md).
const defaultWorkers = 1

// maxBusyPoll bounds --busy-poll: past it a worker is simply busy.
const maxBusyPoll = 10 * time.Millisecond

// defaultRxRingFrames: room for eight QPs' worth of unacknowledged packets
// (128 PSNs each, RXE_MAX_UNACKED_PSNS) and their ACKs. With 448 slots (the
// earlier ring sized for MTU 9000 frames) write_bw -q 4 lost about 5 % of
// its packets to the receiver's ring on a clean veth
// (docs/performance.md); RoCEv2 frames never exceed link.MaxRoCEPacket, so slots
// of that size give 1024 of them from about the same memory.
const defaultRxRingFrames = 1024

// checkMetricsAddr: --metrics is host:port (TCP) or unix:PATH.
func checkMetricsAddr(a string) error {
	if p, ok := strings.CutPrefix(a, "unix:"); ok {
		switch {
		case !strings.HasPrefix(p, "/"):
			return fmt.Errorf("%q: unix: takes an absolute path", a)
		case len(p) > maxSocketPath:
			return fmt.Errorf("%q: path is %d bytes; a Unix socket path holds at most %d", a, len(p), maxSocketPath)
		}
		return nil
	}
	_, port, err := net.SplitHostPort(a)
	if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q is not HOST:PORT (e.g. 127.0.0.1:9464) or unix:PATH", a)
	}
	return nil
}

// checkIfName applies the kernel's rules for interface names (dev_valid_name).
func checkIfName(n string) error {
	switch {
	case n == "":
		return errors.New("is empty")
	case len(n) > 15:
		return fmt.Errorf("is %d bytes long; interface names hold at most 15", len(n))
	case n == "." || n == "..":
		return errors.New("is not a valid interface name")
	case strings.ContainsAny(n, "/: \t\n"):
		return errors.New("contains '/', ':' or white space")
	}
	return nil
}

// checkDevName: the device name clients open (ibv_devinfo's hca_id).
func checkDevName(n string) error {
	if n == "" || len(n) > 63 {
		return fmt.Errorf("device name %q must be 1..63 bytes", n)
	}
	for _, r := range n {
		if !(r == '_' || r == '-' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return fmt.Errorf("device name %q may hold only letters, digits, '.', '-' and '_'", n)
		}
	}
	return nil
}

// parsePrefix reads ADDRESS/PREFIXLEN for a TAP-mode address.
func parsePrefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(strings.TrimSpace(s))
	if err != nil {
		if _, aerr := netip.ParseAddr(s); aerr == nil {
			return p, fmt.Errorf("%q has no prefix length (write e.g. %s/24 or %s/64)", s, s, s)
		}
		return p, fmt.Errorf("%q is not an IPv4 or IPv6 address with a prefix length, like 192.0.2.10/24 or 2001:db8::10/64", s)
	}
	a := p.Addr()
	switch {
	case a.Zone() != "":
		return p, fmt.Errorf("%q: an address here takes no zone", s)
	case a.Is4In6():
		return p, fmt.Errorf("%q: write IPv4 addresses as a.b.c.d/N", s)
	case a.IsUnspecified(), a.IsLoopback(), a.IsMulticast():
		return p, fmt.Errorf("%q cannot be a NIC's address", s)
	}
	if a.Is4() && p.Bits() <= 30 {
		b := a.As4()
		v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
		switch host := uint32(1)<<(32-p.Bits()) - 1; v & host {
		case 0:
			return p, fmt.Errorf("%q is the subnet's network address, not a host's", s)
		case host:
			return p, fmt.Errorf("%q is the subnet's broadcast address, not a host's", s)
		}
	}
	return p, nil
}

// parseMAC reads a unicast Ethernet address.
func parseMAC(s string) (net.HardwareAddr, error) {
	m, err := net.ParseMAC(s)
	if err != nil || len(m) != 6 {
		return nil, fmt.Errorf("%q is not an Ethernet MAC address like 02:00:5e:10:00:01", s)
	}
	if m[0]&1 != 0 {
		return nil, fmt.Errorf("%q is a multicast address; a NIC needs a unicast one", s)
	}
	if string(m) == "\x00\x00\x00\x00\x00\x00" {
		return nil, fmt.Errorf("%q is the zero address", s)
	}
	return m, nil
}

// stableMAC derives a locally administered unicast MAC from the host name
// and the TAP name, so a restarted daemon keeps its MAC and with it its
// default GID and node GUID.
func stableMAC(tap string) net.HardwareAddr {
	host, _ := os.Hostname()
	sum := sha256.Sum256([]byte("vrnicd\x00" + host + "\x00" + tap))
	m := net.HardwareAddr(sum[:6])
	m[0] = m[0]&^0x01 | 0x02
	return m
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	switch strings.ToLower(s) {
	case "debug", "info", "warn", "warning", "error":
		if strings.EqualFold(s, "warning") {
			s = "warn"
		}
		err := l.UnmarshalText([]byte(s))
		return l, err
	}
	return l, fmt.Errorf("%q is not one of debug, info, warn, error", s)
}

// lookupGroup resolves a group name or a numeric GID.
func lookupGroup(g string) (int, error) {
	if n, err := strconv.Atoi(g); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("group %d is not a valid GID", n)
		}
		return n, nil
	}
	gr, err := user.LookupGroup(g)
	if err != nil {
		return 0, fmt.Errorf("no group %q on this host", g)
	}
	return strconv.Atoi(gr.Gid)
}
