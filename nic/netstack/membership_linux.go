package netstack

import (
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Raw mode's multicast membership: the kernel owns the interface, so it
// is asked to join. Each group is joined on an IP socket of the
// interface's namespace (IP_ADD_MEMBERSHIP / IPV6_JOIN_GROUP by interface
// index); the kernel then sends the IGMP/MLD reports, answers queries,
// opens its MAC filter so the AF_PACKET socket sees the group's frames,
// and leaves when the daemon dies (the sockets close).
//
// A socket holds only so many memberships (net.ipv4.igmp_max_memberships,
// 20 by default; IPv6's are bounded by option memory): a join refused with
// ENOBUFS marks its socket full and moves on to another, opening a new one
// when all are full. The sockets never receive: they are unbound (no port,
// so no datagram matches them) and carry a drop-all filter and
// IP_MULTICAST_ALL off besides.

// memberSocket is one membership socket.
type memberSocket struct {
	fd   int
	v6   bool
	n    int  // groups joined on it
	full bool // the kernel refused one more
}

// memberships is the kernel side's group → socket table, guarded by the
// stack's mcast lock (JoinGroup and LeaveGroup hold it).
type memberships struct {
	socks  []*memberSocket
	groups map[netip.Addr]*memberSocket
}

// joinGroup joins g on the interface.
func (k *kernel) joinGroup(g netip.Addr) error {
	if k.mship.groups == nil {
		k.mship.groups = map[netip.Addr]*memberSocket{}
	}
	for _, ms := range k.mship.socks {
		if ms.v6 != g.Is6() || ms.full {
			continue
		}
		err := k.membership(ms, g, true)
		if err == nil {
			k.addMember(ms, g)
			return nil
		}
		if !errors.Is(err, unix.ENOBUFS) {
			return fmt.Errorf("netstack: join %v on %s: %w", g, k.ifname, err)
		}
		ms.full = true
	}
	ms, err := k.openMemberSocket(g.Is6())
	if err != nil {
		return err
	}
	if err := k.membership(ms, g, true); err != nil {
		unix.Close(ms.fd)
		return fmt.Errorf("netstack: join %v on %s: %w", g, k.ifname, err)
	}
	k.mship.socks = append(k.mship.socks, ms)
	k.addMember(ms, g)
	return nil
}

func (k *kernel) addMember(ms *memberSocket, g netip.Addr) {
	ms.n++
	k.mship.groups[g] = ms
}

// leaveGroup drops g; a socket left with no group is closed.
func (k *kernel) leaveGroup(g netip.Addr) error {
	ms := k.mship.groups[g]
	if ms == nil {
		return nil
	}
	delete(k.mship.groups, g)
	err := k.membership(ms, g, false)
	ms.n--
	ms.full = false
	if ms.n == 0 {
		unix.Close(ms.fd)
		for i, x := range k.mship.socks {
			if x == ms {
				k.mship.socks = append(k.mship.socks[:i], k.mship.socks[i+1:]...)
				break
			}
		}
	}
	if err != nil {
		return fmt.Errorf("netstack: leave %v on %s: %w", g, k.ifname, err)
	}
	return nil
}

// closeMemberships closes every membership socket: the kernel leaves the
// groups.
func (k *kernel) closeMemberships() {
	for _, ms := range k.mship.socks {
		unix.Close(ms.fd)
	}
	k.mship = memberships{}
}

// membership adds or drops g on ms for the interface.
func (k *kernel) membership(ms *memberSocket, g netip.Addr, join bool) error {
	if g.Is4() {
		opt := unix.IP_ADD_MEMBERSHIP
		if !join {
			opt = unix.IP_DROP_MEMBERSHIP
		}
		return unix.SetsockoptIPMreqn(ms.fd, unix.IPPROTO_IP, opt,
			&unix.IPMreqn{Multiaddr: g.As4(), Ifindex: int32(k.ifindex)})
	}
	opt := unix.IPV6_JOIN_GROUP
	if !join {
		opt = unix.IPV6_LEAVE_GROUP
	}
	return unix.SetsockoptIPv6Mreq(ms.fd, unix.IPPROTO_IPV6, opt,
		&unix.IPv6Mreq{Multiaddr: g.As16(), Interface: uint32(k.ifindex)})
}

// openMemberSocket opens a membership socket in the interface's
// namespace (a socket's memberships are in the namespace it was made in).
func (k *kernel) openMemberSocket(v6 bool) (*memberSocket, error) {
	fam, level, all := unix.AF_INET, unix.IPPROTO_IP, unix.IP_MULTICAST_ALL
	if v6 {
		fam, level, all = unix.AF_INET6, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_ALL
	}
	drop, err := bpf.Assemble([]bpf.Instruction{bpf.RetConstant{Val: 0}})
	if err != nil {
		return nil, err
	}
	filter := []unix.SockFilter{{Code: drop[0].Op, K: drop[0].K}}
	prog := unix.SockFprog{Len: 1, Filter: &filter[0]}
	var fd int
	err = inNetNS(k.ns, func() (err error) {
		fd, err = unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("netstack: multicast membership socket: %w", err)
	}
	for _, o := range []struct {
		name       string
		level, opt int
		val        int
	}{
		{"IP_MULTICAST_ALL", level, all, 0},
		{"SO_RCVBUF", unix.SOL_SOCKET, unix.SO_RCVBUF, 0}, // the kernel's minimum
	} {
		if err := unix.SetsockoptInt(fd, o.level, o.opt, o.val); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("netstack: membership socket %s: %w", o.name, err)
		}
	}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netstack: membership socket filter: %w", err)
	}
	return &memberSocket{fd: fd, v6: v6}, nil
}
