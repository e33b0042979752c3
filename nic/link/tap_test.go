package link_test

import (
	"errors"
	"net"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/vrnic/vrnicd/nic/link"
	"github.com/vrnic/vrnicd/nic/link/linktest"
)

// openTAPIn runs OpenTAP on a thread inside ns, where the TAP must live.
func openTAPIn(ns *linktest.NS, cfg link.TAPConfig) (*link.TAP, error) {
	var tap *link.TAP
	err := ns.Do(func() (err error) {
		tap, err = link.OpenTAP(cfg)
		return err
	})
	return tap, err
}

// tuntapIn returns ns's interface name, failing the test unless it is a
// TUN/TAP.
func tuntapIn(t *testing.T, h *netlink.Handle, name string) *netlink.Tuntap {
	t.Helper()
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	tt, ok := l.(*netlink.Tuntap)
	if !ok {
		t.Fatalf("%s is a %s, want a TAP", name, l.Type())
	}
	return tt
}

// A persistent TAP an administrator made (ip tuntap add, an address, an
// MTU of its own) is attached to, keeps its MTU unless one is asked for,
// and outlives Close persistent and with its address; a second opener
// while it is held gets EBUSY without touching its persist flag.
func TestTAPAdoptsPersistent(t *testing.T) {
	linktest.RequireRoot(t)
	ns := linktest.NewNS(t, "tpa")
	h := ns.Netlink(t)
	name := linktest.UniqueName("pt")
	ns.Exec(t, "ip", "tuntap", "add", name, "mode", "tap")
	ns.Exec(t, "ip", "link", "set", name, "mtu", "1380")
	ns.Exec(t, "ip", "addr", "add", "192.0.2.77/24", "dev", name)

	survives := func(t *testing.T, mtu int) {
		t.Helper()
		tt := tuntapIn(t, h, name)
		if tt.NonPersist {
			t.Errorf("%s lost its persist flag", name)
		}
		if tt.Attrs().MTU != mtu {
			t.Errorf("%s MTU = %d, want %d", name, tt.Attrs().MTU, mtu)
		}
		addrs, err := h.AddrList(tt, netlink.FAMILY_V4)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, a := range addrs {
			found = found || a.IPNet.String() == "192.0.2.77/24"
		}
		if !found {
			t.Errorf("%s addresses %v, want 192.0.2.77/24 among them", name, addrs)
		}
	}

	t.Run("own MTU", func(t *testing.T) {
		tap, err := openTAPIn(ns, link.TAPConfig{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		defer tap.Close()
		if !tap.Adopted() {
			t.Error("Adopted() = false for a TAP that existed")
		}
		if tap.MTU() != 1380 {
			t.Errorf("MTU() = %d, want the interface's 1380", tap.MTU())
		}
		if tt := tuntapIn(t, h, name); tt.Attrs().Flags&net.FlagUp == 0 {
			t.Errorf("%s is not up while attached", name)
		}
		survives(t, 1380)
		_, err = openTAPIn(ns, link.TAPConfig{Name: name})
		if !errors.Is(err, syscall.EBUSY) {
			t.Errorf("second OpenTAP while held: %v, want EBUSY", err)
		}
		if err := tap.Close(); err != nil {
			t.Fatal(err)
		}
		survives(t, 1380)
	})
	t.Run("MTU asked for", func(t *testing.T) {
		tap, err := openTAPIn(ns, link.TAPConfig{Name: name, MTU: 1400})
		if err != nil {
			t.Fatal(err)
		}
		if !tap.Adopted() || tap.MTU() != 1400 {
			t.Errorf("Adopted() = %v, MTU() = %d; want true, 1400", tap.Adopted(), tap.MTU())
		}
		if err := tap.Close(); err != nil {
			t.Fatal(err)
		}
		survives(t, 1400)
	})
}

// A TAP OpenTAP created is not adopted, gets MTU 1500 by default, and is
// gone after Close.
func TestTAPCreatedIsRemoved(t *testing.T) {
	linktest.RequireRoot(t)
	ns := linktest.NewNS(t, "tpc")
	h := ns.Netlink(t)
	name := linktest.UniqueName("ct")
	tap, err := openTAPIn(ns, link.TAPConfig{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if tap.Adopted() || tap.MTU() != 1500 {
		t.Errorf("Adopted() = %v, MTU() = %d; want false, 1500", tap.Adopted(), tap.MTU())
	}
	if tt := tuntapIn(t, h, name); !tt.NonPersist || tt.Attrs().MTU != 1500 {
		t.Errorf("%s: NonPersist %v, MTU %d; want true, 1500", name, tt.NonPersist, tt.Attrs().MTU)
	}
	// The TAP is held, not persistent: a second opener is refused.
	if _, err := openTAPIn(ns, link.TAPConfig{Name: name}); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("second OpenTAP while held: %v, want EBUSY", err)
	}
	if err := tap.Close(); err != nil {
		t.Fatal(err)
	}
	var nf netlink.LinkNotFoundError
	if _, err := h.LinkByName(name); !errors.As(err, &nf) {
		t.Errorf("%s after Close: %v, want it gone", name, err)
	}
}

// Interfaces that are not a single-queue TAP are refused and left alone.
func TestTAPRefusesOtherInterfaces(t *testing.T) {
	linktest.RequireRoot(t)
	ns := linktest.NewNS(t, "tpr")
	h := ns.Netlink(t)
	veth, peer := linktest.UniqueName("rv"), linktest.UniqueName("rp")
	tun, mq := linktest.UniqueName("ru"), linktest.UniqueName("rq")
	ns.Exec(t, "ip", "link", "add", veth, "type", "veth", "peer", "name", peer)
	ns.Exec(t, "ip", "tuntap", "add", tun, "mode", "tun")
	ns.Exec(t, "ip", "tuntap", "add", mq, "mode", "tap", "multi_queue")
	for _, c := range []struct {
		name  string
		inval bool // the error wraps EINVAL (not a TAP)
	}{{veth, true}, {tun, true}, {mq, false}} {
		_, err := openTAPIn(ns, link.TAPConfig{Name: c.name})
		if err == nil || errors.Is(err, syscall.EINVAL) != c.inval {
			t.Errorf("OpenTAP(%s) = %v, want an error (wrapping EINVAL: %v)", c.name, err, c.inval)
		}
		if _, err := h.LinkByName(c.name); err != nil {
			t.Errorf("%s after the refused OpenTAP: %v", c.name, err)
		}
	}
	if tt := tuntapIn(t, h, mq); tt.NonPersist {
		t.Errorf("%s lost its persist flag", mq)
	}
}
