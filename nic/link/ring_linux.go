package link

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// RingConfig sizes a PACKET_MMAP receive ring (RawConfig.Ring).
//
// TPACKET_V3 (Version 3, the default): the kernel fills one block at a
// time with frames packed back to back and hands the block to user space
// when it is full or when RetireTimeout has passed since its first frame.
// A frame in a block that is neither full nor retired is not visible yet:
// under a light load every frame waits up to RetireTimeout (a 1 ms timeout
// makes a ping-pong's half round trip about 0.5 ms). It is the ring for
// throughput: the fewest wake-ups, the densest memory.
//
// TPACKET_V2 (Version 2): one fixed slot per frame, sized for the MTU,
// each handed over (and the reader woken) as soon as the frame is in it:
// no added latency, still no system call per frame, more memory per frame.
// It suits a worker that must answer at once.
type RingConfig struct {
	// Version is 3 (TPACKET_V3, default) or 2 (TPACKET_V2).
	Version int
	// BlockSize is the size of one block in bytes: a power of two, at
	// least one page and large enough for one frame of the interface's
	// MTU; default 256 KiB.
	BlockSize int
	// BlockCount is the number of blocks, 2..4096; default 16.
	BlockCount int
	// RetireTimeout (TPACKET_V3 only) is how long the kernel keeps a
	// partly filled block before handing it over, in whole milliseconds,
	// 1 ms..10 s; default 1 ms.
	RetireTimeout time.Duration
	// MaxPacket (TPACKET_V2 only) is the longest packet after the Ethernet
	// header that a slot must hold whole (its alignment may fit a few bytes
	// more); 0: the MTU. It may exceed the MTU: the interface's MTU can
	// grow under a running reader (the slots are not resized). A
	// reader that knows its frames are short (RoCEv2 never exceeds
	// MaxRoCEPacket) gets more slots from the same memory; a longer frame
	// arrives cut, and the reader drops it (RawStats.Truncated).
	MaxPacket int
	// Frames (TPACKET_V2 only), if not 0, is the number of slots the ring
	// must have: BlockCount, if 0, becomes the fewest blocks that hold
	// them. The ring is the only buffer between the wire and a reader
	// that is not running: a sender with more frames in flight than it
	// has slots loses frames to it.
	Frames int
}

// MaxRoCEPacket is the longest RoCEv2 packet after the Ethernet header:
// IPv6 (40) + UDP (8) + BTH (12) + the longest extension headers (RETH 16,
// or DETH 8 + ImmDt 4; AtomicETH 28 carries no payload) + 4096 bytes of
// payload (the largest path MTU) + ICRC (4), rounded up.
const MaxRoCEPacket = 4096 + 128

// Ring limits.
const (
	ringMaxBytes  = 1 << 30 // BlockSize × BlockCount
	ringMaxBlocks = 4096
	// ringFrameSize is tp_frame_size: TPACKET_V3 only checks it (frames
	// are packed to their real size), so any aligned value that divides
	// the block does.
	ringFrameSize = 2048
)

func (c *RingConfig) setDefaults(mtu int) error {
	if c.Version == 0 {
		c.Version = 3
	}
	if c.Version != 2 && c.Version != 3 {
		return fmt.Errorf("ring version %d: want 2 (TPACKET_V2) or 3 (TPACKET_V3)", c.Version)
	}
	if c.BlockSize == 0 {
		c.BlockSize = 256 << 10
	}
	if c.RetireTimeout == 0 {
		c.RetireTimeout = time.Millisecond
	}
	if c.MaxPacket <= 0 {
		c.MaxPacket = mtu
	}
	page := os.Getpagesize()
	need := int(unsafe.Sizeof(unix.TpacketBlockDesc{})) + unix.SizeofTpacket3Hdr + 16 + EthernetHeaderLen + mtu
	if c.Version == 2 {
		need = v2FrameSize(c.MaxPacket)
	}
	if c.Frames < 0 {
		return fmt.Errorf("ring of %d frames", c.Frames)
	}
	if c.Version == 2 && c.Frames > 0 && c.BlockCount == 0 && c.BlockSize >= need {
		per := c.BlockSize / need
		c.BlockCount = max((c.Frames+per-1)/per, 2)
		if c.BlockCount > ringMaxBlocks || c.BlockSize*c.BlockCount > ringMaxBytes {
			return fmt.Errorf("ring of %d frames of %d bytes exceeds %d blocks or %d bytes", c.Frames, need, ringMaxBlocks, ringMaxBytes)
		}
	}
	if c.BlockCount == 0 {
		c.BlockCount = 16
	}
	switch {
	case c.BlockSize < page || c.BlockSize&(c.BlockSize-1) != 0:
		return fmt.Errorf("ring block size %d is not a power of two of at least %d", c.BlockSize, page)
	case c.BlockSize < need:
		return fmt.Errorf("ring block size %d cannot hold a %d-byte frame (MTU %d)", c.BlockSize, need, mtu)
	case c.BlockCount < 2 || c.BlockCount > ringMaxBlocks:
		return fmt.Errorf("ring block count %d out of range 2..%d", c.BlockCount, ringMaxBlocks)
	case c.BlockSize*c.BlockCount > ringMaxBytes:
		return fmt.Errorf("ring of %d × %d bytes exceeds %d", c.BlockCount, c.BlockSize, ringMaxBytes)
	case c.RetireTimeout < time.Millisecond || c.RetireTimeout > 10*time.Second:
		return fmt.Errorf("ring retire timeout %v out of range 1ms..10s", c.RetireTimeout)
	}
	return nil
}

// v3Ring is the reader's side of a TPACKET_V3 receive ring. Blocks are
// owned by the kernel until their block_status has TP_STATUS_USER; the
// reader walks the frames of the current block and gives the block back
// (TP_STATUS_KERNEL) once it has consumed all of them. Only one goroutine
// reads at a time.
type v3Ring struct {
	mem       []byte
	blockSize int
	blocks    int

	cur  int // index of the block being read
	open bool
	left int // frames left in the open block
	off  int // offset of the next frame in the open block
}

// blockStatusOff and friends are offsets of tpacket_hdr_v1's fields in a
// tpacket_block_desc (version, offset_to_priv, then the header).
const (
	blockHdrOff    = 8
	blockStatusOff = blockHdrOff + 0
	blockNumOff    = blockHdrOff + 4
	blockFirstOff  = blockHdrOff + 8
)

// rxRing is a receive ring of either version, read by one goroutine.
type rxRing interface {
	// ready reports whether a frame can be read without waiting.
	ready() bool
	// frames passes up to max frames to fn, applying auxdata semantics:
	// VLAN-tagged frames are skipped, partial UDP checksums finished in
	// place. Ring space is given back after fn returns.
	frames(max int, fn func(frame []byte)) int
	unmap()
}

// setupRing switches fd to the ring's TPACKET version and maps a receive
// ring. It must run before bind so no frame takes the recvmsg path.
func setupRing(fd int, c RingConfig, mtu int) (rxRing, error) {
	if c.Version == 2 {
		return setupV2(fd, c)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V3); err != nil {
		return nil, fmt.Errorf("PACKET_VERSION TPACKET_V3: %w", err)
	}
	req := unix.TpacketReq3{
		Block_size:     uint32(c.BlockSize),
		Block_nr:       uint32(c.BlockCount),
		Frame_size:     ringFrameSize,
		Frame_nr:       uint32(c.BlockSize / ringFrameSize * c.BlockCount),
		Retire_blk_tov: uint32(c.RetireTimeout / time.Millisecond),
	}
	if err := unix.SetsockoptTpacketReq3(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		return nil, fmt.Errorf("PACKET_RX_RING: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, c.BlockSize*c.BlockCount, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mmap ring: %w", err)
	}
	return &v3Ring{mem: mem, blockSize: c.BlockSize, blocks: c.BlockCount}, nil
}

func (g *v3Ring) unmap() {
	if g.mem != nil {
		_ = unix.Munmap(g.mem)
		g.mem = nil
	}
}

// status is the block_status word of block i, read with acquire order so
// the frames the kernel wrote before it are visible.
func (g *v3Ring) status(i int) *uint32 {
	return (*uint32)(unsafe.Pointer(&g.mem[i*g.blockSize+blockStatusOff]))
}

// ready reports whether a frame can be read without waiting.
func (g *v3Ring) ready() bool {
	return g.open || atomic.LoadUint32(g.status(g.cur))&unix.TP_STATUS_USER != 0
}

// next returns the next frame and its tp_status, or ok false when the
// kernel has handed over no further frame. The frame lies in the ring and
// stays valid until the block is released: next releases a block when it
// is asked for the frame after the block's last.
func (g *v3Ring) next() (frame []byte, st uint32, ok bool) {
	for {
		if !g.open && !g.openBlock() {
			return nil, 0, false
		}
		if g.left == 0 {
			g.release()
			continue
		}
		base := g.cur * g.blockSize
		blk := g.mem[base : base+g.blockSize]
		if g.off < 0 || g.off+unix.SizeofTpacket3Hdr > len(blk) {
			g.release() // a descriptor the kernel would not write; skip the block
			continue
		}
		h := (*unix.Tpacket3Hdr)(unsafe.Pointer(&blk[g.off]))
		start, end := g.off+int(h.Mac), g.off+int(h.Mac)+int(h.Snaplen)
		g.left--
		if h.Next_offset == 0 {
			g.left = 0
		}
		g.off += int(h.Next_offset)
		if end > len(blk) || start > end {
			continue
		}
		return blk[start:end:end], h.Status, true
	}
}

// openBlock starts reading the current block if the kernel has released it.
func (g *v3Ring) openBlock() bool {
	if atomic.LoadUint32(g.status(g.cur))&unix.TP_STATUS_USER == 0 {
		return false
	}
	base := g.cur * g.blockSize
	g.left = int(*(*uint32)(unsafe.Pointer(&g.mem[base+blockNumOff])))
	g.off = int(*(*uint32)(unsafe.Pointer(&g.mem[base+blockFirstOff])))
	g.open = true
	return true
}

// release gives the open block back to the kernel and moves to the next.
func (g *v3Ring) release() {
	atomic.StoreUint32(g.status(g.cur), unix.TP_STATUS_KERNEL)
	g.open = false
	g.cur = (g.cur + 1) % g.blocks
}

// releaseDone gives back the open block if all its frames were read, so a
// reader that stops at a batch's end does not hold a finished block.
func (g *v3Ring) releaseDone() {
	if g.open && g.left == 0 {
		g.release()
	}
}

// frames implements rxRing.
func (g *v3Ring) frames(max int, fn func(frame []byte)) int {
	n := 0
	for n < max {
		f, st, ok := g.next()
		if !ok {
			break
		}
		if useFrame(f, st, fn) {
			n++
		}
	}
	g.releaseDone()
	return n
}

// useFrame applies auxdata semantics to a ring frame with status st and
// passes it to fn; it reports whether it did.
func useFrame(f []byte, st uint32, fn func([]byte)) bool {
	if st&unix.TP_STATUS_VLAN_VALID != 0 {
		return false
	}
	if st&unix.TP_STATUS_CSUMNOTREADY != 0 {
		finishUDPChecksum(f)
	}
	fn(f)
	return true
}

// errNoRing is returned by ReadRing on a Raw opened without a ring.
var errNoRing = errors.New("link: ReadRing needs RawConfig.Ring")
