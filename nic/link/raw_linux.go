package link

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/vrnic/vrnicd/header"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// RawConfig configures OpenRaw.
type RawConfig struct {
	// Interface is the existing interface to attach to, e.g. "eth1".
	Interface string
	// Filter, if non-nil, is a classic BPF program run by the kernel on
	// every frame; only accepted frames are read. RoCEFilter() selects
	// RoCEv2. It is attached before the socket is bound, so no unfiltered
	// frame is ever queued.
	Filter []bpf.RawInstruction
	// BatchSize caps frames per Read and per sendmmsg; default 64.
	BatchSize int
	// RecvBuffer is SO_RCVBUF(FORCE) in bytes; default 4 MiB. Unused
	// with a Ring (the ring is the receive buffer).
	RecvBuffer int
	// Ring, if non-nil, receives through a PACKET_MMAP TPACKET_V3 ring
	// instead of recvmmsg: Read copies frames out of it, ReadRing hands
	// them over in place. See RingConfig for its latency cost.
	Ring *RingConfig
	// QdiscBypass sets PACKET_QDISC_BYPASS: frames written skip the
	// interface's queueing discipline and the egress hooks in front of it
	// (tc egress, nftables netdev egress: loss or shaping injected there
	// does not apply) and go to the driver directly; packet taps still see
	// them. On a veth (noqueue) it saves the qdisc layer's locking; see
	// vrnic-linkbench bw --qdisc-bypass.
	QdiscBypass bool
}

// Raw is a Link over an AF_PACKET socket bound to an existing interface. It
// sends with the interface's own MAC. Frames the host sends itself are not
// read, nor frames that came VLAN-tagged (they belong to a VLAN interface on
// top: run on that one). Reads use recvmmsg (or a ring) and writes
// sendmmsg, so a batch costs one system call; the socket is kept off the
// Go netpoller (sysFD), and Close interrupts a blocked Read. PACKET_AUXDATA tells which frames carry a UDP checksum a
// local sender left partial; Read finishes it.
//
// MTU and HardwareAddr are read once, at OpenRaw.
type Raw struct {
	// errPending: a wait on the ring found an error on the socket.
	errPending atomic.Bool
	name       string
	ifindex    int
	mac        net.HardwareAddr
	mtu        atomic.Int64 // the interface's, as last set (SetMTU)
	batch      int
	rc         *sysFD // off the Go netpoller (see sysFD)
	closed     atomic.Bool

	ring   rxRing       // nil: recvmmsg
	ringMu sync.RWMutex // readers hold it shared; Close unmaps under it

	statsMu sync.Mutex // guards stats, the running PACKET_STATISTICS totals
	stats   RawStats

	rhdrs []unix.Mmsghdr // Read scratch (one reader at a time)
	riovs []unix.Iovec
	rctl  []byte // PACKET_AUXDATA control messages, auxSpace per frame

	wmu   sync.Mutex // guards the Write scratch
	whdrs []unix.Mmsghdr
	wiovs []unix.Iovec
	wsegs []unix.Iovec // WriteSegments' iovecs, BatchSize × MaxSegments
}

// OpenRaw opens an AF_PACKET socket on an existing, up interface.
func OpenRaw(cfg RawConfig) (*Raw, error) {
	ifi, err := net.InterfaceByName(cfg.Interface)
	if err != nil {
		return nil, fmt.Errorf("link: %w", err)
	}
	if len(ifi.HardwareAddr) != 6 {
		return nil, fmt.Errorf("link: %s is not an Ethernet interface", cfg.Interface)
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 64
	}
	if cfg.RecvBuffer <= 0 {
		cfg.RecvBuffer = 4 << 20
	}
	if cfg.Ring != nil {
		rc := *cfg.Ring
		if err := rc.setDefaults(ifi.MTU); err != nil {
			return nil, fmt.Errorf("link: %s: %w", cfg.Interface, err)
		}
		cfg.Ring = &rc
	}
	// Protocol 0: the socket receives nothing until bind, so the filter
	// is in place before the first frame is queued.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("link: AF_PACKET socket: %w", err)
	}
	fail := func(what string, err error) (*Raw, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("link: %s on %s: %w", what, cfg.Interface, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
		return fail("PACKET_IGNORE_OUTGOING", err)
	}
	// The frame's checksum and VLAN state travel beside it as auxdata.
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
		return fail("PACKET_AUXDATA", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, cfg.RecvBuffer); err != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, cfg.RecvBuffer)
	}
	if cfg.Filter != nil {
		if err := attachFilter(fd, cfg.Filter); err != nil {
			return fail("SO_ATTACH_FILTER", err)
		}
	}
	if cfg.QdiscBypass {
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
			return fail("PACKET_QDISC_BYPASS", err)
		}
	}
	var ring rxRing
	if cfg.Ring != nil {
		if ring, err = setupRing(fd, *cfg.Ring, ifi.MTU); err != nil {
			return fail("ring", err)
		}
	}
	sll := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}
	if err := unix.Bind(fd, sll); err != nil {
		if ring != nil {
			ring.unmap()
		}
		return fail("bind", err)
	}
	sfd, err := newSysFD(fd)
	if err != nil {
		if ring != nil {
			ring.unmap()
		}
		return fail("eventfd", err)
	}
	r := &Raw{
		name:    ifi.Name,
		ifindex: ifi.Index,
		mac:     append(net.HardwareAddr(nil), ifi.HardwareAddr...),
		batch:   cfg.BatchSize,
		ring:    ring,
		rc:      sfd,
		rhdrs:   make([]unix.Mmsghdr, cfg.BatchSize),
		riovs:   make([]unix.Iovec, cfg.BatchSize),
		rctl:    make([]byte, cfg.BatchSize*auxSpace),
		whdrs:   make([]unix.Mmsghdr, cfg.BatchSize),
		wiovs:   make([]unix.Iovec, cfg.BatchSize),
	}
	r.mtu.Store(int64(ifi.MTU))
	return r, nil
}

// attachFilter installs a classic BPF program on a socket.
func attachFilter(fd int, prog []bpf.RawInstruction) error {
	if len(prog) == 0 || len(prog) > 0xffff {
		return errors.New("bad filter length")
	}
	fs := make([]unix.SockFilter, len(prog))
	for i, ins := range prog {
		fs[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
		&unix.SockFprog{Len: uint16(len(fs)), Filter: &fs[0]})
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (r *Raw) BatchSize() int { return r.batch }
func (r *Raw) MTU() int       { return int(r.mtu.Load()) }

// SetMTU follows a change of the interface's MTU (the kernel's: raw mode
// never sets it), which bounds the frames Write takes.
func (r *Raw) SetMTU(mtu int)                 { r.mtu.Store(int64(mtu)) }
func (r *Raw) HardwareAddr() net.HardwareAddr { return r.mac }
func (r *Raw) Name() string                   { return r.name }

// Ifindex is the interface's index.
func (r *Raw) Ifindex() int { return r.ifindex }

// Close closes the socket, interrupting a blocked Read or WaitReadable,
// then unmaps the ring once no TryRead or ReadRing is running (so it must
// not be called from a ReadRing callback).
func (r *Raw) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	err := r.rc.Close()
	if r.ring != nil {
		r.ringMu.Lock()
		r.ring.unmap()
		r.ringMu.Unlock()
	}
	return err
}

func (r *Raw) fdErr(err error) error {
	if r.closed.Load() || errors.Is(err, os.ErrClosed) {
		return closedError(r.name)
	}
	return fmt.Errorf("link %s: %w", r.name, err)
}

// fillMmsg fills hdrs/iovs with one iovec per buffer.
func fillMmsg(hdrs []unix.Mmsghdr, iovs []unix.Iovec, bufs [][]byte, offset int) {
	for i, b := range bufs {
		b = b[offset:]
		iovs[i] = unix.Iovec{}
		if len(b) > 0 {
			iovs[i].Base = &b[0]
			iovs[i].SetLen(len(b))
		}
		hdrs[i] = unix.Mmsghdr{}
		hdrs[i].Hdr.Iov = &iovs[i]
		hdrs[i].Hdr.SetIovlen(1)
	}
}

// Read implements Link with one recvmmsg per batch. Frames that arrived
// VLAN-tagged are dropped: the tag was stripped into auxdata, and such a
// frame belongs to a VLAN interface stacked on this one, not to it. Frames
// whose UDP checksum the sending kernel left for the device to finish (a
// local sender over veth or a bridge: CHECKSUM_PARTIAL) get it finished, so
// the stack can verify it and a capture shows the value the wire would.
func (r *Raw) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if r.ring != nil {
		return r.readRing(bufs, sizes, offset)
	}
	if len(bufs) > r.batch {
		bufs = bufs[:r.batch]
	}
	if len(bufs) == 0 {
		return 0, nil
	}
	for {
		n, err := r.recv(bufs, sizes, offset, true)
		if err != nil {
			return 0, err
		}
		if n = keepFrames(bufs, sizes, offset, n, r.auxStatus); n > 0 {
			return n, nil
		}
	}
}

// recv is one recvmmsg, first waiting until a frame is queued if block is
// set; otherwise it returns 0, nil when none is.
func (r *Raw) recv(bufs [][]byte, sizes []int, offset int, block bool) (int, error) {
	fillMmsg(r.rhdrs, r.riovs, bufs, offset)
	for i := range bufs {
		r.rhdrs[i].Hdr.Control = &r.rctl[i*auxSpace]
		r.rhdrs[i].Hdr.SetControllen(auxSpace)
	}
	n := 0
	var rerr error
	once := func(fd uintptr) bool {
		for {
			m, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.rhdrs[0])),
				uintptr(len(bufs)), unix.MSG_DONTWAIT, 0, 0)
			switch e {
			case 0:
				n = int(m)
				return true
			case unix.EINTR:
			case unix.EAGAIN, unix.ENETDOWN:
				// ENETDOWN: the interface went down (sockErr).
				return false
			default:
				rerr = e
				return true
			}
		}
	}
	var err error
	if block {
		err = r.rc.Read(once)
	} else {
		err = r.rc.Control(func(fd uintptr) { once(fd) })
	}
	for i := range n {
		sizes[i] = int(r.rhdrs[i].Len)
	}
	for i := range bufs { // drop references to the caller's buffers
		r.riovs[i].Base = nil
	}
	if n > 0 {
		return n, nil
	}
	if err == nil {
		err = rerr
	}
	if err == nil && !block {
		return 0, nil
	}
	if err == nil {
		err = errors.New("recvmmsg returned no frame")
	}
	return 0, r.fdErr(err)
}

// auxSpace is the control-message room for one tpacket_auxdata.
var auxSpace = unix.CmsgSpace(int(unsafe.Sizeof(unix.TpacketAuxdata{})))

// auxStatus is tp_status of frame i of the last recv, 0 if it carried none.
func (r *Raw) auxStatus(i int) uint32 {
	b := r.rctl[i*auxSpace:][:min(int(r.rhdrs[i].Hdr.Controllen), auxSpace)]
	hdrLen := unix.CmsgLen(0)
	if len(b) < hdrLen+int(unsafe.Sizeof(unix.TpacketAuxdata{})) {
		return 0
	}
	// rctl is 8-byte aligned and auxSpace is a multiple of 8.
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	if h.Level != unix.SOL_PACKET || h.Type != unix.PACKET_AUXDATA {
		return 0
	}
	return (*unix.TpacketAuxdata)(unsafe.Pointer(&b[hdrLen])).Status
}

// keepFrames applies each frame's auxdata status to the n frames read:
// tagged ones are dropped (later frames move down to close the gap) and
// partial checksums are finished. It returns how many frames remain.
func keepFrames(bufs [][]byte, sizes []int, offset, n int, status func(i int) uint32) int {
	kept := 0
	for i := range n {
		st := status(i)
		if st&unix.TP_STATUS_VLAN_VALID != 0 {
			continue
		}
		if kept != i {
			sizes[kept] = copy(bufs[kept][offset:], bufs[i][offset:offset+sizes[i]])
		}
		if st&unix.TP_STATUS_CSUMNOTREADY != 0 {
			finishUDPChecksum(bufs[kept][offset : offset+sizes[kept]])
		}
		kept++
	}
	return kept
}

// finishUDPChecksum computes the UDP checksum of an untagged Ethernet frame
// carrying UDP over IPv4 or IPv6 (UDP as the first next header) in place.
// Other frames, and frames whose lengths do not add up, are left alone: the
// stack judges them.
func finishUDPChecksum(f []byte) {
	if len(f) < EthernetHeaderLen {
		return
	}
	ip := f[EthernetHeaderLen:]
	var udp []byte
	var src, dst netip.Addr
	switch binary.BigEndian.Uint16(f[12:]) {
	case 0x0800:
		if len(ip) < 20 || ip[9] != 17 {
			return
		}
		ihl, total := int(ip[0]&0xf)*4, int(binary.BigEndian.Uint16(ip[2:]))
		if ihl < 20 || total < ihl || total > len(ip) {
			return
		}
		udp = ip[ihl:total]
		src, dst = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
	case 0x86dd:
		if len(ip) < 40 || ip[6] != 17 {
			return
		}
		plen := int(binary.BigEndian.Uint16(ip[4:]))
		if 40+plen > len(ip) {
			return
		}
		udp = ip[40 : 40+plen]
		src, dst = netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
	default:
		return
	}
	if len(udp) < 8 {
		return
	}
	udp[6], udp[7] = 0, 0
	c := header.L4Checksum(src, dst, 17, udp)
	if c == 0 {
		c = 0xffff // 0 means "no checksum" on the wire
	}
	binary.BigEndian.PutUint16(udp[6:], c)
}

// Write implements Link with sendmmsg, up to BatchSize frames per call.
func (r *Raw) Write(bufs [][]byte, offset int) (int, error) {
	for _, b := range bufs {
		if err := checkFrame(b[offset:], r.MTU()); err != nil {
			return 0, err
		}
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	done := 0
	for done < len(bufs) {
		chunk := bufs[done:min(len(bufs), done+r.batch)]
		fillMmsg(r.whdrs, r.wiovs, chunk, offset)
		sent, err := r.sendmmsg(len(chunk))
		for i := range chunk {
			r.wiovs[i].Base = nil
		}
		done += sent
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// sendmmsg sends the n messages in r.whdrs, waiting (poll) while the
// socket's send buffer is full; the caller holds wmu.
func (r *Raw) sendmmsg(n int) (int, error) {
	sent := 0
	var werr error
	err := r.rc.Write(func(fd uintptr) bool {
		for sent < n {
			m, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&r.whdrs[sent])),
				uintptr(n-sent), unix.MSG_DONTWAIT, 0, 0)
			switch e {
			case 0:
				sent += int(m)
			case unix.EINTR:
			case unix.EAGAIN, unix.ENOBUFS:
				return false
			default:
				werr = e
				return true
			}
		}
		return true
	})
	if err == nil {
		err = werr
	}
	if err != nil {
		return sent, r.fdErr(err)
	}
	return sent, nil
}

// RoCEFilter returns a classic BPF program that accepts untagged Ethernet
// frames carrying UDP to port 4791 over IPv4 (unfragmented, any IHL) or over
// IPv6 (UDP as the first next header), and nothing else.
func RoCEFilter() []bpf.RawInstruction {
	prog, err := bpf.Assemble([]bpf.Instruction{
		/* 0 */ bpf.LoadAbsolute{Off: 12, Size: 2}, // EtherType
		/* 1 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x0800, SkipFalse: 7},
		/* 2 */ bpf.LoadAbsolute{Off: 23, Size: 1}, // IPv4 protocol
		/* 3 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 17, SkipFalse: 11},
		/* 4 */ bpf.LoadAbsolute{Off: 20, Size: 2}, // flags + fragment offset
		/* 5 */ bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x3fff, SkipTrue: 9},
		/* 6 */ bpf.LoadMemShift{Off: 14}, // X = IHL*4
		/* 7 */ bpf.LoadIndirect{Off: 14 + 2, Size: 2}, // UDP dst port
		/* 8 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 4791, SkipTrue: 5, SkipFalse: 6},
		/* 9 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x86dd, SkipFalse: 5},
		/* 10 */ bpf.LoadAbsolute{Off: 14 + 6, Size: 1}, // IPv6 next header
		/* 11 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 17, SkipFalse: 3},
		/* 12 */ bpf.LoadAbsolute{Off: 14 + 40 + 2, Size: 2},
		/* 13 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 4791, SkipFalse: 1},
		/* 14 */ bpf.RetConstant{Val: 0x40000},
		/* 15 */ bpf.RetConstant{Val: 0},
	})
	if err != nil {
		panic("link: RoCEFilter does not assemble: " + err.Error())
	}
	return prog
}

var _ Link = (*Raw)(nil)
