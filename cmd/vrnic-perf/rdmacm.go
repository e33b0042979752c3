package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vrnic/vrnicd/cmd/internal/oob"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// perftest's rdma_cm modes. -z: its messages travel over an RC QP that
// rdma_cm connects on the port (-p), as SENDs of at most struct
// pingpong_dest's size, not over TCP. -R (implies -z): rdma_cm also
// connects the test's QPs, one connection each on the same port, after a
// barrier on that channel; the addresses exchanged afterwards are only
// printed and used for rkeys and buffer addresses.

// syncSpecID is SYNC_SPEC_ID, the wr_id of perftest's channel WRs.
const syncSpecID = 5

// cmChannelWait bounds a message of the channel when the exchange gives
// no bound of its own, as oob.DefaultTimeout does for TCP.
const cmChannelWait = oob.DefaultTimeout

// cmConnectTries and cmRetryDelay are perftest's client retries
// (rdma_cm_client_connection): the server listens for the test's QPs
// only once past the barrier, so the first REQ may find nobody there.
const (
	cmConnectTries = 10
	cmRetryDelay   = 100 * time.Millisecond
)

// cmChannel is perftest's comm context in rdma_cm mode: an RC QP whose
// one receive is posted again as each message is taken, each message a
// signalled SEND waited for.
type cmChannel struct {
	pd         *verbs.PD
	scq, rcq   *verbs.CQ
	qp         *verbs.QP
	conn       *verbs.Conn
	sbuf, rbuf *verbs.Buffer
	smr, rmr   *verbs.MR
}

// newCMChannel makes the channel's QP, in INIT with its receive posted
// (perftest posts it before rdma_connect / rdma_accept), on port 1, the
// device's one (perf.go has checked -i against it).
func newCMChannel(dev *verbs.Device) (*cmChannel, error) {
	c := &cmChannel{}
	var err error
	if c.pd, err = dev.AllocPD(); err != nil {
		return c, err
	}
	if c.scq, err = dev.CreateCQ(1, true); err != nil {
		return c, err
	}
	if c.rcq, err = dev.CreateCQ(1, true); err != nil {
		return c, err
	}
	if c.qp, err = c.pd.CreateCMQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: c.scq, RecvCQ: c.rcq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return c, err
	}
	if c.sbuf, c.smr, err = regMsgBuf(c.pd, 0); err != nil {
		return c, err
	}
	if c.rbuf, c.rmr, err = regMsgBuf(c.pd, verbs.AccessLocalWrite); err != nil {
		return c, err
	}
	return c, c.postRecv()
}

// regMsgBuf is a registered buffer of one message.
func regMsgBuf(pd *verbs.PD, access verbs.Access) (*verbs.Buffer, *verbs.MR, error) {
	b, err := pd.AllocBuffer(oob.PerftestDestSize)
	if err != nil {
		return nil, nil, err
	}
	mr, err := pd.RegMRRange(b, 0, oob.PerftestDestSize, b.Addr(), access)
	return b, mr, err
}

func (c *cmChannel) postRecv() error {
	return c.qp.PostRecv(verbs.RecvWR{ID: syncSpecID, SGL: []verbs.SGE{c.rmr.SGE(0, oob.PerftestDestSize)}})
}

// WriteMsg sends msg and waits for its completion (rdma_write_data).
func (c *cmChannel) WriteMsg(ctx context.Context, msg []byte, what string) error {
	if len(msg) > oob.PerftestDestSize {
		return fmt.Errorf("%s: %d bytes, more than the peer's receive takes (%d)", what, len(msg), oob.PerftestDestSize)
	}
	copy(c.smr.Bytes(), msg)
	wr := verbs.SendWR{ID: syncSpecID, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{c.smr.SGE(0, uint64(len(msg)))}}
	if err := c.qp.PostSend(wr); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	wc, err := waitOne(ctx, c.scq, cmChannelWait, what)
	if err == nil && (wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCSend) {
		err = fmt.Errorf("%s: Bad wc status %d", what, wc.Status)
	}
	return err
}

// ReadMsg waits for the peer's next message, which must be len(buf)
// bytes, and posts the receive again (rdma_read_data).
func (c *cmChannel) ReadMsg(ctx context.Context, buf []byte, what string, wait time.Duration) error {
	if wait <= 0 {
		wait = cmChannelWait
	}
	wc, err := waitOne(ctx, c.rcq, wait, what)
	if err != nil {
		return err
	}
	if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv {
		return fmt.Errorf("%s: Bad wc status -- %d -- %d", what, wc.Status, wc.WRID)
	}
	got := c.rmr.Bytes()[:wc.ByteLen]
	if int(wc.ByteLen) != len(buf) {
		return &oob.ProtocolError{Op: what, Msg: append([]byte(nil), got...), Why: fmt.Sprintf("%d bytes, want %d", wc.ByteLen, len(buf))}
	}
	copy(buf, got)
	return c.postRecv()
}

// waitOne sleeps on cq's events until it has a completion, at most wait.
func waitOne(ctx context.Context, cq *verbs.CQ, wait time.Duration, what string) (verbs.WC, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var wc [1]verbs.WC
	for {
		if cq.Poll(wc[:]) == 1 {
			return wc[0], nil
		}
		// Arm, then look once more: a completion before the arming
		// raises no event.
		if err := cq.ReqNotify(false); err != nil {
			return wc[0], err
		}
		if cq.Poll(wc[:]) == 1 {
			return wc[0], nil
		}
		if err := cq.WaitEvent(ctx); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return wc[0], fmt.Errorf("%s: nothing from the peer within %v", what, wait)
			}
			return wc[0], fmt.Errorf("%s: %w", what, err)
		}
	}
}

func (c *cmChannel) close() {
	if c.conn != nil {
		c.conn.Close()
	}
	if c.qp != nil {
		c.qp.Destroy()
	}
	for _, cq := range []*verbs.CQ{c.scq, c.rcq} {
		if cq != nil {
			cq.Destroy()
		}
	}
	for _, mr := range []*verbs.MR{c.smr, c.rmr} {
		if mr != nil {
			mr.Dereg()
		}
	}
	for _, b := range []*verbs.Buffer{c.sbuf, c.rbuf} {
		if b != nil {
			b.Close()
		}
	}
	if c.pd != nil {
		c.pd.Dealloc()
	}
}

// cmCommParams are rdma_client_connect's and rdma_server_connect's for
// the channel: perftest's retry count (7) and RNR retries forever; no
// RDMA reads on it.
var cmCommParams = verbs.ConnParams{RetryCount: 7, RNRRetryCount: 7}

// testConnParams are rdma_cm_route_handler's and
// rdma_cm_connection_request_handler's for the test's QPs: the
// outstanding reads both ways for READ and atomics (the responder's
// remote access comes with them).
func (s *session) testConnParams() verbs.ConnParams {
	cp := verbs.ConnParams{RetryCount: 7, RNRRetryCount: 7}
	if v := s.p.test.verb; v == verbRead || v == verbAtomic {
		r := uint8(min(s.p.outReads, 255))
		cp.ResponderResources, cp.InitiatorDepth = r, r
	}
	return cp
}

// serverAddr resolves the server's name to IPv4, as perftest's
// rdma_getaddrinfo with AF_INET.
func (s *session) serverAddr(ctx context.Context) (netip.AddrPort, error) {
	p := s.p
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", p.servername)
	if err != nil || len(ips) == 0 {
		return netip.AddrPort{}, fmt.Errorf("Failed to get RDMA CM address info - Error: %v", err)
	}
	return netip.AddrPortFrom(ips[0].Unmap(), uint16(p.port)), nil
}

// connectChannel is establish_connection in rdma_cm mode: the client
// connects the channel's QP to the server's port; the server listens
// there (its listener stays for -R's connections) and accepts one.
func (s *session) connectChannel(ctx context.Context) error {
	p := s.p
	ch, err := newCMChannel(s.dev)
	s.ch = ch
	if err != nil {
		return fmt.Errorf(" Unable to create the resources needed by comm struct: %w", err)
	}
	if p.client() {
		addr, err := s.serverAddr(ctx)
		if err != nil {
			return err
		}
		if ch.conn, err = s.dev.Dial(ctx, addr, ch.qp, cmCommParams); err != nil {
			return fmt.Errorf(" Unable to perform rdma_client function: %w", err)
		}
	} else {
		if s.listener, err = s.dev.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(p.port))); err != nil {
			return fmt.Errorf(" rdma_bind_addr failed: %w", err)
		}
		if onListen != nil {
			onListen(&net.TCPAddr{Port: p.port})
		}
		conn, _, err := s.listener.Accept(ctx)
		if err != nil {
			return fmt.Errorf(" Unable to perform rdma_server function: %w", err)
		}
		ch.conn = conn
		if err := conn.Accept(ctx, ch.qp, cmCommParams); err != nil {
			return fmt.Errorf(" Unable to perform rdma_server function: %w", err)
		}
		if !p.cmQPs {
			s.listener.Close()
			s.listener = nil
		}
	}
	s.comm = oob.PerftestRDMACM(ch, p.client())
	return nil
}

// connectQPs is create_rdma_cm_connection: a barrier, one rdma_cm
// connection per QP (the client connects them in order, the server
// takes them in the order they come), a barrier.
func (s *session) connectQPs(ctx context.Context) error {
	if _, err := s.comm.HandShake(ctx, oob.PerftestDest{}, 0); err != nil {
		return fmt.Errorf("Failed to sync between client and server before creating RDMA CM connection: %w", err)
	}
	cp := s.testConnParams()
	var addr netip.AddrPort
	if s.p.client() {
		var err error
		if addr, err = s.serverAddr(ctx); err != nil {
			return err
		}
	}
	for _, qp := range s.qps {
		var c *verbs.Conn
		var err error
		if s.p.client() {
			c, err = s.dialQP(ctx, addr, qp, cp)
		} else {
			c, err = s.acceptQP(ctx, qp, cp)
		}
		if err != nil {
			return fmt.Errorf("Failed to create RDMA CM connection: %w", err)
		}
		s.conns = append(s.conns, c)
	}
	if s.listener != nil {
		s.listener.Close()
		s.listener = nil
	}
	if _, err := s.comm.HandShake(ctx, oob.PerftestDest{}, 0); err != nil {
		return fmt.Errorf("Failed to sync between client and server after creating RDMA CM connection: %w", err)
	}
	return nil
}

// dialQP connects qp, again while the server rejects it (not yet
// listening), with the QP back in INIT for each try.
func (s *session) dialQP(ctx context.Context, addr netip.AddrPort, qp *verbs.QP, cp verbs.ConnParams) (*verbs.Conn, error) {
	for try := 1; ; try++ {
		c, err := s.dev.Dial(ctx, addr, qp, cp)
		var rej *verbs.RejectedError
		if err == nil || !errors.As(err, &rej) || try == cmConnectTries {
			return c, err
		}
		select {
		case <-time.After(cmRetryDelay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateReset}, verbs.QPAttrState); err != nil {
			return nil, err
		}
		if err := s.qpInit(qp); err != nil {
			return nil, err
		}
	}
}

// acceptQP takes the next connect request for qp and, as perftest,
// sets the QP's RNR NAK delay to MIN_RNR_TIMER (rdma_cm leaves 0, 655 ms).
func (s *session) acceptQP(ctx context.Context, qp *verbs.QP, cp verbs.ConnParams) (*verbs.Conn, error) {
	c, _, err := s.listener.Accept(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.Accept(ctx, qp, cp); err != nil {
		c.Close()
		return nil, err
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, MinRNRTimer: 12}, verbs.QPAttrState|verbs.QPAttrMinRNRTimer); err != nil {
		return c, fmt.Errorf("set min_rnr_timer: %w", err)
	}
	return c, nil
}

// cmDisconnectWait bounds the wait for the peer's DREP (perftest's
// client waits for every DISCONNECTED).
const cmDisconnectWait = 2 * time.Second

// closeCM ends the connections (rdma_cm_disconnect_nodes: the client
// disconnects and waits; the server's connections go as they are
// destroyed), then the channel.
func (s *session) closeCM() {
	for _, c := range s.conns {
		if s.p.client() {
			if c.Disconnect() == nil {
				waitDisconnected(c, cmDisconnectWait)
			}
		}
		c.Close()
	}
	s.conns = nil
	if s.listener != nil {
		s.listener.Close()
	}
	if s.ch != nil {
		s.ch.close()
	}
}

func waitDisconnected(c *verbs.Conn, wait time.Duration) {
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case ev, ok := <-c.Events():
			if !ok || ev.Type == verbs.CMEventDisconnected {
				return
			}
		case <-t.C:
			return
		}
	}
}
