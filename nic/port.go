package nic

import (
	"maps"
	"slices"
	"sync/atomic"

	"github.com/vrnic/vrnicd/transport"
)

// linkState is the port's view of its link, set by whoever watches the
// link (vrnicd: a netlink watch) and read by queries and the datapath.
// Until it is told otherwise a port is up: in-memory links have no state.
type linkState struct {
	down     atomic.Bool  // the port is DOWN (admin down or no carrier)
	adminOff atomic.Bool  // the interface is administratively down
	linkMTU  atomic.Int32 // the interface's MTU
	mtu      atomic.Uint32
}

func (l *linkState) init(linkMTU int) {
	l.linkMTU.Store(int32(linkMTU))
	l.mtu.Store(uint32(transport.MTUForNetdev(linkMTU)))
}

// Port states and physical states of ibv_port_attr.
const (
	portDown     = 1 // IBV_PORT_DOWN
	portActive   = 4 // IBV_PORT_ACTIVE
	physPolling  = 2 // up, no carrier: looking for a link
	physDisabled = 3 // administratively down
	physLinkUp   = 5
)

// portState is the port's state and physical state: DOWN until a port is
// attached; then as kernel rxe reports it, ACTIVE and LINK_UP while the
// link is up, else DOWN and POLLING (no carrier) or DISABLED (admin down).
func (d *Device) portState() (state, phys int) {
	switch {
	case d.port.Load() == nil:
		return portDown, physDisabled
	case !d.link.down.Load():
		return portActive, physLinkUp
	case d.link.adminOff.Load():
		return portDown, physDisabled
	}
	return portDown, physPolling
}

// PortActive reports whether the port is ACTIVE.
func (d *Device) PortActive() bool {
	st, _ := d.portState()
	return st == portActive
}

// SetLinkState records the link's state: up (frames flow) or down, and
// down because it is administratively so (else: no carrier). It reports
// whether the port's state changed between DOWN and ACTIVE, the change
// clients hear of (PORT_ERR, PORT_ACTIVE). QPs are left as they are: an
// RC requester's retransmissions run on their own timer and retry count
// through an outage, as over a lossy link.
func (d *Device) SetLinkState(up, adminUp bool) (changed bool) {
	d.link.adminOff.Store(!adminUp)
	return d.link.down.Swap(!up) != !up
}

// ActiveMTU is the port's active MTU: the largest IBA MTU a RoCEv2 packet
// fits the link's MTU with (kernel rxe's rxe_set_mtu).
func (d *Device) ActiveMTU() transport.MTU { return transport.MTU(d.link.mtu.Load()) }

// LinkMTU is the link's MTU the port last heard of.
func (d *Device) LinkMTU() int { return int(d.link.linkMTU.Load()) }

// SetLinkMTU follows the link's MTU: the active MTU becomes the one that
// fits, for QPs modified from now on (a path MTU above it is refused, as
// kernel rxe refuses it). It returns the active MTU before and after.
func (d *Device) SetLinkMTU(linkMTU int) (before, after transport.MTU) {
	d.link.linkMTU.Store(int32(linkMTU))
	after = transport.MTUForNetdev(linkMTU)
	return transport.MTU(d.link.mtu.Swap(uint32(after))), after
}

// FailQPs moves every QP to the error state, its work requests flushed to
// its CQs (IBV_WC_WR_FLUSH_ERR), as when the device is lost: the link's
// interface was deleted. It returns how many QPs it moved.
func (d *Device) FailQPs() int {
	d.mu.RLock()
	qps := slices.Collect(maps.Values(d.qps))
	d.mu.RUnlock()
	n := 0
	for _, q := range qps {
		if q.tq.State() == transport.StateErr {
			continue
		}
		if q.Modify(&transport.QPAttr{State: transport.StateErr}, transport.AttrState) == nil {
			q.NotifySend() // the worker flushes what is posted
			q.NotifyRecv()
			n++
		}
	}
	return n
}
