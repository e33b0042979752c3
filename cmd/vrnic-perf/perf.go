package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"syscall"
	"time"

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
	conn       *oob.Conn // TCP; nil in rdma_cm mode (-z, -R)
	comm       *oob.Perftest
	ch         *cmChannel      // rdma_cm mode's channel
	listener   *verbs.Listener // the rdma_cm server's, until the QPs are connected
	conns      []*verbs.Conn   // -R: each QP's connection
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

// onPost, if set, is shown each WR a test posts before it goes to the QP.
var onPost func(verbs.SendWR)

// postSend posts one of a test's WRs.
func postSend(qp *verbs.QP, wr verbs.SendWR) error {
	if onPost != nil {
		onPost(wr)
	}
	return qp.PostSend(wr)
}

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
	defer s.closeCM() // before the QPs go
	if err := s.checkLink(); err != nil {
		return err
	}
	if !p.client() {
		printWaiting(stdout)
	}
	if err := s.establish(ctx); err != nil {
		return err
	}
	if s.conn != nil {
		defer s.conn.Close()
	}
	if err := s.initCtx(); err != nil {
		return err
	}
	if p.cmQPs {
		if err := s.connectQPs(ctx); err != nil {
			return err
		}
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
// maximum; the inline size is ctx_set_max_inline's for a device perftest
// knows (see defaultInline).
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
	if p.inlineSize == -1 {
		p.inlineSize = defaultInline(p.test)
	}
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
	for range p.numQPs {
		c := verbs.QPCap{MaxSendWR: uint32(p.txDepth), MaxSendSGE: 1, MaxInlineData: uint32(p.inlineSize)}
		if p.test.verb == verbSend {
			c.MaxRecvWR, c.MaxRecvSGE = uint32(p.rxDepth), 1
		}
		qp, err := s.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: s.scq, RecvCQ: s.rcq, Cap: c})
		if err != nil {
			return s.qpCreateError(err)
		}
		s.qps = append(s.qps, qp)
		if err := s.qpInit(qp); err != nil {
			return err
		}
	}
	return nil
}

// defaultInline is ctx_set_max_inline's inline size when -I is not given,
// for a device perftest recognizes (vrnicd takes inline sends up to its
// max_inline_data, 512 bytes by default): the latency tests' optimal values
// for RC, DEF_INLINE_WRITE and DEF_INLINE_SEND_RC_UC_XRC; none for the
// bandwidth tests, reads and atomics.
func defaultInline(t test) int {
	if !t.lat {
		return 0
	}
	switch t.verb {
	case verbWrite:
		return defInlineWrite
	case verbSend:
		return defInlineSendRC
	}
	return 0
}

// qpCreateError is what perftest prints when ibv_create_qp fails (as it
// does for an -I above the device's max_inline_data): create_reg_qp_main's,
// ctx_init's and main's lines, after ctx_qp_create's hint for ENOMEM; then
// the daemon's reason.
func (s *session) qpCreateError(err error) error {
	var b strings.Builder
	if errors.Is(err, syscall.ENOMEM) {
		b.WriteString("Requested QP size might be too big. Try reducing TX depth and/or inline size.\n")
		fmt.Fprintf(&b, "Current TX depth is %d and inline size is %d .\n", s.p.txDepth, s.p.inlineSize)
	}
	b.WriteString("Unable to create QP.\nFailed to create QP.\n Couldn't create IB resources\n")
	return fmt.Errorf("%s%w", b.String(), err)
}

// sendFlags are a send WR's flags: IBV_SEND_INLINE for a SEND or WRITE
// whose size fits the inline size (ctx_set_send_wqes, run_iter_lat_*), and
// IBV_SEND_SIGNALED if signal.
func (s *session) sendFlags(signal bool) verbs.SendFlags {
	p := s.p
	var f verbs.SendFlags
	if (p.test.verb == verbSend || p.test.verb == verbWrite) && p.size <= uint64(p.inlineSize) {
		f = verbs.SendInline
	}
	if signal {
		f |= verbs.SendSignaled
	}
	return f
}

// qpInit takes a QP to INIT with the test's remote access (with -R,
// rdma_cm sets its own from the connection's read depths).
func (s *session) qpInit(qp *verbs.QP) error {
	p := s.p
	qpAccess := map[verb]verbs.Access{verbAtomic: verbs.AccessRemoteAtomic, verbRead: verbs.AccessRemoteRead,
		verbWrite: verbs.AccessRemoteWrite, verbSend: verbs.AccessRemoteWrite | verbs.AccessLocalWrite}[p.test.verb]
	attr := verbs.QPAttr{State: verbs.QPStateInit, PKeyIndex: 0, Port: uint8(p.ibPort), AccessFlags: qpAccess}
	if err := qp.Modify(&attr, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		return fmt.Errorf("Failed to modify QP to INIT, ret=%v", err)
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
