package nic

import (
	"time"

	"github.com/vrnic/vrnicd/transport"
)

// Linger is how long a destroyed RC QP goes on acknowledging duplicates of
// requests it had taken (transport.ClosedQP): several retransmit timeouts
// of a peer at perftest's and rdma-core's timeout 14 (67 ms), and two at
// timeout 20 (4.3 s).
const Linger = 10 * time.Second

// maxLingering bounds the destroyed QPs kept; past it a destroyed QP goes
// at once, as it would without lingering.
const maxLingering = 4096

type lingerQP struct {
	c     transport.ClosedQP
	until time.Time
}

// linger keeps what a destroyed QP leaves behind.
// +checklocks:d.mu
func (d *Device) linger(c transport.ClosedQP) {
	now := d.clock.Now()
	if len(d.lingering) >= maxLingering {
		for n, l := range d.lingering {
			if !now.Before(l.until) {
				delete(d.lingering, n)
			}
		}
		if len(d.lingering) >= maxLingering {
			return
		}
	}
	d.lingering[c.QPN] = lingerQP{c: c, until: now.Add(Linger)}
}

// answerClosed lets a lingering QP answer a packet to its QPN; false: no
// such QP, or nothing to answer.
func (d *Device) answerClosed(qpn uint32, p *transport.RxPacket) bool {
	d.mu.RLock()
	l, ok := d.lingering[qpn]
	d.mu.RUnlock()
	if !ok || !d.clock.Now().Before(l.until) {
		return false
	}
	if !l.c.Answer(p, &d.out) {
		return false
	}
	d.ctr.Inc(transport.ClosedQPAcks)
	return true
}
