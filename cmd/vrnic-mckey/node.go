package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/vrnic/vrnicd/verbsock"
	"net/netip"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/vrnic/vrnicd/cmd/internal/cmtool"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// errENOTSUPP is the kernel's ENOTSUPP (524), which glibc's strerror
// calls "Unknown error 524".
const errENOTSUPP = syscall.Errno(524)

// addrHandler is addr_handler: check the sizes, make the node's objects,
// post a receiver's receives, join the group (rdma_join_multicast_ex, a
// full or send-only full member).
func (t *test) addrHandler(n *node) int {
	if status := t.verifyParams(); status != 0 {
		return status
	}
	if status := t.initNode(n); status != 0 {
		return status
	}
	if !t.cfg.sender {
		if err := t.postRecvs(n); err != nil {
			t.printf("failed to post receives: %d\n", int(verbsock.ErrnoOf(err)))
			return int(verbsock.ErrnoOf(err))
		}
	}
	if err := t.join(n); err != nil {
		n.err = err
		t.perror("mckey: failure joining", err)
		return -1
	}
	return 0
}

// verifyParams is verify_test_params: a message must fit one packet of
// the port's active MTU.
func (t *test) verifyParams() int {
	p, err := t.dev.QueryPort(1)
	if err != nil {
		return int(verbsock.ErrnoOf(err))
	}
	if mtu := verbs.MTU(p.ActiveMTU).Bytes(); t.count > 0 && t.cfg.size > mtu {
		t.printf("mckey: message_size %d is larger than active mtu %d\n", t.cfg.size, mtu)
		return -int(syscall.EINVAL)
	}
	return 0
}

// initNode is init_node and create_message: a PD, one CQ of twice the
// message count, a UD QP as rdma_create_qp makes it (RTS with rdma_cm's
// Q_Key; -l: BLOCK_SELF_MCAST_LB), the buffer of GRH room and one
// message.
func (t *test) initNode(n *node) int {
	var err error
	if n.pd, err = t.dev.AllocPD(); err != nil {
		t.printf("mckey: unable to allocate PD\n")
		return -int(syscall.ENOMEM)
	}
	if n.cq, err = t.dev.CreateCQ(max(2*t.count, 2), true); err != nil {
		t.printf("mckey: unable to create CQ\n")
		return -int(syscall.ENOMEM)
	}
	depth := uint32(max(t.count, 1))
	if n.qp, err = n.pd.CreateCMQP(verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: n.cq, RecvCQ: n.cq,
		Cap:              verbs.QPCap{MaxSendWR: depth, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1},
		BlockSelfMcastLB: !t.cfg.loopback}); err != nil {
		n.err = err
		t.perror("mckey: unable to create QP", err)
		return -1
	}
	if t.cfg.size == 0 {
		t.count = 0 // create_message: no messages without a size
	}
	if t.count == 0 {
		return 0
	}
	if n.mr, err = cmtool.Reg(n.pd, t.cfg.size+verbs.GRHLen, verbs.AccessLocalWrite); err != nil {
		t.printf("failed to reg MR\n")
		t.printf("mckey: failed to create messages: %d\n", -1)
		return -1
	}
	return 0
}

// postRecvs posts message_count receives, every one into the same buffer
// (GRH room and message), as mckey does.
func (t *test) postRecvs(n *node) error {
	for range t.count {
		wr := verbs.RecvWR{ID: uint64(n.id), SGL: []verbs.SGE{n.mr.SGE(0, uint64(t.cfg.size+verbs.GRHLen))}}
		if err := n.qp.PostRecv(wr); err != nil {
			return err
		}
	}
	return nil
}

// join is rdma_join_multicast_ex from the address the group resolved to.
// Over RoCEv2 the kernel's rdma_cm joins AF_INET groups only: -M's GID
// (AF_IB) is ENOTSUPP even when it maps an IPv4 group, which vrnicd's
// would join, so that one is refused here; an IPv6 group the daemon
// refuses itself.
func (t *test) join(n *node) (err error) {
	if t.cfg.unmapped && t.dst.Is4In6() {
		return errENOTSUPP
	}
	n.group, err = t.dev.JoinMulticast(t.dst, verbs.JoinOptions{Src: n.resolved, SendOnly: t.cfg.sendOnly})
	return err
}

// joinHandler is the MULTICAST_JOIN event: librdmacm attaches the QP to
// the group (not a send-only member's; a failure makes the event
// MULTICAST_ERROR), then join_handler prints the group and makes the
// address handle of the sends.
func (t *test) joinHandler(n *node) int {
	g := n.group
	if !g.SendOnly {
		if err := n.qp.AttachMcast(g.MGID); err != nil {
			t.printf("mckey: event: RDMA_CM_EVENT_MULTICAST_ERROR, error: %d\n", -int(verbsock.ErrnoOf(err)))
			return -int(verbsock.ErrnoOf(err))
		}
		n.attached = true
	}
	// RoCE has no LIDs: the mlid is 0, as the kernel's event has it.
	t.printf("mckey: joined dgid: %s mlid 0x%x sl %d\n", netip.AddrFrom16(g.AH.DGID), 0, g.AH.SL)
	var err error
	if n.ah, err = n.pd.CreateAH(g.AH); err != nil {
		t.printf("mckey: failure creating address handle\n")
		return -1
	}
	n.remoteQPN, n.remoteQKey, n.connected = g.QPN, g.QKey, true
	return 0
}

// postSends posts message_count unsignaled SEND_WITH_IMMs to the group,
// the immediate data our QP's number.
func (t *test) postSends(n *node) error {
	if !n.connected || t.count == 0 {
		return nil
	}
	wr := verbs.SendWR{ID: uint64(n.id), Opcode: verbs.WRSendWithImm, ImmData: n.qp.QPN(), AH: n.ah,
		RemoteQPN: n.remoteQPN, RemoteQKey: n.remoteQKey, SGL: []verbs.SGE{n.mr.SGE(0, uint64(t.cfg.size))}}
	for range t.count {
		if err := n.qp.PostSend(wr); err != nil {
			return err
		}
	}
	return nil
}

// pollCQs is poll_cqs: message_count completions, whatever their status,
// on every joined node's CQ.
func (t *test) pollCQs(ctx context.Context) error {
	for _, n := range t.nodes {
		if !n.connected {
			continue
		}
		if err := t.pollNode(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

func (t *test) pollNode(ctx context.Context, n *node) error {
	wc := make([]verbs.WC, 8)
	for done := 0; done < t.count; {
		if got := n.cq.Poll(wc[:min(len(wc), t.count-done)]); got > 0 {
			done += got
			continue
		}
		// mckey spins; on a machine whose cores the daemon shares, sleep
		// on the CQ's event instead (arm, then look once more).
		if err := n.cq.ReqNotify(false); err != nil {
			return err
		}
		if n.cq.Poll(wc[:0]) == 0 {
			wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			_ = n.cq.WaitEvent(wctx)
			cancel()
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// bind is rdma_bind_addr's check of -b: an address of the device's
// (EADDRNOTAVAIL otherwise).
func (t *test) bind() error {
	p, err := t.dev.QueryPort(1)
	if err != nil {
		return err
	}
	for i := range int(p.GIDTblLen) {
		if g, err := t.dev.QueryGID(1, i); err == nil && !g.IsZero() && g.Addr() == t.src {
			return nil
		}
	}
	return syscall.EADDRNOTAVAIL
}

// leave is rdma_leave_multicast: the QP leaves the group, then the join
// ends; a node without a join has nothing to leave (librdmacm's
// EADDRNOTAVAIL).
func (t *test) leave(n *node) error {
	if n.group == nil {
		return syscall.EADDRNOTAVAIL
	}
	if n.attached {
		_ = n.qp.DetachMcast(n.group.MGID)
		n.attached = false
	}
	err := n.group.Leave()
	n.group = nil
	return err
}

// destroy is destroy_nodes: each node's objects in mckey's order (a join
// still held goes with its id), then the device
// (rdma_destroy_event_channel).
func (t *test) destroy() {
	for _, n := range t.nodes {
		cmtool.Release(n.ah, n.qp, []*verbs.CQ{n.cq}, n.mr, n.pd)
		if n.group != nil {
			_ = n.group.Leave()
		}
	}
	if t.dev != nil {
		_ = t.dev.Close()
	}
}

// strerror is glibc's text for err's errno ("Unknown error 524" for one
// it has none for; "Success" for none at all); err's own text if it
// carries no errno.
func strerror(err error) string {
	var e syscall.Errno
	switch {
	case err == nil:
		return "Success"
	case !errors.As(err, &e):
		return err.Error()
	}
	s := e.Error()
	if strings.HasPrefix(s, "errno ") {
		return fmt.Sprintf("Unknown error %d", int(e))
	}
	r := []rune(s)
	r[0] = unicode.ToUpper(r[0])
	return string(r)
}
