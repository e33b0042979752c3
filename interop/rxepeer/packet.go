package rxepeer

import (
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// PacketConn is a raw AF_PACKET socket on one device of a namespace: it
// sends whole Ethernet frames and sees every frame the device sends or
// receives, which makes a capture point on a bridge. It is for tests (one
// frame per system call); vrnicd's own raw link lives in nic/link.
type PacketConn struct {
	fd      int
	ifindex int
	vnet    bool             // frames carry a virtio_net_hdr in front
	MAC     net.HardwareAddr // the device's address
}

// vnetHdrLen is the size of struct virtio_net_hdr (PACKET_VNET_HDR).
const vnetHdrLen = 10

// PacketSocket opens a PacketConn on dev inside the namespace.
func (n *Netns) PacketSocket(dev string) (*PacketConn, error) { return n.packetSocket(dev, false) }

// packetSocket with vnet: every frame read or sent starts with a
// virtio_net_hdr, which carries checksum-offload and GSO state across. A
// forwarder needs it: frames from a TAP or veth often hold only a partial
// TCP/UDP checksum (the device was to finish it), which a plain raw socket
// would pass on as a bad one, and GSO frames above the MTU.
func (n *Netns) packetSocket(dev string, vnet bool) (*PacketConn, error) {
	var p *PacketConn
	err := n.Do(func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return fmt.Errorf("rxepeer: AF_PACKET socket: %w", err)
		}
		// Room for bursts: a capture that falls behind loses frames silently.
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20) != nil {
			_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
		}
		if vnet {
			if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
				unix.Close(fd)
				return fmt.Errorf("rxepeer: PACKET_VNET_HDR: %w", err)
			}
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("rxepeer: bind AF_PACKET to %s: %w", dev, err)
		}
		p = &PacketConn{fd: fd, ifindex: ifi.Index, vnet: vnet, MAC: ifi.HardwareAddr}
		return nil
	})
	return p, err
}

// Send transmits one Ethernet frame (destination MAC first) on the device.
func (p *PacketConn) Send(frame []byte) error {
	eth := frame
	if p.vnet {
		if len(frame) < vnetHdrLen {
			return errors.New("rxepeer: frame shorter than its virtio_net_hdr")
		}
		eth = frame[vnetHdrLen:]
	}
	if len(eth) < 14 {
		return errors.New("rxepeer: frame shorter than an Ethernet header")
	}
	sa := &unix.SockaddrLinklayer{Ifindex: p.ifindex, Halen: 6, Protocol: htons(uint16(eth[12])<<8 | uint16(eth[13]))}
	copy(sa.Addr[:], eth[:6])
	return unix.Sendto(p.fd, frame, 0, sa)
}

// Recv returns the next frame seen on the device and whether the device
// sent it (rather than received it), waiting at most timeout.
func (p *PacketConn) Recv(buf []byte, timeout time.Duration) (n int, outgoing bool, err error) {
	if timeout <= 0 {
		return 0, false, unix.EAGAIN
	}
	tv := unix.NsecToTimeval(timeout.Nanoseconds())
	if tv.Sec == 0 && tv.Usec == 0 {
		tv.Usec = 1
	}
	if err := unix.SetsockoptTimeval(p.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return 0, false, err
	}
	for {
		n, from, err := unix.Recvfrom(p.fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, false, err
		}
		ll, _ := from.(*unix.SockaddrLinklayer)
		return n, ll != nil && ll.Pkttype == unix.PACKET_OUTGOING, nil
	}
}

// Close closes the socket.
func (p *PacketConn) Close() error { return unix.Close(p.fd) }

func htons(v uint16) uint16 { return v<<8 | v>>8 }
