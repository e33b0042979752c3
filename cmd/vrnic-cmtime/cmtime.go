package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"

	"github.com/vrnic/vrnicd/cmd/internal/cmtool"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// The steps vrnic-cmtime times, in cmtime's words.
const (
	stepCreateQP = iota
	stepConnect
	stepDisconnect
	stepDestroy
	stepCount
)

var stepNames = [stepCount]string{"create qp", "connect", "disconnect", "destroy"}

// span is one step's start and end (zero: not done).
type span [2]time.Time

// node is cmtime's struct node: one connection and its steps' times.
type node struct {
	qp    *verbs.QP
	cq    *verbs.CQ
	conn  *verbs.Conn
	times [stepCount]span
	err   error
}

// disconnectWait bounds waiting for one connection's DISCONNECTED after
// rdma_disconnect: the DREQ's retries end well before.
const disconnectWait = 2 * time.Minute

// runClient is cmtime's run_client: every step for all connections at
// once, then the next step.
func runClient(ctx context.Context, cfg *config, dev *verbs.Device, out io.Writer) error {
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	nodes := make([]node, cfg.conns)
	var steps [stepCount]span
	dst := netip.AddrPortFrom(cfg.dst, cfg.port)
	params := verbs.ConnParams{ResponderResources: 1, InitiatorDepth: 1, RetryCount: uint8(cfg.retries)}

	fmt.Fprintf(out, "creating qp\n")
	step(&steps[stepCreateQP], nodes, false, func(n *node) error {
		var err error
		if n.cq, err = dev.CreateCQ(2, false); err != nil {
			return fmt.Errorf("failure creating qp: %w", err)
		}
		if n.qp, err = pd.CreateCMQP(qpAttr(n.cq)); err != nil {
			return fmt.Errorf("failure creating qp: %w", err)
		}
		return nil
	}, stepCreateQP)
	fmt.Fprintf(out, "connecting\n")
	step(&steps[stepConnect], nodes, true, func(n *node) error {
		c, err := dev.Dial(ctx, dst, n.qp, params)
		if err != nil {
			if t, status, ok := cmtool.FailedEvent(err); ok {
				return fmt.Errorf("event: %s, error: %d", cmtool.EventName(t), status)
			}
			return fmt.Errorf("failure connecting: %w", err)
		}
		n.conn = c
		return nil
	}, stepConnect)
	fmt.Fprintf(out, "disconnecting\n")
	step(&steps[stepDisconnect], nodes, true, func(n *node) error {
		if err := n.conn.Disconnect(); err != nil {
			return fmt.Errorf("rdma_disconnect: %w", err)
		}
		return cmtool.WaitEvent(ctx, n.conn, verbs.CMEventDisconnected, disconnectWait)
	}, stepDisconnect)
	fmt.Fprintf(out, "destroying id\n")
	step(&steps[stepDestroy], nodes, false, func(n *node) error {
		if n.conn != nil {
			_ = n.conn.Close()
		}
		if n.qp != nil {
			_ = n.qp.Destroy()
		}
		if n.cq != nil {
			_ = n.cq.Destroy()
		}
		return nil
	}, stepDestroy)
	showPerf(out, nodes, &steps)
	failed := 0
	var first error
	for _, n := range nodes {
		if n.err != nil {
			if failed++; first == nil {
				first = n.err
			}
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d connections failed; the first: %w", failed, len(nodes), first)
	}
	return nil
}

// step runs f on every node that has not failed, all at once (parallel)
// or one after the other, timing each and the whole.
func step(total *span, nodes []node, parallel bool, f func(*node) error, s int) {
	total[0] = time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range nodes {
		n := &nodes[i]
		if n.err != nil {
			continue
		}
		do := func() {
			start := time.Now()
			err := f(n)
			mu.Lock()
			n.times[s] = span{start, time.Now()}
			n.err = err
			mu.Unlock()
		}
		if !parallel {
			do()
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); do() }()
	}
	wg.Wait()
	total[1] = time.Now()
}

// qpAttr is cmtime's init_qp_attr: one send and one receive, one SGE.
func qpAttr(cq *verbs.CQ) verbs.QPInitAttr {
	return verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
}

// showPerf is cmtime's show_perf: each step's total, the slowest and the
// fastest connection's time and the total per connection.
func showPerf(out io.Writer, nodes []node, steps *[stepCount]span) {
	fmt.Fprintf(out, "step              total ms     max ms     min us  us / conn\n")
	for s := range stepCount {
		maxUS, minUS := 0.0, 999999999.0
		for i := range nodes {
			t := nodes[i].times[s]
			if t[0].IsZero() || t[1].IsZero() {
				continue
			}
			us := float64(t[1].Sub(t[0]).Nanoseconds()) / 1e3
			maxUS, minUS = max(maxUS, us), min(minUS, us)
		}
		us := float64(steps[s][1].Sub(steps[s][0]).Nanoseconds()) / 1e3
		fmt.Fprintf(out, "%-13s: %11.2f%11.2f%11.2f%11.2f\n", stepNames[s], us/1000, maxUS/1000, minUS, us/float64(len(nodes)))
	}
}

// runServer is cmtime's run_server: accept every request with a QP of its
// own (rdma_accept(id, NULL): 7 retries, 7 RNR retries); when the client
// disconnects, disconnect, destroy the QP and the ID. Until ctx ends.
func runServer(ctx context.Context, cfg *config, dev *verbs.Device, out io.Writer) error {
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	l, err := dev.Listen(netip.AddrPortFrom(cfg.src, cfg.port))
	if err != nil {
		return fmt.Errorf("failure trying to listen: %w", err)
	}
	defer l.Close()
	if onListen != nil {
		onListen()
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	var mu sync.Mutex
	for {
		conn, _, err := l.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("failure in rdma_get_cm_event: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := serve(ctx, pd, conn); err != nil {
				mu.Lock()
				fmt.Fprintln(out, err)
				mu.Unlock()
			}
		}()
	}
}

var acceptParams = verbs.ConnParams{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}

// serve is __req_handler and the disconnect work of one connection.
func serve(ctx context.Context, pd *verbs.PD, conn *verbs.Conn) error {
	defer conn.Close()
	cq, err := pd.Device().CreateCQ(2, false)
	if err != nil {
		_ = conn.Reject(nil)
		return fmt.Errorf("failure creating qp: %w\nfailing connection request", err)
	}
	defer cq.Destroy()
	qp, err := pd.CreateCMQP(qpAttr(cq))
	if err != nil {
		_ = conn.Reject(nil)
		return fmt.Errorf("failure creating qp: %w\nfailing connection request", err)
	}
	defer qp.Destroy()
	if err := conn.Accept(ctx, qp, acceptParams); err != nil {
		if t, status, ok := cmtool.FailedEvent(err); ok {
			return fmt.Errorf("event: %s, error: %d", cmtool.EventName(t), status)
		}
		return fmt.Errorf("failure accepting: %w", err)
	}
	err = cmtool.WaitEvent(ctx, conn, verbs.CMEventDisconnected, 0)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	if err != nil {
		return err
	}
	return conn.Disconnect()
}

// onListen, if set, is told when the server listens (tests).
var onListen func()
