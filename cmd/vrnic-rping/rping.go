package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"

	"github.com/vrnic/vrnicd/cmd/internal/cmtool"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// rping's queue sizes (RPING_SQ_DEPTH, two receives, one SGE).
const (
	sqDepth  = 16
	infoSize = 16 // struct rping_rdma_info: __be64 buf, __be32 rkey, __be32 size
)

// errReported is an error already printed in rping's words.
var errReported = errors.New("reported")

// errDisconnected: the peer disconnected (rping's DISCONNECTED state).
var errDisconnected = errors.New("disconnected")

// cb is rping's control block: one connection's QP, CQ and buffers.
type cb struct {
	cfg    *config
	out    io.Writer // ping data
	errw   io.Writer // diagnostics
	mu     *sync.Mutex
	dev    *verbs.Device
	pd     *verbs.PD
	cq     *verbs.CQ
	qp     *verbs.QP
	conn   *verbs.Conn
	recv   *verbs.MR // rping_rdma_info the peer sends
	send   *verbs.MR // rping_rdma_info we send
	rdma   *verbs.MR // the RDMA sink (client) or the READ target (server)
	start  *verbs.MR // client: the RDMA READ source
	wc     [1]verbs.WC
	server bool
}

func (c *cb) debugf(format string, args ...any) {
	if c.cfg.debug {
		c.mu.Lock()
		fmt.Fprintf(c.out, format, args...)
		c.mu.Unlock()
	}
}

func (c *cb) printf(w io.Writer, format string, args ...any) {
	c.mu.Lock()
	fmt.Fprintf(w, format, args...)
	c.mu.Unlock()
}

// setup is rping_setup_qp and rping_setup_buffers: PD, CQ with events, an
// RC QP taken to INIT (as rdma_create_qp leaves it), the MRs, and the
// first receive posted.
func (c *cb) setup() error {
	var err error
	if c.pd, err = c.dev.AllocPD(); err != nil {
		return fmt.Errorf("ibv_alloc_pd failed: %w", err)
	}
	c.debugf("created pd\n")
	if c.cq, err = c.dev.CreateCQ(sqDepth*2, true); err != nil {
		return fmt.Errorf("ibv_create_cq failed: %w", err)
	}
	c.debugf("created cq\n")
	if c.qp, err = c.pd.CreateCMQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: c.cq, RecvCQ: c.cq,
		Cap: verbs.QPCap{MaxSendWR: sqDepth, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return fmt.Errorf("rdma_create_qp: %w", err)
	}
	c.debugf("created qp\n")
	remote := verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite
	if c.recv, err = c.reg(infoSize, verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("recv_buf reg_mr failed: %w", err)
	}
	if c.send, err = c.reg(infoSize, 0); err != nil {
		return fmt.Errorf("send_buf reg_mr failed: %w", err)
	}
	if c.rdma, err = c.reg(c.cfg.size, remote); err != nil {
		return fmt.Errorf("rdma_buf reg_mr failed: %w", err)
	}
	if !c.server {
		if c.start, err = c.reg(c.cfg.size, remote); err != nil {
			return fmt.Errorf("start_buf reg_mr failed: %w", err)
		}
	}
	c.debugf("allocated & registered buffers...\n")
	if err := c.postRecv(); err != nil {
		return fmt.Errorf("ibv_post_recv failed: %w", err)
	}
	return c.cq.ReqNotify(false)
}

// reg registers n bytes of a buffer of their own.
func (c *cb) reg(n int, access verbs.Access) (*verbs.MR, error) {
	b, err := c.pd.AllocBuffer(n)
	if err != nil {
		return nil, err
	}
	return c.pd.RegMRRange(b, 0, uint64(n), b.Addr(), access)
}

func (c *cb) postRecv() error {
	return c.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{c.recv.SGE(0, infoSize)}})
}

// next is the next completion that is not a flush (rping_cq_event_handler
// skips those), or errDisconnected once the CM reports the disconnect.
func (c *cb) next(ctx context.Context) (verbs.WC, error) {
	for {
		wc, ok, err := c.poll()
		if ok || err != nil {
			return wc, err
		}
		if err := c.cmEvent(); err != nil {
			return verbs.WC{}, err
		}
		// Arm, then look once more: a completion that came before the
		// arming raises no event.
		if err := c.cq.ReqNotify(false); err != nil {
			return verbs.WC{}, err
		}
		if wc, ok, err := c.poll(); ok || err != nil {
			return wc, err
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		_ = c.cq.WaitEvent(wctx) // a timeout: look at the CM events again
		cancel()
		if ctx.Err() != nil {
			return verbs.WC{}, ctx.Err()
		}
	}
}

// poll takes one completion, skipping flushes; a failed one is reported.
func (c *cb) poll() (verbs.WC, bool, error) {
	for c.cq.Poll(c.wc[:]) == 1 {
		wc := c.wc[0]
		if wc.Status == verbs.WCWRFlushErr {
			continue
		}
		if wc.Status != verbs.WCSuccess {
			c.printf(c.errw, "cq completion failed status %d\n", wc.Status)
			return wc, false, errReported
		}
		return wc, true, nil
	}
	return verbs.WC{}, false, nil
}

// cmEvent looks at the connection's CM events: DISCONNECTED ends the test.
func (c *cb) cmEvent() error {
	select {
	case ev, ok := <-c.conn.Events():
		if !ok {
			c.printf(c.errw, "cma detected device removal!!!!\n")
			return errReported
		}
		if ev.Type == verbs.CMEventDisconnected {
			c.printf(c.errw, "%s DISCONNECT EVENT...\n", c.side())
			return errDisconnected
		}
	default:
	}
	return nil
}

func (c *cb) side() string {
	if c.server {
		return "server"
	}
	return "client"
}

// await waits for a completion of opcode op; a RECV is checked for its
// size (16 bytes) and the receive posted again, as rping does.
func (c *cb) await(ctx context.Context, op verbs.WCOpcode) (verbs.WC, error) {
	for {
		wc, err := c.next(ctx)
		if err != nil {
			return wc, err
		}
		switch wc.Opcode {
		case verbs.WCSend:
			c.debugf("send completion\n")
		case verbs.WCRDMAWrite:
			c.debugf("rdma write completion\n")
		case verbs.WCRDMARead:
			c.debugf("rdma read completion\n")
		case verbs.WCRecv:
			c.debugf("recv completion\n")
			if wc.ByteLen != infoSize {
				c.printf(c.errw, "Received bogus data, size %d\n", wc.ByteLen)
				return wc, errReported
			}
			if err := c.postRecv(); err != nil {
				c.printf(c.errw, "post recv error: %v\n", err)
				return wc, errReported
			}
		}
		if wc.Opcode == op {
			return wc, nil
		}
	}
}

// info is the rping_rdma_info the peer sent.
func (c *cb) info() (addr uint64, rkey, size uint32) {
	b := c.recv.Bytes()
	return binary.BigEndian.Uint64(b), binary.BigEndian.Uint32(b[8:]), binary.BigEndian.Uint32(b[12:])
}

// sendInfo is rping_format_send and the SEND: mr's address, rkey and our
// size (the server's "go ahead" sends its buffer as it is).
func (c *cb) sendInfo(mr *verbs.MR) error {
	if mr != nil {
		b := c.send.Bytes()
		binary.BigEndian.PutUint64(b, mr.Addr())
		binary.BigEndian.PutUint32(b[8:], mr.RKey())
		binary.BigEndian.PutUint32(b[12:], uint32(c.cfg.size))
		c.debugf("RDMA addr %x rkey %x len %d\n", mr.Addr(), mr.RKey(), c.cfg.size)
	}
	return c.qp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{c.send.SGE(0, infoSize)}})
}

// rdmaOp posts an RDMA READ or WRITE of n bytes between our rdma buffer
// and the peer's advertised one.
func (c *cb) rdmaOp(op verbs.WROpcode, n uint32, raddr uint64, rkey uint32) error {
	return c.qp.PostSend(verbs.SendWR{ID: 3, Opcode: op, Flags: verbs.SendSignaled, SGL: []verbs.SGE{c.rdma.SGE(0, uint64(n))},
		RemoteAddr: raddr, RKey: rkey})
}

// cstring is a NUL-terminated string in b.
func cstring(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

// connParams is rping_init_conn_param's.
var connParams = verbs.ConnParams{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}

// cmError reports a failed connection as rping's CM event handler does
// ("cma event RDMA_CM_EVENT_REJECTED, error 8", ADDR_ERROR -110, ...).
func (c *cb) cmError(err error) error {
	if t, status, ok := cmtool.FailedEvent(err); ok {
		c.printf(c.errw, "cma event %s, error %d\n", cmtool.EventName(t), status)
	} else {
		c.printf(c.errw, "connect error: %v\n", err)
	}
	return errReported
}

func open(cfg *config, stdout, stderr io.Writer, server bool) (*cb, error) {
	dev, err := verbs.Open(cfg.socket)
	if err != nil {
		return nil, err
	}
	return &cb{cfg: cfg, out: stdout, errw: stderr, mu: &sync.Mutex{}, dev: dev, server: server}, nil
}

// runClient is rping_run_client: connect, ping count times, disconnect.
func runClient(ctx context.Context, cfg *config, stdout, stderr io.Writer) error {
	c, err := open(cfg, stdout, stderr, false)
	if err != nil {
		return err
	}
	defer c.dev.Close()
	if err := c.setup(); err != nil {
		return err
	}
	c.conn, err = c.dev.Dial(ctx, netip.AddrPortFrom(cfg.addr, cfg.port), c.qp, connParams)
	if err != nil {
		return c.cmError(err)
	}
	defer c.conn.Close()
	c.debugf("rdma_connect successful\n")
	err = c.testClient(ctx)
	if errors.Is(err, errDisconnected) {
		return nil
	}
	if err != nil {
		if !errors.Is(err, errReported) {
			c.printf(stderr, "rping client failed: %v\n", err)
		}
		_ = c.conn.Disconnect()
		return errReported
	}
	if err := c.conn.Disconnect(); err != nil {
		return err
	}
	c.waitDisconnected(ctx)
	return nil
}

// waitDisconnected lets the CM finish the disconnect (DISCONNECTED comes
// with the DREP) before the device closes, bounded.
func (c *cb) waitDisconnected(ctx context.Context) {
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case ev, ok := <-c.conn.Events():
			if !ok || ev.Type == verbs.CMEventDisconnected {
				if ok {
					c.printf(c.errw, "%s DISCONNECT EVENT...\n", c.side())
				}
				return
			}
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// testClient is rping_test_client.
func (c *cb) testClient(ctx context.Context) error {
	start := byte(65)
	size := c.cfg.size
	for ping := 0; c.cfg.count == 0 || ping < c.cfg.count; ping++ {
		buf := c.start.Bytes()[:size]
		cc := copy(buf, fmt.Sprintf("rdma-ping-%d: ", ping))
		ch := start
		for i := cc; i < size; i++ {
			buf[i] = ch
			if ch++; ch > 122 {
				ch = 65
			}
		}
		if start++; start > 122 {
			start = 65
		}
		buf[size-1] = 0
		if err := c.sendInfo(c.start); err != nil {
			return fmt.Errorf("post send error %w", err)
		}
		if _, err := c.await(ctx, verbs.WCRecv); err != nil {
			return err
		}
		if err := c.sendInfo(c.rdma); err != nil {
			return fmt.Errorf("post send error %w", err)
		}
		if _, err := c.await(ctx, verbs.WCRecv); err != nil {
			return err
		}
		if c.cfg.validate && !bytes.Equal(buf, c.rdma.Bytes()[:size]) {
			c.printf(c.errw, "data mismatch!\n")
			return errReported
		}
		if c.cfg.verbose {
			c.printf(c.out, "ping data: %s\n", cstring(c.rdma.Bytes()[:size]))
		}
	}
	return nil
}

// runServer is rping_run_server (one connection) or, with -P,
// rping_run_persistent_server (a goroutine per connection, until ctx ends).
func runServer(ctx context.Context, cfg *config, stdout, stderr io.Writer) error {
	ls, err := open(cfg, stdout, stderr, true)
	if err != nil {
		return err
	}
	defer ls.dev.Close()
	l, err := ls.dev.Listen(netip.AddrPortFrom(cfg.addr, cfg.port))
	if err != nil {
		return fmt.Errorf("rdma_bind_addr: %w", err)
	}
	defer l.Close()
	ls.debugf("rdma_listen\n")
	if onListen != nil {
		onListen()
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, _, err := l.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil && cfg.persistent {
				return nil
			}
			return err
		}
		c := &cb{cfg: cfg, out: stdout, errw: stderr, mu: ls.mu, dev: ls.dev, server: true, conn: conn}
		if !cfg.persistent {
			return c.serve(ctx)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.serve(ctx)
		}()
	}
}

// onListen, if set, is told when the server listens (tests).
var onListen func()

// serve is one accepted connection: set up, accept, rping_test_server,
// disconnect.
func (c *cb) serve(ctx context.Context) error {
	defer c.conn.Close()
	c.debugf("accepting client connection request\n")
	if err := c.setup(); err != nil {
		_ = c.conn.Reject(nil)
		return fmt.Errorf("setup_qp failed: %w", err)
	}
	defer c.qp.Destroy()
	if err := c.conn.Accept(ctx, c.qp, connParams); err != nil {
		c.printf(c.errw, "connect error %v\n", err)
		return errReported
	}
	err := c.testServer(ctx)
	_ = c.conn.Disconnect()
	if errors.Is(err, errDisconnected) {
		return nil
	}
	if err != nil && !errors.Is(err, errReported) {
		c.printf(c.errw, "rping server failed: %v\n", err)
	}
	return errReported
}

// testServer is rping_test_server: READ the client's buffer, "go ahead",
// WRITE it back into the client's sink, "go ahead", until the client
// disconnects.
func (c *cb) testServer(ctx context.Context) error {
	for {
		if _, err := c.await(ctx, verbs.WCRecv); err != nil {
			return err
		}
		addr, rkey, n := c.info()
		c.debugf("Received rkey %x addr %x len %d from peer\n", rkey, addr, n)
		if int(n) > c.cfg.size {
			c.printf(c.errw, "peer's buffer of %d bytes is larger than ours (%d)\n", n, c.cfg.size)
			return errReported
		}
		c.debugf("server received sink adv\n")
		if err := c.rdmaOp(verbs.WRRDMARead, n, addr, rkey); err != nil {
			return fmt.Errorf("post send error %w", err)
		}
		c.debugf("server posted rdma read req \n")
		if _, err := c.await(ctx, verbs.WCRDMARead); err != nil {
			return err
		}
		c.debugf("server received read complete\n")
		data := cstring(c.rdma.Bytes()[:c.cfg.size])
		if c.cfg.verbose {
			c.printf(c.out, "server ping data: %s\n", data)
		}
		if err := c.sendInfo(nil); err != nil {
			return fmt.Errorf("post send error %w", err)
		}
		c.debugf("server posted go ahead\n")
		if _, err := c.await(ctx, verbs.WCRecv); err != nil {
			return err
		}
		addr, rkey, _ = c.info()
		c.debugf("server received sink adv\n")
		wlen := uint32(min(len(data)+1, c.cfg.size))
		c.debugf("rdma write from lkey %x laddr %x len %d\n", c.rdma.LKey(), c.rdma.Addr(), wlen)
		if err := c.rdmaOp(verbs.WRRDMAWrite, wlen, addr, rkey); err != nil {
			return fmt.Errorf("post send error %w", err)
		}
		if _, err := c.await(ctx, verbs.WCRDMAWrite); err != nil {
			return err
		}
		c.debugf("server rdma write complete \n")
		if err := c.sendInfo(nil); err != nil {
			return fmt.Errorf("post send error %w", err)
		}
		c.debugf("server posted go ahead\n")
	}
}
