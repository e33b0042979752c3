package main

import (
	"context"
	"fmt"
	"github.com/vrnic/vrnicd/verbsock"
	"io"
	"net/netip"
	"time"

	"github.com/vrnic/vrnicd/cmd/internal/cmtool"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// joinPause is mckey's sleep(3) after the joins, which gives an SM (or a
// switch's IGMP snooping) time to set the group up: the senders' first
// messages come after the receivers' joins.
var joinPause = 3 * time.Second

// node is cmatest_node: one member of the group with its own PD, CQ, UD
// QP, message buffer (the GRH room and the message), join, and the
// address handle, QPN and Q_Key its messages go to.
type node struct {
	id         int
	resolved   netip.Addr // the device's address rdma_resolve_addr picked
	resolveErr error      // an ADDR_ERROR, reported by connectEvents
	err        error      // errno as addrHandler's failure left it (-M's perror)
	pd         *verbs.PD
	cq         *verbs.CQ
	qp         *verbs.QP
	mr         *verbs.MR
	group      *verbs.McastGroup
	attached   bool
	ah         *verbs.AH
	remoteQPN  uint32
	remoteQKey uint32
	connected  bool
}

// test is struct cmatest: the device (mckey's event channel), the nodes
// and the addresses.
type test struct {
	cfg         *config
	out, errOut io.Writer
	count       int // message_count, which create_message zeroes for -S 0
	dev         *verbs.Device
	nodes       []*node
	src, dst    netip.Addr // -b, the group
}

func (t *test) printf(format string, args ...any) { fmt.Fprintf(t.out, format, args...) }

// perror is perror(3): what, then the error's text as strerror gives it.
func (t *test) perror(what string, err error) { fmt.Fprintf(t.errOut, "%s: %s\n", what, strerror(err)) }

// open is create_event_channel and alloc_nodes: the device and -c nodes.
func (t *test) open() (err error) {
	if t.dev, err = verbs.Open(t.cfg.socket); err != nil {
		return fmt.Errorf("failed to create RDMA CM event channel: %w", err)
	}
	t.nodes = make([]*node, t.cfg.conns)
	for i := range t.nodes {
		t.nodes[i] = &node{id: i}
	}
	return nil
}

// run is mckey's run: look the addresses up, have every node resolve the
// group and join it, pause, send or receive, leave. Its status is mckey's
// return value, which the leaves at the end set, as mckey's do.
func (t *test) run(ctx context.Context) int {
	t.printf("mckey: starting %s\n", t.role())
	if status := t.getAddrs(); status != 0 {
		return status
	}
	t.printf("mckey: joining\n")
	for _, n := range t.nodes {
		if status := t.start(ctx, n); status != 0 {
			return status
		}
	}
	if status := t.connectEvents(); status == 0 && sleep(ctx, joinPause) {
		t.transfer(ctx)
		if beforeLeave != nil {
			beforeLeave(t.cfg.sender)
		}
	}
	status := t.leaveAll()
	if ctx.Err() != nil {
		return -1 // interrupted (SIGINT, SIGTERM), which would have killed mckey
	}
	return status
}

// role is what mckey calls its side: a sender is the client.
func (t *test) role() string {
	if t.cfg.sender {
		return "client"
	}
	return "server"
}

// beforeLeave, if set, is called after the data transfers, before the
// leaves, with whether this side sends (tests: a sender's own QP is still
// in the group when the other side's messages have all come).
var beforeLeave func(sender bool)

// getAddrs is get_addr of -b and get_dst_addr of the group: an IP address
// or a host name, or for -M an IPv6 address taken as a GID, which
// inet_pton leaves zero when it is not one.
func (t *test) getAddrs() int {
	var err error
	if t.cfg.bind != "" {
		if t.src, err = cmtool.Lookup(t.cfg.bind); err != nil {
			return t.gaiFailed()
		}
	}
	if t.cfg.unmapped {
		t.dst = netip.IPv6Unspecified()
		if a, err := netip.ParseAddr(t.cfg.group); err == nil && a.Is6() && a.Zone() == "" {
			t.dst = a
		}
		return 0
	}
	if t.dst, err = cmtool.Lookup(t.cfg.group); err != nil {
		return t.gaiFailed()
	}
	return 0
}

// gaiFailed is get_addr's report of a name getaddrinfo does not know
// (EAI_NONAME, which mckey returns).
func (t *test) gaiFailed() int {
	const eaiNoName = -2
	t.printf("getaddrinfo failed (Name or service not known) - invalid hostname or IP address\n")
	return eaiNoName
}

// start is run's loop body for one node: rdma_bind_addr to -b, then
// rdma_resolve_addr of the group, whose ADDR_RESOLVED connectEvents
// handles, or for -M (no resolution of a GID) addr_handler at once.
func (t *test) start(ctx context.Context, n *node) int {
	if t.src.IsValid() {
		if err := t.bind(); err != nil {
			t.perror("mckey: addr bind failure", err)
			return -1
		}
	}
	if t.cfg.unmapped {
		n.resolved = t.src
		if status := t.addrHandler(n); status != 0 {
			t.perror("mckey: resolve addr failure", n.err)
			return status
		}
		return 0
	}
	// No deadline: the daemon's own resolution timeout is mckey's 2000 ms,
	// and its ADDR_ERROR comes before a deadline of ours would.
	r, err := t.dev.ResolveAddr(ctx, t.dst, t.src)
	if _, _, isEvent := cmtool.FailedEvent(err); err != nil && !isEvent {
		t.perror("mckey: resolve addr failure", err)
		return -1
	}
	n.resolved, n.resolveErr = r.Src, err
	return 0
}

// connectEvents is connect_events for the nodes whose group resolved to
// an address: each one's ADDR_RESOLVED (addr_handler) or ADDR_ERROR, then
// its MULTICAST_JOIN (join_handler), until one fails.
func (t *test) connectEvents() int {
	for _, n := range t.nodes {
		if n.resolveErr != nil {
			typ, status, _ := cmtool.FailedEvent(n.resolveErr)
			t.printf("mckey: event: %s, error: %d\n", cmtool.EventName(typ), status)
			return status
		}
		if !t.cfg.unmapped {
			if status := t.addrHandler(n); status != 0 {
				return status
			}
		}
		if status := t.joinHandler(n); status != 0 {
			return status
		}
	}
	return 0
}

// transfer is the data phase after the pause: a sender posts its
// messages on every node, a receiver waits for its on every node.
func (t *test) transfer(ctx context.Context) {
	if t.count == 0 {
		return
	}
	if t.cfg.sender {
		t.printf("initiating data transfers\n")
		for _, n := range t.nodes {
			if err := t.postSends(n); err != nil {
				t.printf("failed to post sends: %d\n", int(verbsock.ErrnoOf(err)))
				return
			}
		}
	} else {
		t.printf("receiving data transfers\n")
		if err := t.pollCQs(ctx); err != nil {
			if ctx.Err() == nil {
				t.printf("mckey: failed polling CQ: %d\n", int(verbsock.ErrnoOf(err)))
			}
			return
		}
	}
	t.printf("data transfers complete\n")
}

// leaveAll is the end of run: rdma_leave_multicast on every node, each
// one's result the status (so the last one's is mckey's return value); a
// node that did not join has nothing to leave (EADDRNOTAVAIL).
func (t *test) leaveAll() int {
	status := 0
	for _, n := range t.nodes {
		status = 0
		if err := t.leave(n); err != nil {
			t.perror("mckey: failure leaving", err)
			status = -1
		}
	}
	return status
}

// sleep waits d or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}
