package link

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// v2FrameSize is the TPACKET_V2 slot for one frame of an mtu-byte IP
// packet: the header, the sockaddr_ll the kernel puts after it, room for
// the kernel's alignment of the network header, and the frame.
func v2FrameSize(mtu int) int {
	hdr := (unix.SizeofTpacket2Hdr+unix.TPACKET_ALIGNMENT-1)&^(unix.TPACKET_ALIGNMENT-1) + unix.SizeofSockaddrLinklayer
	n := hdr + 16 + EthernetHeaderLen + mtu
	return (n + unix.TPACKET_ALIGNMENT - 1) &^ (unix.TPACKET_ALIGNMENT - 1)
}

// v2Ring is the reader's side of a TPACKET_V2 receive ring: frameNr slots
// of frameSize bytes, frames per block never straddling a block. A slot is
// the reader's while its tp_status has TP_STATUS_USER; the reader gives it
// back (TP_STATUS_KERNEL) once the frame is consumed.
type v2Ring struct {
	mem       []byte
	blockSize int
	frameSize int
	perBlock  int
	frameNr   int
	cur       int
	truncated atomic.Uint64 // frames cut to the slot (RawStats.Truncated)
}

func setupV2(fd int, c RingConfig) (rxRing, error) {
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V2); err != nil {
		return nil, fmt.Errorf("PACKET_VERSION TPACKET_V2: %w", err)
	}
	fs := v2FrameSize(c.MaxPacket)
	per := c.BlockSize / fs
	req := unix.TpacketReq{
		Block_size: uint32(c.BlockSize),
		Block_nr:   uint32(c.BlockCount),
		Frame_size: uint32(fs),
		Frame_nr:   uint32(per * c.BlockCount),
	}
	if err := unix.SetsockoptTpacketReq(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		return nil, fmt.Errorf("PACKET_RX_RING: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, c.BlockSize*c.BlockCount, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mmap ring: %w", err)
	}
	return &v2Ring{mem: mem, blockSize: c.BlockSize, frameSize: fs, perBlock: per, frameNr: per * c.BlockCount}, nil
}

func (g *v2Ring) unmap() {
	if g.mem != nil {
		_ = unix.Munmap(g.mem)
		g.mem = nil
	}
}

// slot is slot i's bytes.
func (g *v2Ring) slot(i int) []byte {
	off := i/g.perBlock*g.blockSize + i%g.perBlock*g.frameSize
	return g.mem[off : off+g.frameSize : off+g.frameSize]
}

func (g *v2Ring) status(s []byte) *uint32 { return (*uint32)(unsafe.Pointer(&s[0])) }

func (g *v2Ring) ready() bool {
	return atomic.LoadUint32(g.status(g.slot(g.cur)))&unix.TP_STATUS_USER != 0
}

// frames implements rxRing; each slot is given back right after fn.
func (g *v2Ring) frames(max int, fn func(frame []byte)) int {
	n := 0
	for n < max {
		s := g.slot(g.cur)
		st := atomic.LoadUint32(g.status(s))
		if st&unix.TP_STATUS_USER == 0 {
			break
		}
		h := (*unix.Tpacket2Hdr)(unsafe.Pointer(&s[0]))
		start, end := int(h.Mac), int(h.Mac)+int(h.Snaplen)
		switch {
		case h.Snaplen < h.Len: // longer than MaxPacket: cut
			g.truncated.Add(1)
		case start <= end && end <= len(s) && useFrame(s[start:end:end], st, fn):
			n++
		}
		atomic.StoreUint32(g.status(s), unix.TP_STATUS_KERNEL)
		g.cur = (g.cur + 1) % g.frameNr
	}
	return n
}
