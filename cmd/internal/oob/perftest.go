package oob

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"time"
)

// PerftestVersion is the version string perftest 4.5 sends (its
// configure.ac's AC_INIT version), and the one this package sends.
const PerftestVersion = "6.06"

// PerftestVersionSize is the size of the version message (MAX_VERSION).
const PerftestVersionSize = 16

// PerftestMinVersion is the oldest peer perftest accepts
// (check_version_compatibility); it also fixes the shape of the later
// messages (2-byte MTU string, 8-byte iteration count), which older
// versions sent differently.
const PerftestMinVersion = 5.70

// Sizes of perftest's address message (KEY_MSG_SIZE_GID, KEY_MSG_SIZE).
const (
	PerftestKeySize      = 108 // with the GID: every RoCE run
	PerftestKeySizeNoGID = 59  // without: InfiniBand with no GID index
)

// PerftestDest is one QP's address as perftest exchanges it (struct
// pingpong_dest): LID, the outstanding RDMA reads the side allows, QPN,
// initial PSN, the rkey and address of its buffer, GID and SRQ number.
type PerftestDest struct {
	LID      uint16
	OutReads uint16
	QPN      uint32 // 24 bits
	PSN      uint32 // 24 bits
	RKey     uint32
	VAddr    uint64
	GID      [16]byte
	SRQN     uint32
}

// AppendMsg appends d's message: with the GID (108 bytes)
// "%04x:%04x:%06x:%06x:%08x:%016llx:" + 16 × "%02x:" + "%08x:" and a NUL,
// = LID:OUT_READS:QPN:PSN:RKEY:VADDR:GID bytes:SRQN:; without it (59)
// "%04x:%04x:%06x:%06x:%08x:%016llx:%08x" and a NUL.
func (d PerftestDest) AppendMsg(b []byte, withGID bool) []byte {
	b = appendHex(b, uint64(d.LID), 4)
	b = append(b, ':')
	b = appendHex(b, uint64(d.OutReads), 4)
	b = append(b, ':')
	b = appendHex(b, uint64(d.QPN&0xffffff), 6)
	b = append(b, ':')
	b = appendHex(b, uint64(d.PSN&0xffffff), 6)
	b = append(b, ':')
	b = appendHex(b, uint64(d.RKey), 8)
	b = append(b, ':')
	b = appendHex(b, d.VAddr, 16)
	b = append(b, ':')
	if withGID {
		for _, g := range d.GID {
			b = appendHex(b, uint64(g), 2)
			b = append(b, ':')
		}
		b = appendHex(b, uint64(d.SRQN), 8)
		b = append(b, ':')
	} else {
		b = appendHex(b, uint64(d.SRQN), 8)
	}
	return append(b, 0)
}

// ParsePerftestDest decodes one address message of either form (told
// apart by its size). Strict, like ParsePingpongDest.
func ParsePerftestDest(msg []byte) (PerftestDest, error) {
	var d PerftestDest
	bad := func(why string) (PerftestDest, error) {
		return PerftestDest{}, &ProtocolError{Op: "perftest address", Msg: msg, Why: why}
	}
	withGID := len(msg) == PerftestKeySize
	if !withGID && len(msg) != PerftestKeySizeNoGID {
		return bad(fmt.Sprintf("%d bytes, want %d or %d", len(msg), PerftestKeySize, PerftestKeySizeNoGID))
	}
	if msg[len(msg)-1] != 0 {
		return bad("no NUL at the end")
	}
	// Field widths in order; a ':' follows each but the last one of the
	// short form.
	widths := []int{4, 4, 6, 6, 8, 16}
	if withGID {
		for range 16 {
			widths = append(widths, 2)
		}
	}
	widths = append(widths, 8)
	vals := make([]uint64, 0, len(widths))
	p := 0
	for i, w := range widths {
		v, ok := parseHex(msg[p : p+w])
		if !ok {
			return bad(fmt.Sprintf("field %d is not %d hex digits", i+1, w))
		}
		vals = append(vals, v)
		p += w
		if withGID || i < len(widths)-1 {
			if msg[p] != ':' {
				return bad(fmt.Sprintf("no ':' after field %d", i+1))
			}
			p++
		}
	}
	if p != len(msg)-1 {
		return bad("trailing bytes before the NUL")
	}
	d.LID, d.OutReads = uint16(vals[0]), uint16(vals[1])
	d.QPN, d.PSN, d.RKey, d.VAddr = uint32(vals[2]), uint32(vals[3]), uint32(vals[4]), vals[5]
	if withGID {
		for i := range d.GID {
			d.GID[i] = byte(vals[6+i])
		}
	}
	d.SRQN = uint32(vals[len(vals)-1])
	return d, nil
}

// PerftestDestSize is the size of struct pingpong_dest on x86-64 and
// arm64, the address message of perftest's rdma_cm modes.
const PerftestDestSize = 56

// AppendBinary appends d as perftest's rdma_write_keys sends it: struct
// pingpong_dest with every integer big-endian (its HAVE_ENDIAN build, as
// every Linux distribution's): lid, out_reads, qpn, psn, rkey (4 bytes
// each), 4 bytes of padding, vaddr (8), the GID (16), srqn and gid_index
// (4 each, the latter 0: the peer does not read it).
func (d PerftestDest) AppendBinary(b []byte) []byte {
	for _, v := range []uint32{uint32(d.LID), uint32(d.OutReads), d.QPN, d.PSN, d.RKey, 0} {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	b = binary.BigEndian.AppendUint64(b, d.VAddr)
	b = append(b, d.GID[:]...)
	b = binary.BigEndian.AppendUint32(b, d.SRQN)
	return binary.BigEndian.AppendUint32(b, 0)
}

// ParsePerftestDestBinary decodes rdma_read_keys' message. perftest reads
// only lid … gid (not srqn), and so does this; the padding may be any
// bytes (perftest sends its stack's).
func ParsePerftestDestBinary(msg []byte) (PerftestDest, error) {
	if len(msg) != PerftestDestSize {
		return PerftestDest{}, &ProtocolError{Op: "the peer's perftest address", Msg: msg,
			Why: fmt.Sprintf("%d bytes, want %d", len(msg), PerftestDestSize)}
	}
	be := binary.BigEndian
	d := PerftestDest{LID: uint16(be.Uint32(msg)), OutReads: uint16(be.Uint32(msg[4:])), QPN: be.Uint32(msg[8:]) & 0xffffff,
		PSN: be.Uint32(msg[12:]) & 0xffffff, RKey: be.Uint32(msg[16:]), VAddr: be.Uint64(msg[24:])}
	copy(d.GID[:], msg[32:48])
	return d, nil
}

// BWReport is what perftest's bandwidth tests exchange after a run
// (struct bw_report_data, the fields xchg_bw_reports sends): the message
// size, iterations, peak and average bandwidth and the message rate, in
// the units the sender reports in.
type BWReport struct {
	Size       uint64
	Iters      uint64
	BWPeak     float64
	BWAvg      float64
	MsgRateAvg float64
}

// Perftest is one side of perftest's exchange on a Conn. Each exchange
// step is symmetric: the client writes its value and reads the server's;
// the server reads first, then writes (ctx_xchg_data, ctx_hand_shake).
//
// The order a run goes through (write/read/atomic bw, for one QP):
//
//	ExchangeVersions, ExchangeSysData, ExchangeMTU,
//	HandShake per QP (addresses), [the QPs go to RTS], HandShake per QP
//	(printed as the remote addresses), HandShake (after RTR),
//	[the client runs the test; the server waits in:]
//	HandShake, ExchangeBWReports, Close (a last HandShake and "done").
//
// The other tests differ in where they put the handshakes; cmd/vrnic-perf
// follows each one's main().
type Perftest struct {
	ch      PerftestChannel
	c       *Conn // the TCP connection; nil in rdma_cm mode
	client  bool
	noGID   bool
	version string
}

// PerftestChannel carries perftest's messages: a TCP connection (*Conn),
// or in perftest's rdma_cm modes (-R, -z) SENDs and RECVs on a QP that
// rdma_cm connected, one message each.
type PerftestChannel interface {
	// WriteMsg sends msg as one message; what names it in errors.
	WriteMsg(ctx context.Context, msg []byte, what string) error
	// ReadMsg fills buf with one message of exactly its size, waiting at
	// most wait (the channel's own bound if zero).
	ReadMsg(ctx context.Context, buf []byte, what string, wait time.Duration) error
}

// Perftest starts perftest's exchange on c, as the client (the side that
// connected) or the server.
func (c *Conn) Perftest(client bool) *Perftest { return &Perftest{ch: c, c: c, client: client} }

// PerftestRDMACM starts perftest's exchange in its rdma_cm modes on ch:
// the same messages, except that each address goes as perftest's binary
// struct pingpong_dest (PerftestDestSize bytes, AppendBinary) and Close
// sends no "done".
func PerftestRDMACM(ch PerftestChannel, client bool) *Perftest {
	return &Perftest{ch: ch, client: client}
}

// WriteMsg sends msg in one write (PerftestChannel).
func (c *Conn) WriteMsg(ctx context.Context, msg []byte, what string) error {
	return c.write(ctx, msg, what)
}

// ReadMsg reads len(buf) bytes (PerftestChannel).
func (c *Conn) ReadMsg(ctx context.Context, buf []byte, what string, wait time.Duration) error {
	return c.read(ctx, buf, what, wait)
}

// SetGID chooses the address message form: with the GID (the default, and
// what every RoCE run uses) or without (InfiniBand without a GID index).
// perftest's peers must agree; each reads the form it would send.
func (p *Perftest) SetGID(with bool) { p.noGID = !with }

// RemoteVersion is the peer's version string once ExchangeVersions ran.
func (p *Perftest) RemoteVersion() string { return p.version }

// xchg sends mine and receives the peer's same-sized value, in the order
// of p's side.
func (p *Perftest) xchg(ctx context.Context, mine, theirs []byte, what string, wait time.Duration) error {
	send := func() error { return p.ch.WriteMsg(ctx, mine, "sending our "+what) }
	recv := func() error { return p.ch.ReadMsg(ctx, theirs, "reading the peer's "+what, wait) }
	if p.client {
		if err := send(); err != nil {
			return err
		}
		return recv()
	}
	if err := recv(); err != nil {
		return err
	}
	return send()
}

// ExchangeVersions sends local (PerftestVersion normally) NUL-padded to 16
// bytes, reads the peer's and checks it is at least PerftestMinVersion, as
// perftest does before anything else.
func (p *Perftest) ExchangeVersions(ctx context.Context, local string) (string, error) {
	mine := make([]byte, PerftestVersionSize)
	copy(mine, local) // strncpy: NUL-padded, not terminated if 16 long
	theirs := make([]byte, PerftestVersionSize)
	if err := p.xchg(ctx, mine, theirs, "perftest version", 0); err != nil {
		return "", err
	}
	n := 0
	for n < len(theirs) && theirs[n] != 0 {
		n++
	}
	p.version = string(theirs[:n])
	v, ok := atof(p.version)
	if !ok {
		return p.version, &ProtocolError{Op: "the peer's perftest version", Msg: theirs, Why: "not a version number"}
	}
	if v < PerftestMinVersion {
		return p.version, fmt.Errorf("oob: the peer runs perftest version %q; perftest only talks to %.2f and later", p.version, PerftestMinVersion)
	}
	return p.version, nil
}

// ExchangeSysData exchanges the cycle buffer size (the page size) and the
// cache line size, 4-byte big-endian ints each (check_sys_data). perftest
// then uses the larger of each.
func (p *Perftest) ExchangeSysData(ctx context.Context, cycleBuffer, cacheLine int32) (remCycleBuffer, remCacheLine int32, err error) {
	var mine, theirs [4]byte
	binary.BigEndian.PutUint32(mine[:], uint32(cycleBuffer))
	if err := p.xchg(ctx, mine[:], theirs[:], "cycle buffer size", 0); err != nil {
		return 0, 0, err
	}
	remCycleBuffer = int32(binary.BigEndian.Uint32(theirs[:]))
	binary.BigEndian.PutUint32(mine[:], uint32(cacheLine))
	if err := p.xchg(ctx, mine[:], theirs[:], "cache line size", 0); err != nil {
		return 0, 0, err
	}
	remCacheLine = int32(binary.BigEndian.Uint32(theirs[:]))
	if remCycleBuffer <= 0 || remCacheLine <= 0 {
		return remCycleBuffer, remCacheLine, fmt.Errorf("oob: the peer's cycle buffer %d / cache line %d: want positive sizes", remCycleBuffer, remCacheLine)
	}
	return remCycleBuffer, remCacheLine, nil
}

// ExchangeMTU exchanges the path MTU each side would use, as the IB MTU
// enum (1 = 256 … 5 = 4096) in decimal with its NUL, 2 bytes (check_mtu).
// The run then uses NegotiateMTU of the two.
func (p *Perftest) ExchangeMTU(ctx context.Context, mtu int) (int, error) {
	if mtu < 1 || mtu > 9 {
		return 0, fmt.Errorf("oob: MTU enum %d does not fit perftest's 2-byte message", mtu)
	}
	mine := []byte{byte('0' + mtu), 0}
	theirs := make([]byte, 2)
	if err := p.xchg(ctx, mine, theirs, "MTU", 0); err != nil {
		return 0, err
	}
	if theirs[0] < '0' || theirs[0] > '9' || theirs[1] != 0 {
		return 0, &ProtocolError{Op: "the peer's MTU", Msg: theirs, Why: "want one decimal digit and a NUL"}
	}
	return int(theirs[0] - '0'), nil
}

// NegotiateMTU is check_mtu's choice: the smaller of the two, ignoring a
// remote value outside 1…5.
func NegotiateMTU(local, remote int) int {
	if remote >= 1 && remote <= 5 && local > remote {
		return remote
	}
	return local
}

// HandShake exchanges one QP's address (ctx_hand_shake). perftest also
// uses it as a barrier: wait bounds the read when the peer may be busy
// (running its side of the test) before it answers; 0 means Conn.Timeout.
func (p *Perftest) HandShake(ctx context.Context, local PerftestDest, wait time.Duration) (PerftestDest, error) {
	if p.c == nil {
		theirs := make([]byte, PerftestDestSize)
		if err := p.xchg(ctx, local.AppendBinary(nil), theirs, "perftest address", wait); err != nil {
			return PerftestDest{}, err
		}
		return ParsePerftestDestBinary(theirs)
	}
	size := PerftestKeySize
	if p.noGID {
		size = PerftestKeySizeNoGID
	}
	theirs := make([]byte, size)
	if err := p.xchg(ctx, local.AppendMsg(nil, !p.noGID), theirs, "perftest address", wait); err != nil {
		return PerftestDest{}, err
	}
	d, err := ParsePerftestDest(theirs)
	if err != nil {
		err.(*ProtocolError).Op = "the peer's perftest address"
	}
	return d, err
}

// ExchangeBWReports exchanges the bandwidth results after a run
// (xchg_bw_reports): five 8-byte big-endian values, size, iterations, peak
// bandwidth, average bandwidth and message rate (doubles as their IEEE
// bits). A half-duplex server sends whatever it has; the client's are the
// results.
func (p *Perftest) ExchangeBWReports(ctx context.Context, local BWReport, wait time.Duration) (BWReport, error) {
	mine := []uint64{local.Size, local.Iters, math.Float64bits(local.BWPeak), math.Float64bits(local.BWAvg), math.Float64bits(local.MsgRateAvg)}
	names := []string{"report size", "report iterations", "report peak bandwidth", "report average bandwidth", "report message rate"}
	var got [5]uint64
	var a, b [8]byte
	for i := range mine {
		binary.BigEndian.PutUint64(a[:], mine[i])
		w := time.Duration(0)
		if i == 0 {
			w = wait
		}
		if err := p.xchg(ctx, a[:], b[:], names[i], w); err != nil {
			return BWReport{}, err
		}
		got[i] = binary.BigEndian.Uint64(b[:])
	}
	return BWReport{
		Size: got[0], Iters: got[1],
		BWPeak: math.Float64frombits(got[2]), BWAvg: math.Float64frombits(got[3]), MsgRateAvg: math.Float64frombits(got[4]),
	}, nil
}

// Close ends the exchange (ctx_close_connection): a last HandShake, then
// each side writes "done"; this side also reads the peer's, then closes
// the connection. wait bounds the handshake as in HandShake. In rdma_cm
// mode the handshake is all; the channel stays the caller's.
func (p *Perftest) Close(ctx context.Context, local PerftestDest, wait time.Duration) error {
	if p.c == nil {
		_, err := p.HandShake(ctx, local, wait)
		return err
	}
	defer p.c.Close()
	if _, err := p.HandShake(ctx, local, wait); err != nil {
		return err
	}
	if err := p.c.write(ctx, doneMsg, `sending "done"`); err != nil {
		return err
	}
	return p.c.readDone(ctx, 0)
}

// atof reads the number at the start of s, as C's atof does for the
// version strings perftest compares ("6.06", "5.70").
func atof(s string) (float64, bool) {
	n := 0
	dot := false
	for n < len(s) && (s[n] >= '0' && s[n] <= '9' || s[n] == '.' && !dot) {
		if s[n] == '.' {
			dot = true
		}
		n++
	}
	if n == 0 || s[:n] == "." {
		return 0, false
	}
	v, err := strconv.ParseFloat(s[:n], 64)
	return v, err == nil
}
