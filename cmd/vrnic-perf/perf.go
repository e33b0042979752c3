package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/vrnic/vrnicd/cmd/internal/oob"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// session is one perftest run: perftest's pingpong_context and comm.
type session struct {
	p          *params
	out, errw  io.Writer
	dev        *verbs.Device
	pd         *verbs.PD
	buf        *verbs.Buffer
	mr         *verbs.MR
	scq, rcq   *verbs.CQ
	qps        []*verbs.QP
	my, rem    []oob.PerftestDest
	conn       *oob.Conn
	comm       *oob.Perftest
	mtu        verbs.MTU
	cycle      int    // cycle buffer: the larger page size of the two sides
	cacheLine  int    // likewise
	bsize      uint64 // BUFF_SIZE(size, cycle_buffer)
	sendStride uint64 // INC(BUFF_SIZE, cache line): send_qp_buff_size
	maxRdAtom  int
	progress   *progress
}

// Waits: a message of the exchange answers at once (oob.DefaultTimeout);
// at a barrier behind which the peer runs its side of a test, it answers
// when that run ends.
const runWait = 24 * time.Hour

// durationLinger is how long a duration ping-pong keeps its QP after
// its own end.
var durationLinger = time.Second

// stallTimeout bounds the wait for any progress (a completion, a remote
// write arriving) while a test runs; perftest would wait forever.
var stallTimeout = 60 * time.Second

// onListen, if set, is told the server's address once it listens.
var onListen func(net.Addr)

func perf(ctx context.Context, p *params, stdout, stderr io.Writer) error {
	dev, err := verbs.Open(p.socket)
	if err != nil {
		return fmt.Errorf(" Couldn't get context for vrnicd at %s: %w", p.socket, err)
	}
	defer dev.Close()
	if p.ibDev != "" && p.ibDev != dev.Name() {
		return fmt.Errorf("IB device %s not found (vrnicd at %s serves %s)", p.ibDev, p.socket, dev.Name())
	}
	s := &session{p: p, out: stdout, errw: stderr, dev: dev, progress: newProgress(stderr, p)}
	defer s.close()
	if err := s.checkLink(); err != nil {
		return err
	}
	if !p.client() {
		printWaiting(stdout)
	}
	if err := s.establish(ctx); err != nil {
		return err
	}
	defer s.conn.Close()
	if err := s.initCtx(); err != nil {
		return err
	}
	if err := s.setUpConnection(); err != nil {
		return err
	}
	printTestInfo(stdout, p, dev.Name(), s.mtu.Bytes())
	switch {
	case !p.test.lat && p.test.verb == verbSend:
		return s.sendBWMain(ctx)
	case !p.test.lat:
		return s.bwMain(ctx)
	default:
		return s.latMain(ctx)
	}
}

// checkLink is check_link: the port must be up, on Ethernet (RoCE); the GID
// index defaults to 0 there; outstanding reads default to the device's
// maximum; the inline size is disabled (perftest does not know the device).
func (s *session) checkLink() error {
	p := s.p
	port, err := s.dev.QueryPort(uint8(p.ibPort))
	if err != nil {
		return fmt.Errorf(" Unable to query port %d attributes: %w", p.ibPort, err)
	}
	if port.State != verbs.PortActive {
		return fmt.Errorf(" Port number %d state is %s", p.ibPort, portState(port.State))
	}
	if p.gidIndex == -1 {
		p.gidIndex = 0
	}
	attr, err := s.dev.Query()
	if err != nil {
		return fmt.Errorf(" Couldn't query the device: %w", err)
	}
	s.maxRdAtom = int(attr.MaxQPRdAtom)
	if p.inlineSize != -1 {
		io.WriteString(s.out, resultLine)
		fmt.Fprintf(s.errw, "Device not recognized to implement inline feature. Disabling it\n")
	}
	p.inlineSize = 0
	if p.test.verb == verbRead || p.test.verb == verbAtomic {
		switch {
		case p.outReads > s.maxRdAtom:
			io.WriteString(s.out, resultLine)
			fmt.Fprintf(s.errw, " Number of outstanding reads is above max = %d\n Changing to that max value\n", s.maxRdAtom)
			p.outReads = s.maxRdAtom
		case p.outReads <= 0:
			p.outReads = s.maxRdAtom
		}
	} else {
		p.outReads = 1
	}
	// set_mtu: the port's active MTU, or -m if no larger.
	s.mtu = verbs.MTU(port.ActiveMTU)
	if p.userMTU != 0 {
		m := mtuEnum(p.userMTU)
		if m == 0 {
			fmt.Fprintf(s.errw, " Invalid MTU - %d \n Please choose mtu from {256,512,1024,2048,4096}\n Will run with the port active mtu - %d\n", p.userMTU, port.ActiveMTU)
			m = s.mtu
		}
		if m > s.mtu {
			fmt.Fprintf(s.out, "Requested mtu is higher than active mtu \nChanging to active mtu - %d\n", port.ActiveMTU)
			m = s.mtu
		}
		s.mtu = m
	}
	return nil
}

func portState(st uint32) string {
	names := []string{"Nop", "Down", "Init", "Armed", "", "Active Defer"}
	if int(st) < len(names) {
		return names[st]
	}
	return fmt.Sprint(st)
}

func mtuEnum(bytes int) verbs.MTU {
	for m := verbs.MTU256; m <= verbs.MTU4096; m++ {
		if m.Bytes() == bytes {
			return m
		}
	}
	return 0
}

// establish opens the TCP connection and makes perftest's first
// exchanges: versions, page and cache line sizes (the larger of each is
// used), the MTU (the smaller).
func (s *session) establish(ctx context.Context) error {
	p := s.p
	var err error
	if s.conn, err = oob.Connect(ctx, "tcp4", p.servername, p.port, onListen); err != nil {
		return err
	}
	s.comm = s.conn.Perftest(p.client())
	if _, err := s.comm.ExchangeVersions(ctx, oob.PerftestVersion); err != nil {
		return err
	}
	s.cycle, s.cacheLine = os.Getpagesize(), cacheLineSize()
	rc, rl, err := s.comm.ExchangeSysData(ctx, int32(s.cycle), int32(s.cacheLine))
	if err != nil {
		return err
	}
	s.cycle, s.cacheLine = max(s.cycle, int(rc)), max(s.cacheLine, int(rl))
	rm, err := s.comm.ExchangeMTU(ctx, int(s.mtu))
	if err != nil {
		return err
	}
	s.mtu = verbs.MTU(oob.NegotiateMTU(int(s.mtu), rm))
	return nil
}

// inc is perftest's INC: a message's stride in a cycle buffer.
func inc(size uint64, line int) uint64 {
	if size > uint64(line) {
		return roundUp(size, uint64(line))
	}
	return uint64(line)
}

// initCtx is alloc_ctx + ctx_init: one buffer and MR for every QP (a send
// half and a receive half per QP), the CQs, the QPs in INIT.
func (s *session) initCtx() error {
	p := s.p
	var err error
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return fmt.Errorf("Couldn't allocate PD: %w", err)
	}
	s.bsize = max(p.size, uint64(s.cycle))
	s.sendStride = inc(s.bsize, s.cacheLine)
	total := s.sendStride * 2 * uint64(p.numQPs)
	if s.buf, err = s.pd.AllocBuffer(int(total)); err != nil {
		return fmt.Errorf("Couldn't allocate work buf: %w", err)
	}
	b := s.buf.Bytes()[:total]
	if p.test.verb == verbWrite && p.test.lat {
		clear(b) // ib_write_lat polls on its buffer: zeros
	} else {
		for i := range b {
			b[i] = byte(rand.Uint32())
		}
	}
	access := verbs.AccessLocalWrite
	switch p.test.verb {
	case verbWrite:
		access |= verbs.AccessRemoteWrite
	case verbRead:
		access |= verbs.AccessRemoteRead
	case verbAtomic:
		access |= verbs.AccessRemoteAtomic
	}
	if s.mr, err = s.pd.RegMRRange(s.buf, 0, total, s.buf.Addr(), access); err != nil {
		return fmt.Errorf("Couldn't allocate MR: %w", err)
	}
	if s.scq, err = s.dev.CreateCQ(p.txDepth*p.numQPs, p.events); err != nil {
		return fmt.Errorf("Couldn't create CQ: %w", err)
	}
	s.rcq = s.scq
	if p.test.verb == verbSend {
		if s.rcq, err = s.dev.CreateCQ(p.rxDepth*p.numQPs, p.events); err != nil {
			return fmt.Errorf("Couldn't create a receiver CQ: %w", err)
		}
	}
	qpAccess := map[verb]verbs.Access{verbAtomic: verbs.AccessRemoteAtomic, verbRead: verbs.AccessRemoteRead,
		verbWrite: verbs.AccessRemoteWrite, verbSend: verbs.AccessRemoteWrite | verbs.AccessLocalWrite}[p.test.verb]
	for range p.numQPs {
		c := verbs.QPCap{MaxSendWR: uint32(p.txDepth), MaxSendSGE: 1, MaxInlineData: uint32(p.inlineSize)}
		if p.test.verb == verbSend {
			c.MaxRecvWR, c.MaxRecvSGE = uint32(p.rxDepth), 1
		}
		qp, err := s.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: s.scq, RecvCQ: s.rcq, Cap: c})
		if err != nil {
			return fmt.Errorf("Couldn't create QP: %w", err)
		}
		s.qps = append(s.qps, qp)
		attr := verbs.QPAttr{State: verbs.QPStateInit, PKeyIndex: 0, Port: uint8(p.ibPort), AccessFlags: qpAccess}
		if err := qp.Modify(&attr, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
			return fmt.Errorf("Failed to modify QP to INIT, ret=%v", err)
		}
	}
	return nil
}

func (s *session) close() {
	for _, qp := range s.qps {
		qp.Destroy()
	}
	for _, cq := range []*verbs.CQ{s.scq, s.rcq} {
		if cq != nil {
			cq.Destroy()
		}
	}
	if s.mr != nil {
		s.mr.Dereg()
	}
	if s.buf != nil {
		s.buf.Close()
	}
	if s.pd != nil {
		s.pd.Dealloc()
	}
}

// setUpConnection is set_up_connection: the GID (-x, else the first
// IPv4-mapped one, as get_best_gid_index picks), and each QP's address:
// QPN, a random PSN, the MR's rkey, and the QP's half of the buffer that
// the peer reads or writes.
func (s *session) setUpConnection() error {
	p := s.p
	if !p.useGIDUser {
		idx, err := s.bestGIDIndex()
		if err != nil {
			return err
		}
		p.gidIndex = idx
	}
	gid, err := s.dev.QueryGID(uint8(p.ibPort), p.gidIndex)
	if err == nil && gid.IsZero() {
		err = errors.New("empty GID table slot")
	}
	if err != nil {
		return fmt.Errorf(" Unable to set up socket connection: GID index %d: %v", p.gidIndex, err)
	}
	for i, qp := range s.qps {
		s.my = append(s.my, oob.PerftestDest{LID: 0, OutReads: uint16(p.outReads), QPN: qp.QPN(), PSN: rand.Uint32() & 0xffffff,
			RKey: s.mr.RKey(), VAddr: s.buf.Addr() + uint64(p.numQPs+i)*s.bsize, GID: gid})
	}
	s.rem = make([]oob.PerftestDest, len(s.my))
	return nil
}

func (s *session) bestGIDIndex() (int, error) {
	port, err := s.dev.QueryPort(uint8(s.p.ibPort))
	if err != nil {
		return 0, err
	}
	for i := 0; i < int(port.GIDTblLen); i++ {
		g, err := s.dev.QueryGID(uint8(s.p.ibPort), i)
		if err != nil {
			return 0, fmt.Errorf(" Unable to set up socket connection: %w", err)
		}
		if isV4Mapped(g) {
			return i, nil
		}
	}
	return 0, nil
}

func isV4Mapped(g verbs.GID) bool {
	for _, b := range g[:10] {
		if b != 0 {
			return false
		}
	}
	return g[10] == 0xff && g[11] == 0xff
}

// handshake exchanges QP i's address with the peer.
func (s *session) handshake(ctx context.Context, i int, wait time.Duration) error {
	d, err := s.comm.HandShake(ctx, s.my[i], wait)
	if err != nil {
		return fmt.Errorf(" Failed to exchange data between server and clients: %w", err)
	}
	s.rem[i] = d
	return nil
}

func (s *session) handshakeAll(ctx context.Context, print bool) error {
	for i := range s.qps {
		if err := s.handshake(ctx, i, 0); err != nil {
			return err
		}
		if print {
			printAddress(s.out, s.p, true, s.rem[i])
		}
	}
	return nil
}

// checkGIDs is ctx_check_gid_compatibility: both IPv4 or both IPv6.
func (s *session) checkGIDs() error {
	if isV4Mapped(verbs.GID(s.my[0].GID)) != isV4Mapped(verbs.GID(s.rem[0].GID)) {
		return fmt.Errorf("\n Found Incompatibility issue with GID types.\n Please Try to use a different IP version.\n")
	}
	return nil
}

// connect is ctx_connect: every QP to RTR, and to RTS on the side that
// sends (the client of a bandwidth test, both sides of a latency test),
// with perftest's attributes.
func (s *session) connect() error {
	p := s.p
	for i, qp := range s.qps {
		d := s.rem[i]
		attr := verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: s.mtu, DestQPN: d.QPN, RQPSN: d.PSN,
			MaxDestRdAtomic: uint8(min(s.my[i].OutReads, 255)), MinRNRTimer: 12,
			AV: verbs.AHAttr{DGID: d.GID, SGIDIndex: uint8(p.gidIndex), HopLimit: 0xff, SL: uint8(p.sl), Port: uint8(p.ibPort)}}
		mask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
			verbs.QPAttrMinRNRTimer | verbs.QPAttrMaxDestRdAtomic
		if err := qp.Modify(&attr, mask); err != nil {
			return fmt.Errorf("Failed to modify QP %d to RTR: %w", qp.QPN(), err)
		}
		if !p.test.lat && !p.client() {
			continue
		}
		// The peer's outstanding reads, as far as this device goes.
		rd := min(int(d.OutReads), s.maxRdAtom, 255)
		attr.State, attr.SQPSN, attr.Timeout, attr.RetryCnt, attr.RNRRetry, attr.MaxRdAtomic = verbs.QPStateRTS, s.my[i].PSN, p.qpTimeout, 7, 7, uint8(rd)
		mask = verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
		if err := qp.Modify(&attr, mask); err != nil {
			return fmt.Errorf("Failed to modify QP to RTS: %w", err)
		}
	}
	return nil
}

// setup is the part every main() shares after the first address
// exchange: connect, print both sides' addresses.
func (s *session) printLocal() {
	for _, d := range s.my {
		printAddress(s.out, s.p, false, d)
	}
}

// sizes are the message sizes of the run: -a's 2 … 2^23, or -s.
func (s *session) sizes() []uint64 {
	if !s.p.runAll {
		return []uint64{s.p.size}
	}
	var out []uint64
	for i := 1; i < 24; i++ {
		out = append(out, 1<<i)
	}
	return out
}

// exchangeAndConnect swaps every QP's address with the peer, checks the
// GID types agree and connects the QPs, as each test's main() does.
func (s *session) exchangeAndConnect(ctx context.Context) error {
	if err := s.handshakeAll(ctx, false); err != nil {
		return err
	}
	if err := s.checkGIDs(); err != nil {
		return err
	}
	if err := s.connect(); err != nil {
		return fmt.Errorf(" Unable to Connect the HCA's through the link: %w", err)
	}
	return nil
}

// closeComm is ctx_close_connection: the last exchange with the peer.
func (s *session) closeComm(ctx context.Context, wait time.Duration) error {
	if err := s.comm.Close(ctx, s.my[0], wait); err != nil {
		return fmt.Errorf("Failed to close connection between server and client: %w", err)
	}
	return nil
}

// bwMain is ib_write_bw's, ib_read_bw's and ib_atomic_bw's main().
func (s *session) bwMain(ctx context.Context) error {
	p := s.p
	if err := s.exchangeAndConnect(ctx); err != nil {
		return err
	}
	s.printLocal()
	if err := s.handshakeAll(ctx, true); err != nil {
		return err
	}
	if err := s.handshake(ctx, 0, 0); err != nil { // after RTR
		return err
	}
	printBWHeader(s.out, p)
	if !p.client() {
		// The server waits for the client's run, then prints its report.
		if err := s.handshake(ctx, 0, runWait); err != nil {
			return err
		}
		rep, err := s.comm.ExchangeBWReports(ctx, oob.BWReport{}, 0)
		if err != nil {
			return fmt.Errorf(" Failed to exchange data between server and clients: %w", err)
		}
		printBWReport(s.out, p, rep)
		if err := s.closeComm(ctx, 0); err != nil {
			return err
		}
		io.WriteString(s.out, resultLine)
		return nil
	}
	if p.events {
		if err := s.scq.ReqNotify(false); err != nil {
			return fmt.Errorf("Couldn't request CQ notification: %w", err)
		}
	}
	var rep oob.BWReport
	for _, size := range s.sizes() {
		p.size = size
		run, err := s.runBW(ctx)
		if err != nil {
			return err
		}
		rep = bwReport(p, run)
		printBWReport(s.out, p, rep)
	}
	io.WriteString(s.out, resultLine)
	if err := s.handshake(ctx, 0, 0); err != nil {
		return err
	}
	if _, err := s.comm.ExchangeBWReports(ctx, rep, 0); err != nil {
		return fmt.Errorf(" Failed to exchange data between server and clients: %w", err)
	}
	if err := s.closeComm(ctx, 0); err != nil {
		return err
	}
	return nil
}

// sendBWMain is ib_send_bw's main().
func (s *session) sendBWMain(ctx context.Context) error {
	p := s.p
	if err := s.exchangeAndConnect(ctx); err != nil {
		return err
	}
	if err := s.handshake(ctx, 0, 0); err != nil {
		return err
	}
	s.printLocal()
	if err := s.handshakeAll(ctx, true); err != nil {
		return err
	}
	if p.events {
		if err := s.scq.ReqNotify(false); err != nil {
			return fmt.Errorf(" Couldn't request CQ notification: %w", err)
		}
		if err := s.rcq.ReqNotify(false); err != nil {
			return fmt.Errorf(" Couldn't request CQ notification: %w", err)
		}
	}
	printBWHeader(s.out, p)
	for _, size := range s.sizes() {
		p.size = size
		var posted []uint64
		if !p.client() {
			var err error
			if posted, err = s.postRecvs(); err != nil {
				return err
			}
		}
		// The client waits for the server's receives.
		if err := s.handshake(ctx, 0, runWait); err != nil {
			return err
		}
		var run *bwRun
		var err error
		if p.client() {
			run, err = s.runBW(ctx)
		} else {
			run, err = s.runBWServer(ctx, posted)
		}
		if err != nil {
			return err
		}
		printBWReport(s.out, p, bwReport(p, run))
		if p.runAll {
			if err := s.handshake(ctx, 0, runWait); err != nil {
				return err
			}
		}
	}
	io.WriteString(s.out, resultLine)
	if err := s.closeComm(ctx, runWait); err != nil {
		return err
	}
	return nil
}

// latMain is the latency tests' main()s.
func (s *session) latMain(ctx context.Context) error {
	p := s.p
	send := p.test.verb == verbSend
	if !send {
		if err := s.handshake(ctx, 0, 0); err != nil {
			return err
		}
	}
	if err := s.exchangeAndConnect(ctx); err != nil {
		return err
	}
	if send {
		if err := s.handshake(ctx, 0, 0); err != nil {
			return err
		}
	}
	s.printLocal()
	if err := s.handshakeAll(ctx, true); err != nil {
		return err
	}
	if !send {
		if err := s.handshake(ctx, 0, 0); err != nil { // after RTR
			return err
		}
	}
	oneSided := p.test.verb == verbRead || p.test.verb == verbAtomic
	if oneSided && !p.client() {
		// Only the client posts reads: the server waits in the close.
		if err := s.closeComm(ctx, runWait); err != nil {
			return err
		}
		io.WriteString(s.out, resultLine)
		return nil
	}
	if p.events {
		for _, cq := range []*verbs.CQ{s.scq, s.rcq} {
			if err := cq.ReqNotify(false); err != nil {
				return fmt.Errorf("Couldn't request CQ notification: %w", err)
			}
		}
	}
	printLatHeader(s.out, p)
	for _, size := range s.sizes() {
		p.size = size
		var r latRun
		var err error
		switch p.test.verb {
		case verbWrite:
			r, err = s.runLatWrite(ctx)
		case verbSend:
			if _, err = s.postRecvs(); err != nil {
				return err
			}
			if err = s.handshake(ctx, 0, runWait); err != nil {
				return err
			}
			r, err = s.runLatSend(ctx)
		default:
			r, err = s.runLat(ctx)
		}
		if err != nil {
			return err
		}
		if p.isDuration {
			lat, tps := latDurReport(p, r.window, r.iters)
			printLatDurReport(s.out, p.size, r.iters, lat, tps)
		} else {
			printLatReport(s.out, latReport(p, r.tposted))
		}
	}
	if p.isDuration && (p.test.verb == verbWrite || p.test.verb == verbSend) {
		// The peer's clock ends on its own: its last message may still
		// be coming. Keep the QP a moment so the device acknowledges it —
		// kernel rxe retransmits to a QP that is gone without ever
		// counting the retries out, and perftest spins on that completion.
		select {
		case <-time.After(durationLinger):
		case <-ctx.Done():
		}
	}
	switch p.test.verb {
	case verbWrite:
		io.WriteString(s.out, resultLine)
		return nil // ib_write_lat ends without a closing exchange
	case verbSend:
		io.WriteString(s.out, resultLine)
		if err := s.closeComm(ctx, runWait); err != nil {
			return err
		}
		return nil
	}
	if err := s.closeComm(ctx, 0); err != nil {
		return err
	}
	io.WriteString(s.out, resultLine)
	return nil
}

// durState is the duration mode's clock (catch_alarm): warm up for the
// margin, sample for duration - 2·margin, cool down for the margin.
type durState int

const (
	startState durState = iota
	sampleState
	stopSampleState
	endState
)

type durClock struct {
	on               bool
	state            durState
	next             time.Time
	duration, margin time.Duration
	t0, t1           time.Time // sample window
}

func newDurClock(p *params) *durClock {
	return &durClock{on: p.isDuration, duration: time.Duration(p.duration) * time.Second, margin: time.Duration(p.margin) * time.Second}
}

// start begins the clock (at the first post, or the first receive).
func (c *durClock) start(now time.Time) {
	if !c.on {
		return
	}
	c.state = startState
	c.next = now.Add(c.margin)
	if c.margin <= 0 {
		c.tick(now)
	}
}

// tick advances the state as time passes.
func (c *durClock) tick(now time.Time) {
	for c.on && c.state != endState && !now.Before(c.next) {
		switch c.state {
		case startState:
			c.state, c.t0, c.next = sampleState, now, now.Add(c.duration-2*c.margin)
		case sampleState:
			c.state, c.t1, c.next = stopSampleState, now, now.Add(c.margin)
		case stopSampleState:
			c.state = endState
		}
	}
}

// window is the sample window's start and end, in ns since base.
func (c *durClock) window(base time.Time) (t0, t1 int64) {
	return int64(c.t0.Sub(base)), int64(c.t1.Sub(base))
}

func (c *durClock) sampling() bool { return c.on && c.state == sampleState }
func (c *durClock) ended() bool    { return c.on && c.state == endState }

// idler paces the busy polls: it yields, honours the context and gives up
// when nothing has moved for stallTimeout.
type idler struct {
	ctx  context.Context
	last time.Time
	what func() string
}

func newIdler(ctx context.Context, what func() string) *idler {
	return &idler{ctx: ctx, last: time.Now(), what: what}
}

func (w *idler) moved() { w.last = time.Now() }

func (w *idler) idle() error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	if time.Since(w.last) > stallTimeout {
		return fmt.Errorf("no progress for %v: %s (is the peer gone?)", stallTimeout, w.what())
	}
	runtime.Gosched()
	return nil
}

// await waits for cq to move: on its completion channel with -e (events),
// else by yielding between busy polls.
func (w *idler) await(cq *verbs.CQ, events bool) error {
	if events {
		return w.wait(cq)
	}
	return w.idle()
}

// wait sleeps on cq's completion channel (ctx_notify_events) and re-arms it.
func (w *idler) wait(cq *verbs.CQ) error {
	ctx, cancel := context.WithTimeout(w.ctx, stallTimeout)
	defer cancel()
	if err := cq.WaitEvent(ctx); err != nil {
		if w.ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("no completion event for %v: %s (is the peer gone?)", stallTimeout, w.what())
		}
		return fmt.Errorf("Failed to get cq_event: %w", err)
	}
	return cq.ReqNotify(false)
}

// sendWR is one QP's work request as ctx_set_send_wqes prepares it, with
// the cycle-buffer walk of increase_loc_addr / increase_rem_addr.
type sendWR struct {
	wr              verbs.SendWR
	myAddr, remAddr uint64 // the walk's starts
}

func (s *session) sendWRs() []sendWR {
	p := s.p
	out := make([]sendWR, len(s.qps))
	for i := range s.qps {
		w := &out[i]
		w.myAddr = s.buf.Addr() + uint64(i)*s.bsize
		w.remAddr = s.rem[i].VAddr
		w.wr = verbs.SendWR{ID: uint64(i), SGL: []verbs.SGE{{Addr: w.myAddr, Length: uint32(p.size), LKey: s.mr.LKey()}}}
		switch p.test.verb {
		case verbSend:
			w.wr.Opcode = verbs.WRSend
		case verbWrite:
			w.wr.Opcode = verbs.WRRDMAWrite
		case verbRead:
			w.wr.Opcode = verbs.WRRDMARead
		case verbAtomic:
			w.wr.Opcode = verbs.WRAtomicFetchAdd
			w.wr.CompareAdd = 1 // ATOMIC_ADD_VALUE
			if p.atomic == cmpAndSwap {
				w.wr.Opcode, w.wr.CompareAdd, w.wr.Swap = verbs.WRAtomicCmpAndSwp, 0, 0 // ATOMIC_SWAP_VALUE
			}
		}
		if p.test.verb != verbSend {
			w.wr.RemoteAddr, w.wr.RKey = w.remAddr, s.rem[i].RKey
		}
	}
	return out
}

// advance moves the WR to the next slot of the cycle buffer after the
// cnt-th post (when messages fit twice in it).
func (s *session) advance(w *sendWR, cnt uint64) {
	p := s.p
	if p.size > uint64(s.cycle)/2 {
		return
	}
	step := inc(p.size, s.cacheLine)
	wrap := (cnt+1)%(uint64(s.cycle)/step) == 0
	w.wr.SGL[0].Addr += step
	if wrap {
		w.wr.SGL[0].Addr = w.myAddr
	}
	if p.test.verb != verbSend {
		w.wr.RemoteAddr += step
		if wrap {
			w.wr.RemoteAddr = w.remAddr
		}
	}
}

// runBW is run_iter_bw: keep up to tx_depth WRs in flight per QP, ask for
// a completion every cq_mod WRs (and for the last), record post and
// completion times.
func (s *session) runBW(ctx context.Context) (*bwRun, error) {
	p := s.p
	n := len(s.qps)
	tot := p.iters * uint64(n)
	run := &bwRun{}
	if !p.noPeak {
		run.tposted, run.tcompleted = make([]int64, tot), make([]int64, tot)
	} else {
		run.tposted, run.tcompleted = make([]int64, 1), make([]int64, 1)
	}
	wrs := s.sendWRs()
	scnt, ccnt := make([]uint64, n), make([]uint64, n)
	var totS, totC uint64
	clock := newDurClock(p)
	base := epoch()
	ns := func() int64 { return int64(time.Since(base)) }
	clock.start(time.Now())
	if !p.isDuration && p.noPeak {
		run.tposted[0] = ns()
	}
	w := newIdler(ctx, func() string { return fmt.Sprintf("%d of %d WRs completed", totC, tot) })
	wc := make([]verbs.WC, 16)
	s.progress.start("iterations", tot)
	cqMod := uint64(p.cqMod)
	for totS < tot || totC < tot || (p.isDuration && !clock.ended()) {
		if p.isDuration {
			clock.tick(time.Now())
			if clock.ended() {
				break
			}
		}
		for i := range s.qps {
			for (scnt[i] < p.iters || p.isDuration) && scnt[i]-ccnt[i]+1 <= uint64(p.txDepth) {
				k := scnt[i]
				wr := wrs[i].wr
				wr.Flags = 0
				if k%cqMod == cqMod-1 || (!p.isDuration && k == p.iters-1) {
					wr.Flags = verbs.SendSignaled
				}
				if !p.noPeak {
					run.tposted[totS] = ns()
				}
				if err := s.qps[i].PostSend(wr); err != nil {
					return nil, fmt.Errorf("Couldn't post send: qp %d scnt=%d: %w", i, scnt[i], err)
				}
				s.advance(&wrs[i], k)
				scnt[i]++
				totS++
			}
		}
		if !(totC < tot || (p.isDuration && totC < totS)) {
			continue
		}
		got := s.scq.Poll(wc)
		if got == 0 {
			if err := w.await(s.scq, p.events); err != nil {
				return nil, err
			}
			continue
		}
		w.moved()
		for _, c := range wc[:got] {
			if c.Status != verbs.WCSuccess {
				return nil, compError("client", c, totS, totC)
			}
			qi := int(c.WRID)
			if qi < 0 || qi >= n {
				return nil, fmt.Errorf("completion for unknown wr_id %d", c.WRID)
			}
			ccnt[qi] += cqMod
			totC += cqMod
			if !p.noPeak {
				if totC > tot {
					run.tcompleted[tot-1] = ns()
				} else {
					run.tcompleted[totC-1] = ns()
				}
			}
			if clock.sampling() {
				run.iters += cqMod
			}
		}
		s.progress.update(totC, tot)
	}
	if !p.isDuration && p.noPeak {
		run.tcompleted[0] = ns()
	}
	if p.isDuration {
		run.tposted[0], run.tcompleted[0] = clock.window(base)
	} else {
		run.iters = p.iters
	}
	return run, nil
}

// compError is NOTIFY_COMP_ERROR_SEND / _RECV.
func compError(side string, c verbs.WC, a, b uint64) error {
	return fmt.Errorf(" Completion with error at %s\n Failed status %d: wr_id %d syndrom 0x%x\n scnt=%d, ccnt=%d", side, c.Status, int(c.WRID), c.VendorErr, a, b)
}

// recvWR is QP i's receive WR (ctx_set_recv_wqes): into the QP's receive
// half, walking the cycle buffer.
func (s *session) recvAddr(i int) uint64 {
	return s.buf.Addr() + uint64(s.p.numQPs+i)*s.sendStride
}

// postRecvs posts rx_depth receives per QP, as ctx_set_recv_wqes, and says
// how many each QP has.
func (s *session) postRecvs() ([]uint64, error) {
	p := s.p
	posted := make([]uint64, len(s.qps))
	for i, qp := range s.qps {
		addr := s.recvAddr(i)
		for j := range p.rxDepth {
			wr := verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{{Addr: addr, Length: uint32(p.size), LKey: s.mr.LKey()}}}
			if err := qp.PostRecv(wr); err != nil {
				return nil, fmt.Errorf("Couldn't post recv Qp = %d: counter=%d: %w", i, j, err)
			}
			addr = s.nextRecv(i, addr, uint64(j))
		}
		posted[i] = uint64(p.rxDepth)
	}
	return posted, nil
}

func (s *session) nextRecv(i int, addr, cnt uint64) uint64 {
	p := s.p
	if p.test.lat || p.size > uint64(s.cycle)/2 {
		return addr
	}
	addr += inc(p.size, s.cacheLine)
	if (cnt+1)%(uint64(s.cycle)/inc(p.size, s.cacheLine)) == 0 {
		addr = s.recvAddr(i)
	}
	return addr
}

// runBWServer is run_iter_bw_server: count the receives, repost while
// more are due, time from the first receive to the last.
func (s *session) runBWServer(ctx context.Context, posted []uint64) (*bwRun, error) {
	p := s.p
	n := len(s.qps)
	tot := p.iters * uint64(n)
	run := &bwRun{tposted: make([]int64, 1), tcompleted: make([]int64, 1)}
	rcnt := make([]uint64, n)
	next := make([]uint64, n)
	for i := range next {
		next[i] = s.recvAddr(i)
		for j := uint64(0); j < posted[i]; j++ {
			next[i] = s.nextRecv(i, next[i], j)
		}
	}
	var tr uint64
	clock := newDurClock(p)
	base := epoch()
	first := true
	w := newIdler(ctx, func() string { return fmt.Sprintf("%d of %d messages received", tr, tot) })
	wc := make([]verbs.WC, 16)
	s.progress.start("messages", tot)
	for tr < tot || (p.isDuration && !clock.ended()) {
		if p.isDuration && !first {
			clock.tick(time.Now())
			if clock.ended() {
				break
			}
		}
		got := s.rcq.Poll(wc)
		if got == 0 {
			if err := w.await(s.rcq, p.events); err != nil {
				return nil, err
			}
			continue
		}
		w.moved()
		if first { // set_on_first_rx_packet
			first = false
			clock.start(time.Now())
			run.tposted[0] = int64(time.Since(base))
		}
		for _, c := range wc[:got] {
			qi := int(c.WRID)
			if c.Status != verbs.WCSuccess {
				return nil, compError("server", c, tr, tr)
			}
			if qi < 0 || qi >= n {
				return nil, fmt.Errorf("completion for unknown wr_id %d", c.WRID)
			}
			rcnt[qi]++
			tr++
			if clock.sampling() {
				run.iters++
			}
			if p.isDuration || posted[qi]+1 <= p.iters {
				wr := verbs.RecvWR{ID: uint64(qi), SGL: []verbs.SGE{{Addr: next[qi], Length: uint32(p.size), LKey: s.mr.LKey()}}}
				if err := s.qps[qi].PostRecv(wr); err != nil {
					return nil, fmt.Errorf("Couldn't post recv Qp=%d rcnt=%d: %w", qi, rcnt[qi], err)
				}
				next[qi] = s.nextRecv(qi, next[qi], posted[qi])
				posted[qi]++
			}
		}
		s.progress.update(tr, tot)
	}
	if p.isDuration {
		run.tposted[0], run.tcompleted[0] = clock.window(base)
	} else {
		run.tcompleted[0] = int64(time.Since(base))
		run.iters = p.iters
	}
	return run, nil
}

// latRun is what a latency loop records.
type latRun struct {
	tposted []int64 // per iteration
	window  int64   // duration mode: the sample window
	iters   uint64
}

// loadByte reads a byte of the shared buffer that the device writes, with
// an atomic load so the poll loop sees each new value (b is page aligned,
// so its 4-byte words are; amd64 and arm64 are little-endian).
func loadByte(b []byte, off int) byte {
	word := (*uint32)(unsafe.Pointer(&b[off&^3]))
	return byte(atomic.LoadUint32(word) >> (8 * (off & 3)))
}

// runLatWrite is run_iter_lat_write: each side writes its counter into
// the last byte of the message and waits for the peer's to arrive in its
// own buffer before writing again; the client starts.
func (s *session) runLatWrite(ctx context.Context) (latRun, error) {
	p := s.p
	wrs := s.sendWRs()
	wr := wrs[0].wr
	wr.Flags = verbs.SendSignaled
	data := s.buf.Bytes()
	post := int(p.size) - 1
	poll := p.numQPs*int(s.bsize) + int(p.size) - 1
	var scnt, ccnt, rcnt uint64
	r := latRun{}
	if !p.isDuration {
		r.tposted = make([]int64, p.iters)
	}
	clock := newDurClock(p)
	clock.start(time.Now())
	base := epoch()
	w := newIdler(ctx, func() string { return fmt.Sprintf("iteration %d: waiting for the peer's write", rcnt) })
	for scnt < p.iters || ccnt < p.iters || rcnt < p.iters || (p.isDuration && !clock.ended()) {
		clock.tick(time.Now())
		if (rcnt < p.iters || p.isDuration) && !(scnt < 1 && !p.client()) {
			rcnt++
			for loadByte(data, poll) != byte(rcnt) && !clock.ended() {
				if err := w.idle(); err != nil {
					return r, err
				}
				clock.tick(time.Now())
			}
			w.moved()
		}
		if scnt < p.iters || p.isDuration {
			if !p.isDuration {
				r.tposted[scnt] = int64(time.Since(base))
			}
			scnt++
			data[post] = byte(scnt)
			if err := s.qps[0].PostSend(wr); err != nil {
				return r, fmt.Errorf("Couldn't post send: scnt=%d: %w", scnt, err)
			}
		}
		if clock.ended() {
			break
		}
		if ccnt < p.iters || p.isDuration {
			// A duration run stops at its end even with a write unacked:
			// the peer may have ended first and gone.
			c, err := s.pollOneUntil(s.scq, w, clock)
			if err != nil {
				return r, err
			}
			if clock.ended() {
				break
			}
			if c.Status != verbs.WCSuccess {
				return r, compError("client", c, scnt, ccnt)
			}
			ccnt++
			if clock.sampling() {
				r.iters++
			}
		}
	}
	return s.latDone(r, clock), nil
}

func (s *session) latDone(r latRun, clock *durClock) latRun {
	if s.p.isDuration {
		r.window = int64(clock.t1.Sub(clock.t0))
	} else {
		r.iters = s.p.iters
	}
	return r
}

// runLat is run_iter_lat (read, atomic): post one, wait for it, again.
func (s *session) runLat(ctx context.Context) (latRun, error) {
	p := s.p
	wr := s.sendWRs()[0].wr
	wr.Flags = verbs.SendSignaled
	var scnt uint64
	r := latRun{}
	if !p.isDuration {
		r.tposted = make([]int64, p.iters)
	}
	clock := newDurClock(p)
	clock.start(time.Now())
	base := epoch()
	w := newIdler(ctx, func() string { return fmt.Sprintf("iteration %d: waiting for the response", scnt) })
	for scnt < p.iters || (p.isDuration && !clock.ended()) {
		clock.tick(time.Now())
		if !p.isDuration {
			r.tposted[scnt] = int64(time.Since(base))
		}
		scnt++
		if err := s.qps[0].PostSend(wr); err != nil {
			return r, fmt.Errorf("Couldn't post send: scnt=%d: %w", scnt, err)
		}
		if clock.ended() {
			break
		}
		c, err := s.pollOneUntil(s.scq, w, clock)
		if err != nil {
			return r, err
		}
		if clock.ended() {
			break
		}
		if c.Status != verbs.WCSuccess {
			return r, compError("client", c, scnt, scnt)
		}
		if clock.sampling() {
			r.iters++
		}
	}
	return s.latDone(r, clock), nil
}

// runLatSend is run_iter_lat_send: the server receives then sends, the
// client sends then receives; receives are reposted while more are due.
func (s *session) runLatSend(ctx context.Context) (latRun, error) {
	p := s.p
	wr := s.sendWRs()[0].wr
	var scnt, rcnt uint64
	r := latRun{}
	if !p.isDuration {
		r.tposted = make([]int64, p.iters)
	}
	clock := newDurClock(p)
	started := false
	base := epoch()
	w := newIdler(ctx, func() string { return fmt.Sprintf("iteration %d: waiting for the peer's message", rcnt) })
	if p.client() {
		clock.start(time.Now())
		started = true
	}
	recvAddr := s.recvAddr(0)
	for scnt < p.iters || rcnt < p.iters || (p.isDuration && !clock.ended()) {
		if started {
			clock.tick(time.Now())
		}
		if (rcnt < p.iters || p.isDuration) && !(scnt < 1 && p.client()) {
			c, err := s.pollOneUntil(s.rcq, w, clock)
			if err != nil {
				return r, err
			}
			if clock.ended() {
				break
			}
			if !started {
				clock.start(time.Now())
				started = true
			}
			if c.Status != verbs.WCSuccess {
				return r, compError("server", c, rcnt, rcnt)
			}
			rcnt++
			if clock.sampling() {
				r.iters++
			}
			if p.isDuration || rcnt+uint64(p.rxDepth) <= p.iters {
				rw := verbs.RecvWR{ID: c.WRID, SGL: []verbs.SGE{{Addr: recvAddr, Length: uint32(p.size), LKey: s.mr.LKey()}}}
				if err := s.qps[0].PostRecv(rw); err != nil {
					return r, fmt.Errorf("Couldn't post recv: rcnt=%d: %w", rcnt, err)
				}
			}
		}
		if scnt < p.iters || (p.isDuration && !clock.ended()) {
			if !p.isDuration {
				r.tposted[scnt] = int64(time.Since(base))
			}
			scnt++
			wr.Flags = 0
			signal := scnt%uint64(p.cqMod) == 0 || (!p.isDuration && scnt == p.iters)
			if signal {
				wr.Flags = verbs.SendSignaled
			}
			if err := s.qps[0].PostSend(wr); err != nil {
				return r, fmt.Errorf("Couldn't post send: scnt=%d: %w", scnt, err)
			}
			if signal {
				c, err := s.pollOneUntil(s.scq, w, clock)
				if err != nil {
					return r, err
				}
				if clock.ended() {
					break
				}
				if c.Status != verbs.WCSuccess {
					return r, compError("client", c, scnt, scnt)
				}
			}
		}
	}
	return s.latDone(r, clock), nil
}

// pollOneUntil waits for one completion on cq, or for the duration
// clock to end (then it returns a zero WC).
func (s *session) pollOneUntil(cq *verbs.CQ, w *idler, clock *durClock) (verbs.WC, error) {
	var wc [1]verbs.WC
	for cq.Poll(wc[:]) == 0 {
		clock.tick(time.Now())
		if clock.ended() {
			return verbs.WC{}, nil
		}
		if err := w.await(cq, s.p.events); err != nil {
			return verbs.WC{}, err
		}
	}
	w.moved()
	return wc[0], nil
}

// progress prints a line on stderr every few seconds of a long run, so
// that a run of minutes is seen to move (perftest prints nothing).
type progress struct {
	w     io.Writer
	quiet bool
	what  string
	total uint64
	begin time.Time
	last  time.Time
}

var progressEvery = 2 * time.Second

func newProgress(w io.Writer, p *params) *progress { return &progress{w: w, quiet: p.quiet} }

func (g *progress) start(what string, total uint64) {
	g.what, g.total, g.begin, g.last = what, total, time.Now(), time.Now()
}

// update reports done of the total (0 in a duration run: no total).
func (g *progress) update(done, total uint64) {
	if g.quiet || time.Since(g.last) < progressEvery {
		return
	}
	if total > 0 {
		done = min(done, total)
	}
	g.last = time.Now()
	if g.total == 0 {
		fmt.Fprintf(g.w, "vrnic-perf: %d %s after %.0f s\n", done, g.what, time.Since(g.begin).Seconds())
		return
	}
	fmt.Fprintf(g.w, "vrnic-perf: %d of %d %s (%.0f%%) after %.0f s\n", done, g.total, g.what,
		100*float64(done)/float64(g.total), time.Since(g.begin).Seconds())
}

// epoch is the origin of a run's timestamps, a second back so that none is
// zero (perftest's cycle counts never are; a zero completion time stands
// for "not recorded" in the peak computation).
func epoch() time.Time { return time.Now().Add(-time.Second) }
