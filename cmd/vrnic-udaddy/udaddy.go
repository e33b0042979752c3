package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"

	"github.com/vrnic/vrnicd/cmd/internal/cmtool"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// node is cmatest_node: one UD peer with its own PD, CQ, UD QP, message
// buffer (the GRH room and the message) and the address handle, QPN and
// Q_Key it sends to.
type node struct {
	id         int
	req        *verbs.Conn // server: the SIDR request it answered
	pd         *verbs.PD
	cq         *verbs.CQ
	qp         *verbs.QP
	mr         *verbs.MR
	ah         *verbs.AH
	remoteQPN  uint32
	remoteQKey uint32
	connected  bool
}

// test is struct cmatest: the device (udaddy's event channel) and the
// nodes.
type test struct {
	cfg   *config
	out   io.Writer
	mu    sync.Mutex // out, between the nodes' goroutines
	dev   *verbs.Device
	nodes []*node
}

func (t *test) printf(format string, args ...any) {
	t.mu.Lock()
	fmt.Fprintf(t.out, format, args...)
	t.mu.Unlock()
}

// verifyParams is verify_test_params: a message must fit one packet of
// the port's active MTU.
func (t *test) verifyParams() error {
	p, err := t.dev.QueryPort(1)
	if err != nil {
		return err
	}
	if mtu := verbs.MTU(p.ActiveMTU).Bytes(); t.cfg.count > 0 && t.cfg.size > mtu {
		return fmt.Errorf("udaddy: message_size %d is larger than active mtu %d", t.cfg.size, mtu)
	}
	return nil
}

// initNode is init_node and create_message: PD, one CQ of twice the
// message count, a UD QP in RTS with rdma_cm's Q_Key (what rdma_create_qp
// does for RDMA_PS_UDP), and the buffer of GRH room and one message.
func (t *test) initNode(n *node) error {
	var err error
	if n.pd, err = t.dev.AllocPD(); err != nil {
		return fmt.Errorf("udaddy: unable to allocate PD: %w", err)
	}
	depth := max(t.cfg.count, 1)
	if n.cq, err = t.dev.CreateCQ(max(2*t.cfg.count, 2), true); err != nil {
		return fmt.Errorf("udaddy: unable to create CQ: %w", err)
	}
	if n.qp, err = n.pd.CreateCMQP(verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: n.cq, RecvCQ: n.cq,
		Cap: verbs.QPCap{MaxSendWR: uint32(depth), MaxRecvWR: uint32(depth), MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return fmt.Errorf("udaddy: unable to create QP: %w", err)
	}
	if t.cfg.count == 0 {
		return nil
	}
	if n.mr, err = cmtool.Reg(n.pd, t.cfg.size+verbs.GRHLen, verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("failed to reg MR: %w", err)
	}
	return nil
}

// postRecvs posts message_count receives, every one into the same buffer
// (GRH room and message), as udaddy does.
func (t *test) postRecvs(n *node) error {
	for range t.cfg.count {
		wr := verbs.RecvWR{ID: uint64(n.id), SGL: []verbs.SGE{n.mr.SGE(0, uint64(t.cfg.size+verbs.GRHLen))}}
		if err := n.qp.PostRecv(wr); err != nil {
			return fmt.Errorf("failed to post receives: %w", err)
		}
	}
	return nil
}

// postSends posts message_count SEND_WITH_IMMs carrying our QPN (the
// server's reply goes to it), signalled or not.
func (t *test) postSends(n *node, signaled bool) error {
	if !n.connected || t.cfg.count == 0 {
		return nil
	}
	wr := verbs.SendWR{ID: uint64(n.id), Opcode: verbs.WRSendWithImm, ImmData: n.qp.QPN(), AH: n.ah,
		RemoteQPN: n.remoteQPN, RemoteQKey: n.remoteQKey, SGL: []verbs.SGE{n.mr.SGE(0, uint64(t.cfg.size))}}
	if signaled {
		wr.Flags = verbs.SendSignaled
	}
	for range t.cfg.count {
		if err := n.qp.PostSend(wr); err != nil {
			return fmt.Errorf("failed to post sends: %w", err)
		}
	}
	return nil
}

// prepare is what both sides do before asking or answering: check the
// sizes, make the node's objects, post its receives.
func (t *test) prepare(n *node) error {
	if err := t.verifyParams(); err != nil {
		return err
	}
	if err := t.initNode(n); err != nil {
		return err
	}
	return t.postRecvs(n)
}

// pollCQs is poll_cqs: message_count completions on every connected
// node's CQ; the first one of a node without an address handle (the
// server's) makes the reply's from its GRH, with the sender's QPN from the
// immediate data.
func (t *test) pollCQs(ctx context.Context) int {
	for _, n := range t.nodes {
		if n == nil || !n.connected {
			continue
		}
		if err := t.pollNode(ctx, n); err != nil {
			t.printf("udaddy: failed polling CQ: %v\n", err)
			return -1
		}
	}
	return 0
}

func (t *test) pollNode(ctx context.Context, n *node) error {
	wc := make([]verbs.WC, 8)
	for done := 0; done < t.cfg.count; {
		got := n.cq.Poll(wc[:min(len(wc), t.cfg.count-done)])
		if got > 0 && n.ah == nil {
			if err := t.replyAH(n, &wc[0]); err != nil {
				return err
			}
		}
		if done += got; got > 0 {
			continue
		}
		// udaddy spins; on a machine whose cores the daemon shares, sleep
		// on the CQ's event instead (arm, then look once more).
		if err := n.cq.ReqNotify(false); err != nil {
			return err
		}
		if n.cq.Poll(wc[:0]) == 0 {
			wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			_ = n.cq.WaitEvent(wctx)
			cancel()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// replyAH is create_reply_ah: the address handle back to wc's sender, its
// QPN from the immediate data, our own QP's Q_Key.
func (t *test) replyAH(n *node, wc *verbs.WC) error {
	attr, err := t.dev.AHFromGRH(n.mr.Bytes()[:verbs.GRHLen])
	if err != nil {
		return err
	}
	if n.ah, err = n.pd.CreateAH(attr); err != nil {
		return err
	}
	n.remoteQPN = wc.ImmData
	a, _, err := n.qp.Query()
	if err != nil {
		return err
	}
	n.remoteQKey = a.QKey
	return nil
}

// runServer is run_server: answer -c SIDR requests, receive every node's
// messages, send as many back, wait for the sends.
func (t *test) runServer(ctx context.Context) int {
	addr := netip.AddrPortFrom(t.cfg.src, t.cfg.port)
	var l *verbs.Listener
	var err error
	if t.dev, l, err = cmtool.ServerStart(t.printf, "udaddy", t.cfg.socket, (*verbs.Device).ListenUD, addr, onListen); err != nil {
		return -1
	}
	defer l.Close()
	if status := t.serverConnect(ctx, l); status != 0 {
		return status
	}
	if t.cfg.count == 0 {
		return 0
	}
	t.printf("receiving data transfers\n")
	if status := t.pollCQs(ctx); status != 0 {
		return status
	}
	t.printf("sending replies\n")
	for _, n := range t.nodes {
		if err := t.postSends(n, true); err != nil {
			t.printf("%v\n", err)
			return -1
		}
	}
	if status := t.pollCQs(ctx); status != 0 {
		return status
	}
	t.printf("data transfers complete\n")
	return 0
}

// serverConnect is the server's connect_events: -c SIDR requests, each
// answered (connect_handler) as it comes; a request that cannot be served
// is rejected and counts as one of the -c.
func (t *test) serverConnect(ctx context.Context, l *verbs.Listener) int {
	t.nodes = make([]*node, t.cfg.conns)
	for i := range t.cfg.conns {
		req, _, err := l.Accept(ctx)
		if err != nil {
			t.printf("udaddy: failure in rdma_get_cm_event in connect events: %v\n", err)
			return -1
		}
		n := &node{id: i, req: req}
		t.nodes[i] = n
		if err := t.prepare(n); err != nil {
			t.printf("%v\n", err)
			t.printf("udaddy: failing connection request\n")
			_ = req.Reject(nil)
			continue
		}
		if err := req.AcceptUD(n.qp, nil); err != nil {
			t.printf("udaddy: failure accepting: %v\n", err)
			continue
		}
		n.connected = true
	}
	return 0
}

// runClient is run_client: resolve -c peers at once, send each
// message_count messages, receive as many.
func (t *test) runClient(ctx context.Context) int {
	var err error
	if t.dev, err = cmtool.ClientStart(t.printf, "udaddy", t.cfg.socket); err != nil {
		return -1
	}
	t.nodes = make([]*node, t.cfg.conns)
	if s := cmtool.Concurrently(len(t.nodes), func(i int) int {
		t.nodes[i] = &node{id: i}
		return t.resolve(ctx, t.nodes[i])
	}); s != 0 {
		return s
	}
	if t.cfg.count == 0 {
		return 0
	}
	t.printf("initiating data transfers\n")
	for _, n := range t.nodes {
		if err := t.postSends(n, false); err != nil {
			t.printf("%v\n", err)
			return -1
		}
	}
	t.printf("receiving data transfers\n")
	if status := t.pollCQs(ctx); status != 0 {
		return status
	}
	t.printf("data transfers complete\n")
	return 0
}

// resolve is route_handler (init_node, post_recvs, rdma_connect) and the
// ESTABLISHED that follows (resolved_handler: the address handle, QPN and
// Q_Key of the peer).
func (t *test) resolve(ctx context.Context, n *node) int {
	if err := t.prepare(n); err != nil {
		t.printf("%v\n", err)
		return -1
	}
	peer, err := t.dev.ResolveUDFrom(ctx, netip.AddrPortFrom(t.cfg.src, 0), netip.AddrPortFrom(t.cfg.dst, t.cfg.port), nil)
	if err != nil {
		return t.resolveFailed(err)
	}
	if n.ah, err = n.pd.CreateAH(peer.AH); err != nil {
		t.printf("udaddy: failure creating address handle\n")
		return -1
	}
	n.remoteQPN, n.remoteQKey, n.connected = peer.QPN, peer.QKey, true
	return 0
}

// resolveFailed reports a resolution that failed as cma_handler does and
// gives its status: UNREACHABLE with the SIDR status (1: nobody listens)
// or -ETIMEDOUT, ADDR_ERROR for an address that does not resolve.
func (t *test) resolveFailed(err error) int {
	typ, status, ok := cmtool.FailedEvent(err)
	if !ok {
		t.printf("udaddy: failure connecting: %v\n", err)
		return -1
	}
	t.printf("udaddy: event: %s, error: %d\n", cmtool.EventName(typ), status)
	return status
}

// destroy is destroy_nodes: each node's objects in udaddy's order, then
// the device (rdma_destroy_event_channel).
func (t *test) destroy() {
	for _, n := range t.nodes {
		if n == nil {
			continue
		}
		cmtool.Release(n.ah, n.qp, []*verbs.CQ{n.cq}, n.mr, n.pd)
	}
	if t.dev != nil {
		_ = t.dev.Close()
	}
}

// onListen, if set, is told when the server listens (tests).
var onListen func()
