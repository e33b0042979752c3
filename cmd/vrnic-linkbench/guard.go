package main

import (
	"errors"
	"fmt"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// dropAll is a socket filter that accepts nothing.
func dropAll() []bpf.RawInstruction {
	p, _ := bpf.Assemble([]bpf.Instruction{bpf.RetConstant{Val: 0}})
	return p
}

// openGuards binds UDP 4791 on iface with sockets that drop every datagram,
// as vrnicd does in raw mode (nic/netstack), so the receiving kernel treats
// the frames as the daemon's host does: no ICMP port unreachable, the same
// IP and UDP receive work. It runs in the receiver's namespace.
func openGuards(iface string) ([]int, error) {
	drop := dropAll()
	filter := []unix.SockFilter{{Code: drop[0].Op, K: drop[0].K}}
	prog := unix.SockFprog{Len: 1, Filter: &filter[0]}
	var fds []int
	for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
		fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			if fam == unix.AF_INET6 && errors.Is(err, unix.EAFNOSUPPORT) {
				continue
			}
			closeGuards(fds)
			return nil, err
		}
		var sa unix.Sockaddr = &unix.SockaddrInet4{Port: 4791}
		if fam == unix.AF_INET6 {
			sa = &unix.SockaddrInet6{Port: 4791}
			err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1)
		}
		if err == nil {
			err = unix.SetsockoptString(fd, unix.SOL_SOCKET, unix.SO_BINDTODEVICE, iface)
		}
		if err == nil {
			err = unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog)
		}
		if err == nil {
			err = unix.Bind(fd, sa)
		}
		if err != nil {
			unix.Close(fd)
			closeGuards(fds)
			return nil, fmt.Errorf("UDP 4791 guard on %s (is a vrnicd running there?): %w", iface, err)
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

func closeGuards(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
