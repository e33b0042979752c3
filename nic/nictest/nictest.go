// Package nictest builds devices joined by an in-memory link for tests of the
// layers above nic: two nic.Devices, each with its own netstack, over a
// link.Pipe, with real datapath workers and the system clock.
package nictest

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/nic/gid"
	"github.com/vrnic/vrnicd/nic/link"
	"github.com/vrnic/vrnicd/nic/netstack"
	"github.com/vrnic/vrnicd/transport"
)

// Host is one device on the pipe.
type Host struct {
	Dev   *nic.Device
	Stack *netstack.Stack
	Addr  netip.Addr
	GIDs  *gid.Table
	// Link is the host's end of the pipe (SetHook impairs what it sends).
	Link *link.PipeEnd
}

// GIDIndex is the index of the host's IPv4-mapped GID (1, as in rxe).
func (h *Host) GIDIndex() uint8 {
	i, _ := h.GIDs.IndexOf(h.Addr)
	return uint8(i)
}

// GID is the host's IPv4-mapped GID.
func (h *Host) GID() [16]byte { return gid.FromAddr(h.Addr) }

// Pair makes two hosts, 192.0.2.1 and 192.0.2.2, on a pipe of the given MTU,
// and stops everything when the test ends. Their workers busy-poll as
// vrnicd's do by default (nic.DefaultBusyPoll), so tests and benchmarks run
// the daemon's datapath as configured.
func Pair(t testing.TB, mtu int) (*Host, *Host) {
	t.Helper()
	return PairLimits(t, mtu, nic.Limits{})
}

// PairLimits is Pair with the devices' limits set (zero fields: defaults).
func PairLimits(t testing.TB, mtu int, lim nic.Limits) (*Host, *Host) {
	t.Helper()
	return pair(t, mtu, lim, false)
}

// PairReaderGoroutine is Pair with each device served by its netstack's
// reader goroutine (Stack.Run calling Device.Deliver) instead of its
// worker polling the link: vrnicd's mode for a link that cannot be polled.
func PairReaderGoroutine(t testing.TB, mtu int) (*Host, *Host) {
	t.Helper()
	return pair(t, mtu, nic.Limits{}, true)
}

// pair makes the hosts. As vrnicd does (startReceive), each device's
// worker reads its end of the pipe itself, in the link's buffer (run to
// completion), unless reader asks for the netstack's reader goroutine.
func pair(t testing.TB, mtu int, lim nic.Limits, reader bool) (*Host, *Host) {
	t.Helper()
	CheckGoroutines(t)
	ea, eb := link.Pipe(mtu)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	hosts := make([]*Host, 2)
	for i, l := range []*link.PipeEnd{ea, eb} {
		addr := netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)})
		gids := gid.New(l.HardwareAddr(), 0)
		name := "vrnic" + string(rune('0'+i))
		dev, err := nic.NewDevice(nic.Config{Name: name, MAC: l.HardwareAddr(), LinkMTU: mtu, GIDs: gids, BusyPoll: nic.DefaultBusyPoll,
			Limits: lim, Log: TestLog(t, name)})
		if err != nil {
			t.Fatal(err)
		}
		st, err := netstack.New(netstack.Config{Link: l, Mode: netstack.ModeTAP, Addrs: []netip.Prefix{netip.PrefixFrom(addr, 24)},
			Deliver: dev.Deliver, OnAddrs: func(a []netip.Addr) { _ = gids.Sync(a) }})
		if err != nil {
			t.Fatal(err)
		}
		dev.Attach(st)
		if err := startReceive(dev, st, reader); err != nil {
			t.Fatal(err)
		}
		if reader {
			wg.Add(1)
			go func() { defer wg.Done(); _ = st.Run(ctx) }()
		}
		hosts[i] = &Host{Dev: dev, Stack: st, Addr: addr, GIDs: gids, Link: l}
	}
	t.Cleanup(func() {
		for _, h := range hosts {
			_ = h.Dev.Close()
		}
		cancel()
		wg.Wait()
		for _, h := range hosts {
			_ = h.Stack.Close()
		}
	})
	return hosts[0], hosts[1]
}

// startReceive attaches the stack's poller to the device's worker, as
// vrnicd does, unless reader (the reader goroutine serves it then).
func startReceive(dev *nic.Device, st *netstack.Stack, reader bool) error {
	if reader {
		return nil
	}
	p, ok := st.RxPoller()
	if !ok {
		return errors.New("nictest: the pipe cannot be polled")
	}
	return dev.AttachPoller(0, p, func(error) {})
}

// ConnectRC brings two QPs (already created, in RESET) to RTS against each
// other with rc_pingpong's attributes and full remote access.
func ConnectRC(a, b *nic.QP, ha, hb *Host, typ transport.QPType, mtu transport.MTU) error {
	for _, s := range []struct {
		q, peer *nic.QP
		h, ph   *Host
		psn     uint32
	}{{a, b, ha, hb, 0x100}, {b, a, hb, ha, 0x200}} {
		access := transport.AttrState | transport.AttrPKeyIndex | transport.AttrPort | transport.AttrAccessFlags
		attr := transport.QPAttr{State: transport.StateInit, Port: 1, AccessFlags: 0xF | 1<<8}
		if err := s.q.Modify(&attr, access); err != nil {
			return err
		}
		attr = transport.QPAttr{State: transport.StateRTR, PathMTU: mtu, DestQPN: s.peer.QPN(), RQPSN: 0x300 - s.psn,
			MaxDestRdAtomic: 16, MinRNRTimer: 12,
			AV: transport.AddressVector{DGID: s.ph.GID(), SGIDIndex: s.h.GIDIndex(), HopLimit: 64, Port: 1}}
		mask := transport.AttrState | transport.AttrAV | transport.AttrPathMTU | transport.AttrDestQPN | transport.AttrRQPSN
		if typ == transport.QPTypeRC {
			mask |= transport.AttrMaxDestRdAtomic | transport.AttrMinRNRTimer
		}
		if err := s.q.Modify(&attr, mask); err != nil {
			return err
		}
	}
	for _, s := range []struct {
		q   *nic.QP
		psn uint32
	}{{a, 0x100}, {b, 0x200}} {
		attr := transport.QPAttr{State: transport.StateRTS, SQPSN: s.psn, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}
		mask := transport.AttrState | transport.AttrSQPSN
		if typ == transport.QPTypeRC {
			mask |= transport.AttrTimeout | transport.AttrRetryCnt | transport.AttrRNRRetry | transport.AttrMaxQPRdAtomic
		}
		if err := s.q.Modify(&attr, mask); err != nil {
			return err
		}
	}
	return nil
}
