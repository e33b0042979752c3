package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"

	"github.com/vrnic/vrnicd/cmd/internal/cmtool"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// node is cmatest_node: one connection with its own PD, a send and a
// receive CQ, an RC QP and the message buffer.
type node struct {
	id        int
	conn      *verbs.Conn
	pd        *verbs.PD
	scq, rcq  *verbs.CQ
	qp        *verbs.QP
	mr        *verbs.MR
	connected bool
}

// test is struct cmatest: the device (ucmatose's event channel) and the
// nodes.
type test struct {
	cfg   *config
	out   io.Writer
	mu    sync.Mutex // out, between the connections' goroutines
	dev   *verbs.Device
	nodes []*node
}

func (t *test) printf(format string, args ...any) {
	t.mu.Lock()
	fmt.Fprintf(t.out, format, args...)
	t.mu.Unlock()
}

// initNode is init_node and create_message: PD, the two CQs of
// message_count entries (1 without messages), the QP (every send
// signalled) and the message MR.
func (t *test) initNode(n *node) error {
	var err error
	if n.pd, err = t.dev.AllocPD(); err != nil {
		return fmt.Errorf("cmatose: unable to allocate PD: %w", err)
	}
	cqe := max(t.cfg.count, 1)
	if n.scq, err = t.dev.CreateCQ(cqe, true); err != nil {
		return fmt.Errorf("cmatose: unable to create CQ: %w", err)
	}
	if n.rcq, err = t.dev.CreateCQ(cqe, true); err != nil {
		return fmt.Errorf("cmatose: unable to create CQ: %w", err)
	}
	if n.qp, err = n.pd.CreateCMQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: n.scq, RecvCQ: n.rcq, SQSigAll: true,
		Cap: verbs.QPCap{MaxSendWR: uint32(cqe), MaxRecvWR: uint32(cqe), MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return fmt.Errorf("cmatose: unable to create QP: %w", err)
	}
	if t.cfg.count == 0 {
		return nil
	}
	if n.mr, err = cmtool.Reg(n.pd, t.cfg.size, verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("failed to reg MR: %w", err)
	}
	return nil
}

// postRecvs posts message_count receives of message_size bytes.
func (t *test) postRecvs(n *node) error {
	for range t.cfg.count {
		if err := n.qp.PostRecv(verbs.RecvWR{ID: uint64(n.id), SGL: []verbs.SGE{n.mr.SGE(0, uint64(t.cfg.size))}}); err != nil {
			return fmt.Errorf("failed to post receives: %w", err)
		}
	}
	return nil
}

// postSends posts message_count SENDs of message_size bytes.
func (t *test) postSends(n *node) error {
	if !n.connected {
		return nil
	}
	for range t.cfg.count {
		if err := n.qp.PostSend(verbs.SendWR{ID: uint64(n.id), Opcode: verbs.WRSend, SGL: []verbs.SGE{n.mr.SGE(0, uint64(t.cfg.size))}}); err != nil {
			return fmt.Errorf("failed to post sends: %w", err)
		}
	}
	return nil
}

// connParams is route_handler's rdma_conn_param (retry 5, RNR retry 0).
var connParams = verbs.ConnParams{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 5}

// acceptParams is rdma_accept(id, NULL)'s: librdmacm fills in 7 retries
// and 7 RNR retries.
var acceptParams = verbs.ConnParams{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}

// connectFailed reports a connection that did not come up as cma_handler
// does, and gives its status.
func (t *test) connectFailed(err error) int {
	if typ, status, ok := cmtool.FailedEvent(err); ok {
		t.printf("cmatose: event: %s, error: %d\n", cmtool.EventName(typ), status)
		if status == 0 {
			status = -1
		}
		return status
	}
	t.printf("cmatose: failure connecting: %v\n", err)
	return -1
}

// eachConnected runs f on every connected node at once and gives the
// first failure's status.
func (t *test) eachConnected(f func(*node) int) int {
	return cmtool.Concurrently(len(t.nodes), func(i int) int {
		if n := t.nodes[i]; n != nil && n.connected {
			return f(n)
		}
		return 0
	})
}

// pollCQs is poll_cqs: message_count completions on every connected
// node's send or receive CQ.
func (t *test) pollCQs(ctx context.Context, recv bool) int {
	return t.eachConnected(func(n *node) int {
		cq := n.scq
		if recv {
			cq = n.rcq
		}
		if err := cmtool.Completions(ctx, cq, t.cfg.count, n.conn); err != nil {
			t.printf("cmatose: failed polling CQ: %v\n", err)
			return -1
		}
		return 0
	})
}

func (t *test) postAllSends() int {
	for _, n := range t.nodes {
		if n == nil {
			continue
		}
		if err := t.postSends(n); err != nil {
			t.printf("%v\n", err)
			return -1
		}
	}
	return 0
}

// runServer is run_server: take -c connect requests, send, receive,
// disconnect every connection and wait for their DISCONNECTED.
func (t *test) runServer(ctx context.Context) int {
	addr := netip.AddrPortFrom(t.cfg.src, t.cfg.port)
	var l *verbs.Listener
	var err error
	if t.dev, l, err = cmtool.ServerStart(t.printf, "cmatose", t.cfg.socket, (*verbs.Device).Listen, addr, onListen); err != nil {
		return -1
	}
	defer l.Close()
	if status := t.serverConnect(ctx, l); status != 0 {
		return status
	}
	if t.cfg.count > 0 {
		t.printf("initiating data transfers\n")
		if status := t.postAllSends(); status != 0 {
			return status
		}
		t.printf("completing sends\n")
		if status := t.pollCQs(ctx, false); status != 0 {
			return status
		}
		t.printf("receiving data transfers\n")
		if status := t.pollCQs(ctx, true); status != 0 {
			return status
		}
		t.printf("data transfers complete\n")
	}
	t.printf("cmatose: disconnecting\n")
	status := t.eachConnected(func(n *node) int {
		n.connected = false
		if err := n.conn.Disconnect(); err != nil {
			t.printf("cmatose: rdma_disconnect: %v\n", err)
			return -1
		}
		if err := cmtool.WaitEvent(ctx, n.conn, verbs.CMEventDisconnected, 0); err != nil {
			t.printf("cmatose: failure in rdma_get_cm_event in disconnect events: %v\n", err)
			return -1
		}
		return 0
	})
	t.printf("disconnected\n")
	return status
}

// serverConnect is the server's connect_events: -c connect requests, each
// accepted (connect_handler) as it comes, all at once.
func (t *test) serverConnect(ctx context.Context, l *verbs.Listener) int {
	t.nodes = make([]*node, t.cfg.conns)
	status := make([]int, t.cfg.conns)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range t.cfg.conns {
		conn, _, err := l.Accept(ctx)
		if err != nil {
			t.printf("cmatose: failure in rdma_get_cm_event in connect events: %v\n", err)
			wg.Wait()
			return -1
		}
		n := &node{id: i, conn: conn}
		t.nodes[i] = n
		wg.Add(1)
		go func() {
			defer wg.Done()
			status[i] = t.accept(ctx, n)
		}()
	}
	wg.Wait()
	return cmtool.FirstFailure(status)
}

// accept is connect_handler and the ESTABLISHED that follows.
func (t *test) accept(ctx context.Context, n *node) int {
	err := t.initNode(n)
	if err == nil {
		err = t.postRecvs(n)
	}
	if err != nil {
		t.printf("%v\n", err)
		t.printf("cmatose: failing connection request\n")
		_ = n.conn.Reject(nil)
		return -1
	}
	if err := n.conn.Accept(ctx, n.qp, acceptParams); err != nil {
		return t.connectFailed(err)
	}
	n.connected = true
	return 0
}

// runClient is run_client: -c connections at once, receive, send the
// replies, then wait for the server's disconnect of each.
func (t *test) runClient(ctx context.Context) int {
	var err error
	if t.dev, err = cmtool.ClientStart(t.printf, "cmatose", t.cfg.socket); err != nil {
		return -1
	}
	t.nodes = make([]*node, t.cfg.conns)
	ret := cmtool.Concurrently(len(t.nodes), func(i int) int {
		t.nodes[i] = &node{id: i}
		return t.connect(ctx, t.nodes[i])
	})
	if ret == 0 && t.cfg.count > 0 {
		ret = t.clientData(ctx)
	}
	if s := t.clientDisconnect(ctx); s != 0 {
		ret = s
	}
	return ret
}

// connect is route_handler (init_node, post_recvs, rdma_connect) and the
// ESTABLISHED that follows.
func (t *test) connect(ctx context.Context, n *node) int {
	if err := t.initNode(n); err != nil {
		t.printf("%v\n", err)
		return -1
	}
	if err := t.postRecvs(n); err != nil {
		t.printf("%v\n", err)
		return -1
	}
	conn, err := t.dev.Dial(ctx, netip.AddrPortFrom(t.cfg.dst, t.cfg.port), n.qp, connParams)
	if err != nil {
		return t.connectFailed(err)
	}
	n.conn, n.connected = conn, true
	return 0
}

func (t *test) clientData(ctx context.Context) int {
	t.printf("receiving data transfers\n")
	if status := t.pollCQs(ctx, true); status != 0 {
		return status
	}
	t.printf("sending replies\n")
	if status := t.postAllSends(); status != 0 {
		return status
	}
	t.printf("data transfers complete\n")
	return 0
}

// clientDisconnect is the client's disconnect_events: each connection's
// DISCONNECTED (the server's DREQ), answered with rdma_disconnect (DREP).
func (t *test) clientDisconnect(ctx context.Context) int {
	return t.eachConnected(func(n *node) int {
		err := cmtool.WaitEvent(ctx, n.conn, verbs.CMEventDisconnected, 0)
		if err == nil {
			err = n.conn.Disconnect()
		}
		if err != nil && !errors.Is(err, cmtool.ErrDisconnected) {
			t.printf("cmatose: failure in rdma_get_cm_event in disconnect events: %v\n", err)
			return -1
		}
		return 0
	})
}

// destroy is destroy_nodes: the device's resources in cmatose's order,
// then the device (rdma_destroy_event_channel).
func (t *test) destroy() {
	for _, n := range t.nodes {
		if n == nil {
			continue
		}
		cmtool.Release(nil, n.qp, []*verbs.CQ{n.scq, n.rcq}, n.mr, n.pd)
		if n.conn != nil {
			_ = n.conn.Close()
		}
	}
	if t.dev != nil {
		_ = t.dev.Close()
	}
}

// onListen, if set, is told when the server listens (tests).
var onListen func()
