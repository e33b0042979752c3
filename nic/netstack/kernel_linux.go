package netstack

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// kernel is raw mode's view of the kernel: the interface's addresses and
// neighbour table via netlink, and the sockets that keep UDP 4791 from
// drawing ICMP port unreachable.
type kernel struct {
	s       *Stack
	ifname  string
	ifindex int
	ns      netns.NsHandle // netns.None() for the caller's
	h       *netlink.Handle
	guards  []int
	mship   memberships // multicast groups (membership_linux.go)
	done    chan struct{}
}

func openKernel(s *Stack, ifname string, ns netns.NsHandle) (*kernel, error) {
	if ns <= 0 {
		ns = netns.None()
	}
	k := &kernel{s: s, ifname: ifname, ns: ns, done: make(chan struct{})}
	var err error
	if ns.IsOpen() {
		k.h, err = netlink.NewHandleAt(ns)
	} else {
		k.h, err = netlink.NewHandle()
	}
	if err != nil {
		return nil, fmt.Errorf("netstack: netlink: %w", err)
	}
	l, err := k.h.LinkByName(ifname)
	if err != nil {
		k.h.Close()
		return nil, fmt.Errorf("netstack: %s: %w", ifname, err)
	}
	k.ifindex = l.Attrs().Index
	if err := k.openGuards(); err != nil {
		k.close()
		return nil, err
	}
	if err := k.syncAddrs(); err != nil {
		k.close()
		return nil, err
	}
	if err := needNetAdmin(); err != nil {
		k.close()
		return nil, err
	}
	if err := k.subscribe(); err != nil {
		k.close()
		return nil, err
	}
	return k, nil
}

func (k *kernel) close() {
	select {
	case <-k.done:
	default:
		close(k.done)
	}
	for _, fd := range k.guards {
		unix.Close(fd)
	}
	k.guards = nil
	k.h.Close()
}

// inNetNS runs fn in ns (on a locked thread that is discarded afterwards),
// or directly when ns is not set.
func inNetNS(ns netns.NsHandle, fn func() error) error {
	if !ns.IsOpen() {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with us
		if err := unix.Setns(int(ns), unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// openGuards binds UDP 4791 on the interface (IPv4 and IPv6) with a socket
// filter that drops every datagram: the kernel then has a socket for the
// port and sends no ICMP port unreachable, and AF_PACKET still sees every
// frame, since packet taps run before IP.
func (k *kernel) openGuards() error {
	drop, err := bpf.Assemble([]bpf.Instruction{bpf.RetConstant{Val: 0}})
	if err != nil {
		return err
	}
	filter := []unix.SockFilter{{Code: drop[0].Op, K: drop[0].K}}
	prog := unix.SockFprog{Len: 1, Filter: &filter[0]}
	return inNetNS(k.ns, func() error {
		for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
			fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				if fam == unix.AF_INET6 && errors.Is(err, unix.EAFNOSUPPORT) {
					continue // IPv6 disabled on this host
				}
				return fmt.Errorf("netstack: UDP guard socket: %w", err)
			}
			var sa unix.Sockaddr = &unix.SockaddrInet4{Port: RoCEPort}
			if fam == unix.AF_INET6 {
				sa = &unix.SockaddrInet6{Port: RoCEPort}
				err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1)
			}
			if err == nil {
				err = unix.SetsockoptString(fd, unix.SOL_SOCKET, unix.SO_BINDTODEVICE, k.ifname)
			}
			if err == nil {
				err = unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog)
			}
			if err == nil {
				err = unix.Bind(fd, sa)
				if errors.Is(err, unix.EADDRINUSE) {
					err = fmt.Errorf("%w (is kernel rdma_rxe or another vrnicd using UDP %d on %s?)", err, RoCEPort, k.ifname)
				}
			}
			if err != nil {
				unix.Close(fd)
				return fmt.Errorf("netstack: UDP %d guard on %s: %w", RoCEPort, k.ifname, err)
			}
			k.guards = append(k.guards, fd)
		}
		return nil
	})
}

// syncAddrs reads the interface's addresses into the stack.
func (k *kernel) syncAddrs() error {
	l, err := k.h.LinkByIndex(k.ifindex)
	if err != nil {
		return fmt.Errorf("netstack: %s: %w", k.ifname, err)
	}
	as, err := k.h.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("netstack: addresses of %s: %w", k.ifname, err)
	}
	var ps []netip.Prefix
	for _, a := range as {
		if a.IPNet == nil || a.Flags&unix.IFA_F_DADFAILED != 0 {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ones, _ := a.Mask.Size()
		ip = ip.Unmap()
		if ip.IsLoopback() || ip.IsMulticast() || ip.IsUnspecified() {
			continue
		}
		ps = append(ps, netip.PrefixFrom(ip, ones))
	}
	return k.s.setAddrs(ps)
}

// needNetAdmin: asking the kernel to resolve a neighbour (RTM_NEWNEIGH
// with NTF_USE, trigger) takes CAP_NET_ADMIN; without it raw mode would
// start and then reach no peer. Refused at start instead, as EPERM.
func needNetAdmin() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("netstack: capget: %w", err)
	}
	if data[unix.CAP_NET_ADMIN/32].Effective&(1<<(unix.CAP_NET_ADMIN%32)) == 0 {
		return fmt.Errorf("netstack: kernel neighbour resolution: %w", unix.EPERM)
	}
	return nil
}

func (k *kernel) subscribe() error {
	var nsp *netns.NsHandle
	if k.ns.IsOpen() {
		nsp = &k.ns
	}
	// logErr: closing done makes the subscriptions' receive loops fail
	// (EAGAIN on the closed socket) and report it; that is a stop, not a
	// fault, and a clean shutdown logs no warning.
	logErr := func(err error) {
		select {
		case <-k.done:
			k.s.log.Debug("netlink subscription ended", "err", err)
		default:
			k.s.log.Warn("netlink subscription", "err", err)
		}
	}
	ach := make(chan netlink.AddrUpdate, 64)
	if err := netlink.AddrSubscribeWithOptions(ach, k.done, netlink.AddrSubscribeOptions{Namespace: nsp, ErrorCallback: logErr}); err != nil {
		return fmt.Errorf("netstack: address subscription: %w", err)
	}
	nch := make(chan netlink.NeighUpdate, 256)
	// Not ListExisting: its dump on the subscription socket makes every
	// other vrnicd in the namespace log "Wrong sender portid" for the
	// replies it sees (vishvananda/netlink issue 786). The table is read
	// with a request of its own once the subscription runs (an update in
	// between is seen twice, which is harmless).
	if err := netlink.NeighSubscribeWithOptions(nch, k.done, netlink.NeighSubscribeOptions{Namespace: nsp, ErrorCallback: logErr}); err != nil {
		return fmt.Errorf("netstack: neighbour subscription: %w", err)
	}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		ns, err := k.h.NeighList(k.ifindex, fam)
		if err != nil {
			return fmt.Errorf("netstack: neighbour table: %w", err)
		}
		for i := range ns {
			k.neighUpdate(false, &ns[i])
		}
	}
	go func() {
		for u := range ach {
			if u.LinkIndex == k.ifindex {
				if err := k.syncAddrs(); err != nil {
					k.s.log.Warn("address resync", "err", err)
				}
			}
		}
	}()
	go func() {
		for u := range nch {
			if u.LinkIndex == k.ifindex {
				k.neighUpdate(u.Type == unix.RTM_DELNEIGH, &u.Neigh)
			}
		}
	}()
	return nil
}

const (
	nudUsable    = netlink.NUD_REACHABLE | netlink.NUD_PERMANENT | netlink.NUD_NOARP | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE
	nudConfirmed = netlink.NUD_REACHABLE | netlink.NUD_PERMANENT | netlink.NUD_NOARP
)

// neighUpdate mirrors one kernel neighbour change into the cache.
func (k *kernel) neighUpdate(deleted bool, n *netlink.Neigh) {
	ip, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return
	}
	ip = ip.Unmap()
	if deleted || n.State&netlink.NUD_FAILED != 0 {
		k.s.neigh.forget(ip)
		return
	}
	if n.State&nudUsable == 0 || len(n.HardwareAddr) != 6 {
		return
	}
	mac := [6]byte(n.HardwareAddr)
	if n.State&nudConfirmed != 0 {
		k.s.neigh.confirm(ip, mac, true)
	} else {
		k.s.neigh.setState(ip, mac, nStale, true)
	}
}

// trigger asks the kernel to resolve ip (or re-validate a stale entry), as
// if the host had a packet for it: RTM_NEWNEIGH with NTF_USE runs
// neigh_event_send, which sends the ARP request or NS itself.
func (k *kernel) trigger(ip netip.Addr) {
	fam := netlink.FAMILY_V4
	if ip.Is6() {
		fam = netlink.FAMILY_V6
	}
	err := k.h.NeighSet(&netlink.Neigh{LinkIndex: k.ifindex, Family: fam, IP: ip.AsSlice(), Flags: netlink.NTF_USE})
	if err != nil {
		k.s.log.Warn("kernel neighbour resolution", "ip", ip, "err", err)
	}
}

// lookup reads ip's entry straight from the kernel.
func (k *kernel) lookup(ip netip.Addr) ([6]byte, bool) {
	fam := netlink.FAMILY_V4
	if ip.Is6() {
		fam = netlink.FAMILY_V6
	}
	ns, err := k.h.NeighList(k.ifindex, fam)
	if err != nil {
		return [6]byte{}, false
	}
	for _, n := range ns {
		if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == ip && n.State&nudUsable != 0 && len(n.HardwareAddr) == 6 {
			return [6]byte(n.HardwareAddr), true
		}
	}
	return [6]byte{}, false
}

// forgetUnresolved deletes the kernel's entry for ip if it holds no
// address (INCOMPLETE or FAILED), so that the next trigger creates one and
// probes at once instead of on the old entry's timer.
func (k *kernel) forgetUnresolved(ip netip.Addr) {
	fam := netlink.FAMILY_V4
	if ip.Is6() {
		fam = netlink.FAMILY_V6
	}
	ns, err := k.h.NeighList(k.ifindex, fam)
	if err != nil {
		return
	}
	for _, n := range ns {
		if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == ip &&
			n.State&(netlink.NUD_INCOMPLETE|netlink.NUD_FAILED) != 0 {
			_ = k.h.NeighDel(&n)
		}
	}
}
