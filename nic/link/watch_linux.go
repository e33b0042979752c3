package link

import (
	"errors"
	"fmt"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// State is what the kernel says about an interface: the port state a NIC
// derives from it (kernel rxe's rxe_notify: NETDEV_UP, NETDEV_DOWN, and
// NETDEV_CHANGE for the carrier) and its MTU (NETDEV_CHANGEMTU).
type State struct {
	Index   int
	AdminUp bool // IFF_UP: `ip link set X up`
	Carrier bool // IFF_LOWER_UP: a veth's peer is up, a cable is in
	MTU     int
	Gone    bool // deleted, or moved to another namespace
}

// Up reports whether frames can flow: the port is ACTIVE.
func (s State) Up() bool { return s.AdminUp && s.Carrier && !s.Gone }

func (s State) String() string {
	switch {
	case s.Gone:
		return "gone"
	case !s.AdminUp:
		return "admin down"
	case !s.Carrier:
		return "no carrier"
	}
	return "up"
}

func stateOf(l netlink.Link) State {
	a := l.Attrs()
	return State{Index: a.Index, AdminUp: a.RawFlags&unix.IFF_UP != 0,
		Carrier: a.RawFlags&unix.IFF_LOWER_UP != 0, MTU: a.MTU}
}

// LinkState reads an interface's state now.
func LinkState(name string) (State, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return State{}, fmt.Errorf("link %s: %w", name, err)
	}
	return stateOf(l), nil
}

// watchResubscribe bounds how fast a watch whose netlink subscription
// failed (its socket's buffer overran) subscribes again.
const watchResubscribe = 100 * time.Millisecond

// Watch calls fn with the state of the interface of index ifindex now and
// after every change the kernel announces, from one goroutine, until done
// is closed. A subscription that fails is made again, the state read
// afresh, so no change is missed for good. Once the interface is gone fn
// is called one last time (State.Gone) and the watch ends. onErr (may be
// nil) hears why a subscription ended.
func Watch(ifindex int, done <-chan struct{}, fn func(State), onErr func(error)) error {
	w := &watcher{index: ifindex, done: done, fn: fn, onErr: onErr}
	ch, err := w.subscribe()
	if err != nil {
		return err
	}
	go w.run(ch)
	return nil
}

type watcher struct {
	index int
	done  <-chan struct{}
	fn    func(State)
	onErr func(error)
	last  State
	seen  bool
}

// subscribe opens a subscription and reports the state as it is now
// (changes after the subscription opened come through it).
func (w *watcher) subscribe() (chan netlink.LinkUpdate, error) {
	ch := make(chan netlink.LinkUpdate, 64)
	opt := netlink.LinkSubscribeOptions{ErrorCallback: func(err error) {
		if w.onErr != nil {
			w.onErr(err)
		}
	}}
	if err := netlink.LinkSubscribeWithOptions(ch, w.done, opt); err != nil {
		return nil, fmt.Errorf("link: netlink link subscription: %w", err)
	}
	l, err := netlink.LinkByIndex(w.index)
	switch {
	case err == nil:
		w.report(stateOf(l))
	case isNotFound(err):
		w.report(State{Index: w.index, Gone: true})
	default:
		return nil, fmt.Errorf("link: interface %d: %w", w.index, err)
	}
	return ch, nil
}

func (w *watcher) run(ch chan netlink.LinkUpdate) {
	for {
		for u := range ch {
			if int(u.Index) != w.index {
				continue
			}
			if u.Header.Type == unix.RTM_DELLINK {
				w.report(State{Index: w.index, Gone: true})
				continue
			}
			w.report(stateOf(u.Link))
		}
		// The channel closed: done, or the subscription failed.
		for {
			if w.last.Gone {
				return
			}
			select {
			case <-w.done:
				return
			case <-time.After(watchResubscribe):
			}
			var err error
			if ch, err = w.subscribe(); err == nil {
				break
			}
			if w.onErr != nil {
				w.onErr(err)
			}
		}
	}
}

// report passes a state on when it differs from the last one.
func (w *watcher) report(s State) {
	if w.seen && s == w.last || w.last.Gone {
		return
	}
	w.seen, w.last = true, s
	w.fn(s)
}

func isNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV)
}
