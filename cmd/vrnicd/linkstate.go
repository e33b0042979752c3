package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/vrnic/vrnicd/nic/link"
	"github.com/vrnic/vrnicd/verbsock"
)

// The link's life: the port's state follows the interface's (admin state
// and carrier) and its MTU, as kernel rxe's rxe_notify has it follow the
// netdev; only the interface's deletion ends the daemon (linkLost).

// fatalFlushWait is how long a lost device leaves its clients, told
// DEVICE_FATAL and their QPs flushed, before it closes their sessions.
const fatalFlushWait = 200 * time.Millisecond

// watchLink starts following the link's interface; the state it reads at
// once is the port's before anyone is told the daemon is ready.
func (d *daemon) watchLink() error {
	idx, err := d.ifindex()
	if err != nil {
		return err
	}
	d.linkGone = make(chan struct{})
	d.watchDone = make(chan struct{})
	return link.Watch(idx, d.watchDone, d.onLinkState, func(err error) {
		select {
		case <-d.watchDone:
		default:
			d.log.Warn("link watch: netlink subscription failed; subscribing again", "err", err)
		}
	})
}

func (d *daemon) ifindex() (int, error) {
	if r, ok := d.lnk.(*link.Raw); ok {
		return r.Ifindex(), nil
	}
	l, err := netlink.LinkByName(d.lnk.Name())
	if err != nil {
		return 0, fmt.Errorf("interface %s: %w", d.lnk.Name(), err)
	}
	return l.Attrs().Index, nil
}

// onLinkState applies one state of the interface (from the watch's
// goroutine): MTU, port state, or the interface gone.
func (d *daemon) onLinkState(s link.State) {
	if s.Gone {
		close(d.linkGone)
		return
	}
	d.followMTU(s.MTU)
	if !d.dev.SetLinkState(s.Up(), s.AdminUp) {
		return
	}
	d.st.SetLinkUp(s.Up())
	if !d.ready.Load() {
		if !s.Up() {
			d.log.Warn("port DOWN: the interface is "+s.String()+"; RoCE traffic flows once it is up", "iface", d.lnk.Name())
		}
		return
	}
	if s.Up() {
		d.log.Info("port ACTIVE: the interface is up", "iface", d.lnk.Name())
		d.sess.srv.Broadcast(verbsock.EventPortActive, 1)
		return
	}
	d.log.Warn("port DOWN: the interface is "+s.String()+"; QPs wait for it (RC retransmits on its timer and retry count)", "iface", d.lnk.Name())
	d.sess.srv.Broadcast(verbsock.EventPortErr, 1)
}

// mtuSetter is a link that follows its interface's MTU (Raw, TAP).
type mtuSetter interface{ SetMTU(int) }

// followMTU gives a new interface MTU to the link (which the netstack
// sends within) and the port (whose active MTU new QPs take; kernel rxe
// sends no event for it).
func (d *daemon) followMTU(mtu int) {
	old := d.dev.LinkMTU()
	if mtu == old || mtu <= 0 {
		return
	}
	if m, ok := d.lnk.(mtuSetter); ok {
		m.SetMTU(mtu)
	}
	for _, r := range d.more {
		r.SetMTU(mtu)
	}
	before, after := d.dev.SetLinkMTU(mtu)
	d.log.Info("interface MTU changed; the port follows", "iface", d.lnk.Name(), "mtu", mtu, "was", old,
		"active_mtu", after.Bytes(), "active_mtu_was", before.Bytes())
}

// linkLost ends the daemon because its interface is gone: clients hear
// DEVICE_FATAL, every QP goes to the error state with its work requests
// flushed, and the daemon exits non-zero.
func (d *daemon) linkLost(why error, runEnded bool) int {
	d.log.Error("the interface is gone; the device is lost and vrnicd stops", "iface", d.lnk.Name(), "err", why)
	d.sess.srv.Broadcast(verbsock.EventDeviceFatal, 0)
	n := d.dev.FailQPs()
	d.log.Info("QPs moved to the error state", "qps", n)
	time.Sleep(fatalFlushWait)
	return d.shutdown("interface gone", exitFail, runEnded)
}

var errIfaceDeleted = errors.New("deleted (or moved to another network namespace)")
