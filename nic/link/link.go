// Package link moves Ethernet frames between vrnicd and the network.
//
// A Link reads and writes batches of whole Ethernet frames (no FCS), in
// wireguard-go's tun.Device shape: every frame sits at bufs[i][offset:], so a
// writer can build headers in the headroom in front of a payload without
// copying it, and a reader gets room in front of each frame for free.
//
// Three implementations:
//
//   - OpenTAP creates a TAP device (songgao/water), sets its MTU and brings
//     it up (vishvananda/netlink). vrnicd is the NIC on the far side of the
//     TAP: it has its own MAC (TAPConfig.MAC), distinct from the kernel
//     side's, and its own IP addresses; a bridge connects the kernel side to
//     other hosts or VMs. The TAP is not persistent: Close removes it. A
//     persistent TAP of the name that exists (ip tuntap add) is attached to
//     instead and outlives Close (TAP.Adopted).
//   - OpenRaw opens an AF_PACKET socket on an existing interface and uses
//     the interface's own MAC. A classic-BPF filter (RoCEFilter) can limit
//     what is read to RoCEv2; frames the host itself sends are not read
//     (PACKET_IGNORE_OUTGOING), nor VLAN-tagged ones. Reads and writes are
//     batched with recvmmsg/sendmmsg; checksums a local sender left partial
//     (CHECKSUM_PARTIAL over a veth or bridge) are finished on read.
//     RawConfig.Ring receives through a TPACKET_V3 ring instead, and
//     OpenRawFanout opens one Raw per worker on the same interface, joined
//     in a PACKET_FANOUT group that steers each RoCEv2 frame by its BTH
//     destination QP (FanoutProgram).
//   - Pipe joins two in-memory Links for tests, with optional fault hooks.
//
// Concurrency: Read must be called from one goroutine at a time (it reuses
// per-link state); Write is safe for concurrent use. Close may be called from
// any goroutine and interrupts a blocked Read; afterwards Read and Write
// return an error for which errors.Is(err, net.ErrClosed) holds.
//
// # Run-to-completion workers
//
// Read blocks, which suits a goroutine per link. A NAPI-style worker that
// owns a link (and, with fanout, the QPs it steers) drives it through two
// optional interfaces instead, found by type assertion. Poller: TryRead
// never blocks; WaitReadable sleeps until a frame is readable, a timeout
// passes or Wake is called; Wake is how the worker's other sources of work
// (a client's doorbell, a send queue, a timer) interrupt the sleep.
// RingReader: ReadRing hands frames over in place in the receive ring (no
// copy), up to a budget, and returns ring space to the kernel after the
// callback; a frame must not be kept after its callback returns. The loop
// is "busy: poll, idle: arm and sleep":
//
//	for {
//		n, err := l.TryRead(bufs, sizes, off) // or ReadRing(budget, handle)
//		// ... handle n frames, then other work, each within a budget ...
//		if n == 0 && idle {
//			l.WaitReadable(maxSleep)
//		}
//	}
//
// SegmentWriter (Raw) sends frames gathered from several buffers, e.g.
// headers, payload straight from a memory region, and ICRC, without copying.
//
// WaitReadable checks readiness after arming, so a frame that arrived
// between the last TryRead and the sleep ends it at once; a Wake that came
// before it is not lost either: it returns (false, nil) at once.
//
// Only one goroutine may read (Read, TryRead, ReadRing, WaitReadable) at a
// time; Wake and Write are safe from any goroutine.
//
// Links open sockets and devices in the network namespace of the calling OS
// thread. To open one inside another namespace, call the constructor on a
// goroutine locked to a thread that has joined it (see package linktest).
package link

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/vrnic/vrnicd/header"
)

// Link is a batch Ethernet frame device.
type Link interface {
	// Read reads up to len(bufs) frames; frame i is placed at bufs[i][offset:]
	// and sizes[i] is its length. It blocks until at least one frame is
	// available. A frame longer than the space in its buffer is truncated
	// to fit (sizes[i] is then the truncated length).
	Read(bufs [][]byte, sizes []int, offset int) (n int, err error)
	// Write writes the frames bufs[i][offset:] and returns how many were
	// written. Write does not retain the buffers.
	Write(bufs [][]byte, offset int) (int, error)
	// BatchSize is the most frames Read returns at once; callers should
	// size bufs to it.
	BatchSize() int
	// MTU is the largest IP packet the link carries (Ethernet payload).
	MTU() int
	// HardwareAddr is the link's own MAC, the source of frames it sends.
	HardwareAddr() net.HardwareAddr
	// Name names the link (interface name, or "pipe0"/"pipe1").
	Name() string
	// Close releases the link; after it, Read and Write return an error
	// satisfying errors.Is(err, net.ErrClosed).
	Close() error
}

// Poller is implemented by links a worker can poll without blocking: Raw.
type Poller interface {
	// TryRead is Read that returns 0, nil at once when no frame is ready.
	TryRead(bufs [][]byte, sizes []int, offset int) (int, error)
	// WaitReadable blocks until a frame is readable (true), timeout passes
	// or Wake is called (false), or the link is closed (an error
	// satisfying errors.Is(err, net.ErrClosed)). A negative timeout waits
	// without limit; zero only reports readiness.
	WaitReadable(timeout time.Duration) (bool, error)
	// Wake ends the WaitReadable in progress, or else the next one.
	Wake()
	// PollFD is the descriptor that polls readable when TryRead would
	// find a frame, for a WaitSet that sleeps on it with other
	// descriptors (a worker's doorbells); PollError is the error its
	// EPOLLERR or EPOLLHUP stands for (nil: none pending).
	PollFD() (int, error)
	PollError() error
}

// RingReader is implemented by links that receive into a memory ring
// shared with the kernel (Raw with RawConfig.Ring).
type RingReader interface {
	// ReadRing calls fn for up to max frames ready in the ring, in order,
	// without waiting; it returns how many. A frame is a whole Ethernet
	// frame in ring memory, valid only until fn returns; fn may modify it.
	ReadRing(max int, fn func(frame []byte)) (int, error)
	// HasRing reports whether the link was opened with a ring (ReadRing
	// fails without one).
	HasRing() bool
}

// EthernetHeaderLen is the length of an untagged Ethernet header.
const EthernetHeaderLen = header.EthernetHeaderLen

// Errors returned by links.
var (
	// ErrFrameTooBig: a frame's Ethernet payload exceeds the MTU.
	ErrFrameTooBig = errors.New("link: frame larger than MTU")
	// ErrFrameTooShort: a frame has no complete Ethernet header.
	ErrFrameTooShort = errors.New("link: frame shorter than an Ethernet header")
)

// closedError wraps net.ErrClosed with the link's name.
func closedError(name string) error {
	return fmt.Errorf("link %s: %w", name, net.ErrClosed)
}

// checkFrame validates one outgoing frame against mtu.
func checkFrame(f []byte, mtu int) error {
	if len(f) < EthernetHeaderLen {
		return ErrFrameTooShort
	}
	if len(f)-EthernetHeaderLen > mtu {
		return fmt.Errorf("%w: %d > %d", ErrFrameTooBig, len(f)-EthernetHeaderLen, mtu)
	}
	return nil
}
