package interop_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vrnic/vrnicd/interop/rxepeer"
	"github.com/vrnic/vrnicd/transport/wire"
)

// capFrame is the transport header of one RoCEv2 frame seen on a daemon's
// TAP: enough to tell who sent which PSN when, and what the ACKs said.
type capFrame struct {
	at       time.Duration // since the capture started
	toVrnicd bool          // from the bridge into the daemon (else from it)
	v6       bool
	op       wire.Opcode
	qp, psn  uint32
	ackReq   bool
	hasAETH  bool
	syndrome uint8
	msn      uint32
	payload  int // UDP payload bytes after BTH (headers and ICRC included)
	readLen  int // RDMA READ request: the RETH's DMA length
}

func (f capFrame) String() string {
	dir := "vrnicd -> peer"
	if f.toVrnicd {
		dir = "peer -> vrnicd"
	}
	s := fmt.Sprintf("%10.3f ms  %s  %-28v qp %#06x psn %#06x", float64(f.at.Microseconds())/1000, dir, f.op, f.qp, f.psn)
	if f.ackReq {
		s += " A"
	}
	if f.hasAETH {
		s += fmt.Sprintf(" aeth %s msn %d", syndromeString(f.syndrome), f.msn)
	}
	return s + fmt.Sprintf(" len %d", f.payload)
}

// syndromeString names an AETH syndrome (IBA 9.7.5.2.1: 0TTVVVVV).
func syndromeString(s uint8) string {
	switch s >> 5 {
	case 0:
		return fmt.Sprintf("ACK(credits %d)", s&0x1f)
	case 1:
		return fmt.Sprintf("RNR-NAK(%d)", s&0x1f)
	case 3:
		switch s & 0x1f {
		case 0:
			return "NAK(PSN-seq)"
		case 1:
			return "NAK(inv-req)"
		case 2:
			return "NAK(rem-acc)"
		case 3:
			return "NAK(rem-op)"
		}
		return fmt.Sprintf("NAK(%#x)", s&0x1f)
	}
	return fmt.Sprintf("syndrome %#x", s)
}

// tapCapture records the RoCEv2 headers of every frame on one device,
// with the kernel's timestamps (SO_TIMESTAMPNS: when the device sent or
// received the frame, not when this goroutine got round to reading it),
// for the timeout analysis of a case. Only 128 bytes of a frame are read,
// so a whole run fits in memory. drops counts frames the socket's buffer
// had no room for (PACKET_STATISTICS): a capture with drops proves
// nothing.
type tapCapture struct {
	dev    string
	fd     int
	start  time.Time
	frames recorder[capFrame]
	mu     sync.Mutex // drops
	drops  uint64
	// intoDaemon: the device is a daemon's TAP, where what the host sends
	// ("outgoing") goes into the daemon. On a guest's TAP it goes into the
	// guest, i.e. it came from a daemon.
	intoDaemon bool
	stop       chan struct{}
	done       chan struct{}
}

// Captures given the same epoch share a time base: their frames' times
// compare.
func startCapture(t testing.TB, n *rxepeer.Netns, dev string, intoDaemon bool, epoch time.Time) *tapCapture {
	t.Helper()
	c := &tapCapture{dev: dev, fd: -1, intoDaemon: intoDaemon, start: epoch, stop: make(chan struct{}), done: make(chan struct{})}
	if err := n.Do(func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		proto := int(uint16(unix.ETH_P_ALL)<<8 | uint16(unix.ETH_P_ALL)>>8)
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return err
		}
		c.fd = fd
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20) != nil {
			_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 16<<20)
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
			return fmt.Errorf("SO_TIMESTAMPNS: %w", err)
		}
		tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: ifi.Index})
	}); err != nil {
		if c.fd >= 0 {
			unix.Close(c.fd)
		}
		t.Fatalf("capture on %s: %v", dev, err)
	}
	go c.run()
	t.Cleanup(c.close)
	return c
}

func (c *tapCapture) run() {
	defer close(c.done)
	buf := make([]byte, 128)
	oob := make([]byte, 128)
	base := c.start.UnixNano()
	for {
		select {
		case <-c.stop:
			return
		default:
		}
		n, oobn, _, from, err := unix.Recvmsg(c.fd, buf, oob, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		at := time.Since(c.start)
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, m := range msgs {
				if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
					sec := int64(binary.NativeEndian.Uint64(m.Data[0:]))
					nsec := int64(binary.NativeEndian.Uint64(m.Data[8:]))
					at = time.Duration(sec*1e9 + nsec - base)
				}
			}
		}
		ll, _ := from.(*unix.SockaddrLinklayer)
		outgoing := ll != nil && ll.Pkttype == unix.PACKET_OUTGOING
		if f, ok := decodeFrame(buf[:n]); ok {
			f.at, f.toVrnicd = at, outgoing == c.intoDaemon
			c.frames.add(f)
		}
	}
}

func (c *tapCapture) close() {
	select {
	case <-c.stop:
		return
	default:
	}
	close(c.stop)
	<-c.done
	unix.Close(c.fd)
}

// dropped returns the frames the socket dropped so far.
func (c *tapCapture) dropped() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, err := unix.GetsockoptTpacketStats(c.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
		c.drops += uint64(st.Drops) // the kernel resets them on every read
	}
	return c.drops
}

// mark returns the number of frames so far, to slice a case's frames out.
func (c *tapCapture) mark() int { return c.frames.mark() }

func (c *tapCapture) since(i int) []capFrame { return c.frames.since(i) }

// recorder is what a capture has recorded so far, appended by its reader
// goroutine while a case reads it.
type recorder[T any] struct {
	mu     sync.Mutex
	frames []T
}

func (r *recorder[T]) add(f T) {
	r.mu.Lock()
	r.frames = append(r.frames, f)
	r.mu.Unlock()
}

func (r *recorder[T]) mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.frames)
}

func (r *recorder[T]) since(i int) []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]T(nil), r.frames[i:]...)
}

// decodeFrame reads Ethernet, IPv4/IPv6, UDP 4791 and the BTH (and AETH).
func decodeFrame(f []byte) (capFrame, bool) {
	var r capFrame
	if !rxepeer.IsRoCEv2(f) {
		return r, false
	}
	ip := f[14:]
	var udp []byte
	if binary.BigEndian.Uint16(f[12:]) == 0x0800 {
		udp = ip[int(ip[0]&0x0f)*4:]
	} else {
		r.v6 = true
		udp = ip[40:]
	}
	if len(udp) < 8+wire.BTHLen {
		return r, false
	}
	r.payload = int(binary.BigEndian.Uint16(udp[4:])) - 8 - wire.BTHLen
	bth := wire.BTH(udp[8 : 8+wire.BTHLen])
	r.op, r.qp, r.psn, r.ackReq = bth.Opcode(), bth.DestQP(), bth.PSN(), bth.AckReq()
	if info := r.op.Info(); info != nil && info.HasHeader(wire.HdrRETH) && r.op == wire.RCRDMAReadRequest {
		if off := 8 + info.Offset[wire.HdrRETH]; len(udp) >= off+16 {
			r.readLen = int(binary.BigEndian.Uint32(udp[off+12:]))
		}
	}
	if info := r.op.Info(); info != nil && info.HasHeader(wire.HdrAETH) {
		off := 8 + info.Offset[wire.HdrAETH]
		if len(udp) >= off+4 {
			r.hasAETH = true
			r.syndrome = udp[off]
			r.msn = uint32(udp[off+1])<<16 | uint32(udp[off+2])<<8 | uint32(udp[off+3])
		}
	}
	return r, true
}

func msec(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// whereTheTimeWent follows a retried request's first copy onto the
// guest's TAP: when it was handed to QEMU, and when the guest's answer
// came out.
func whereTheTimeWent(retry *capFrame, frames, guest []capFrame) string {
	var orig *capFrame
	for i := range frames {
		f := &frames[i]
		if !f.toVrnicd && f.qp == retry.qp && f.psn == retry.psn && f.op == retry.op {
			orig = f
			break
		}
	}
	if orig == nil {
		return ""
	}
	var in, out *capFrame
	for i := range guest {
		g := &guest[i]
		if in == nil {
			if !g.toVrnicd && g.qp == orig.qp && g.psn == orig.psn && g.op == orig.op && g.at >= orig.at-time.Millisecond {
				in = g
			}
			continue
		}
		if gi := g.op.Info(); g.toVrnicd && gi != nil && gi.Has(wire.FlagResponse) && !wire.PSN(g.psn).Before(wire.PSN(orig.psn)) {
			out = g
			break
		}
	}
	if in == nil {
		return "; its first copy is not on the guest's TAP"
	}
	s := fmt.Sprintf("; first copy on the guest's TAP %+.3f ms after leaving vrnicd", msec(in.at-orig.at))
	if out != nil {
		s += fmt.Sprintf(", the guest's first response covering it left its TAP %.1f ms later", msec(out.at-in.at))
	}
	return s
}

// writeCapture writes a case's frames and their analysis to a file (the
// evidence behind a timer verdict) in $VRNICD_INTEROP_RUN/captures
// (default /run/vrnicd-interop), named after the test, and returns its
// path.
func writeCapture(t testing.TB, frames []capFrame, analysis string) string {
	run := os.Getenv("VRNICD_INTEROP_RUN")
	if run == "" {
		run = "/run/vrnicd-interop"
	}
	dir := filepath.Join(run, "captures")
	_ = os.MkdirAll(dir, 0o755)
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()) + ".txt"
	var b strings.Builder
	b.WriteString(analysis)
	b.WriteString("\n")
	for _, f := range frames {
		b.WriteString(f.String())
		b.WriteByte('\n')
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		return fmt.Sprintf("(not written: %v)", err)
	}
	return p
}

// transitTimes pairs each frame on the daemon's TAP with the same frame on
// the guest's TAP and returns how long the host took to carry it across
// the bridge, each way (the time between the two devices' timestamps).
func transitTimes(daemon, guest []capFrame) (toGuest, fromGuest []time.Duration) {
	type key struct {
		toVrnicd bool
		op       wire.Opcode
		qp, psn  uint32
	}
	seen := map[key][]time.Duration{}
	for _, f := range daemon {
		k := key{f.toVrnicd, f.op, f.qp, f.psn}
		seen[k] = append(seen[k], f.at)
	}
	used := map[key]int{}
	for _, g := range guest {
		k := key{g.toVrnicd, g.op, g.qp, g.psn}
		ts := seen[k]
		i := used[k]
		if i >= len(ts) {
			continue
		}
		used[k] = i + 1
		if g.toVrnicd {
			fromGuest = append(fromGuest, ts[i]-g.at)
		} else {
			toGuest = append(toGuest, g.at-ts[i])
		}
	}
	return toGuest, fromGuest
}

func durStats(l []time.Duration) string {
	if len(l) == 0 {
		return "none"
	}
	l = slices.Clone(l)
	slices.Sort(l)
	return fmt.Sprintf("n %d median %.3f ms, 99%% %.3f ms, max %.3f ms", len(l), msec(l[len(l)/2]), msec(l[len(l)*99/100]), msec(l[len(l)-1]))
}

// ourResponseTimes: for each first copy of a peer's request that asks for
// a response (AckReq, READ, atomic), how long vrnicd took to put a response
// with that PSN (or a later one) on its TAP. Fast answers here mean the
// peer's own retries are not waiting on us.
func ourResponseTimes(frames []capFrame) []time.Duration {
	var out []time.Duration
	seen := map[[2]uint32]bool{}
	for i := range frames {
		f := &frames[i]
		info := f.op.Info()
		if !f.toVrnicd || info == nil || f.op.Transport() != 0 || !info.Has(wire.FlagRequest) {
			continue
		}
		if !f.ackReq && f.op != wire.RCRDMAReadRequest && !info.Has(wire.FlagAtomic) {
			continue
		}
		k := [2]uint32{f.qp, f.psn}
		if seen[k] {
			continue // a retry of the peer's
		}
		seen[k] = true
		for j := i + 1; j < len(frames) && frames[j].at-f.at < time.Second; j++ {
			g := &frames[j]
			gi := g.op.Info()
			if !g.toVrnicd && gi != nil && gi.Has(wire.FlagResponse) && !wire.PSN(g.psn).Before(wire.PSN(f.psn)) &&
				wire.PSN(g.psn).Diff(wire.PSN(f.psn)) < 1024 {
				out = append(out, g.at-f.at)
				break
			}
		}
	}
	return out
}

// pct returns the p-th percentile of l (0 if empty).
func pct(l []time.Duration, p int) time.Duration {
	if len(l) == 0 {
		return 0
	}
	l = slices.Clone(l)
	slices.Sort(l)
	return l[min(len(l)*p/100, len(l)-1)]
}

// lostLastAck tells whether a failed ping-pong is the one loss RC cannot
// recover from: the finishing side acknowledged a request of the other's,
// that ACK was lost between the two TAPs, and the finisher, its iterations
// done, destroyed its QP (the rdma-core ping-pong tools have no closing
// handshake), so the requester's retransmissions met a QP that no longer
// exists. It needs all of that in the captures, on some QP: the
// finisher's last ACK leaving its TAP, nothing covering it reaching the
// requester's, and retransmissions then reaching the finisher's TAP
// unanswered. stuckVrnicd: the requester left waiting is vrnicd (else the
// guest).
func lostLastAck(frames, guest []capFrame, stuckVrnicd bool) (string, bool) {
	v := ackLoss{sTap: frames, fTap: guest, stuckVrnicd: stuckVrnicd}
	if !stuckVrnicd {
		v.sTap, v.fTap = guest, frames
	}
	// Streams, seen at the finisher: the requester's QP x sends to its y.
	pair := pairQPs(v.fTap, v.fromS)
	var found []string
	for _, x := range slices.Sorted(maps.Keys(pair)) {
		if why, ok := v.lost(x, pair[x]); ok {
			found = append(found, why)
		}
	}
	if len(found) == 0 {
		return "", false
	}
	who, peer := "vrnicd", "the guest"
	if !stuckVrnicd {
		who, peer = "the guest", "vrnicd"
	}
	return fmt.Sprintf("%s waited for ACKs that %s sent before its tool finished and destroyed its QPs:\n  %s",
		who, peer, strings.Join(found, "\n  ")), true
}

// ackLoss is lostLastAck's view of the two captures: sTap on the stuck
// requester's TAP, fTap on the finisher's.
type ackLoss struct {
	sTap, fTap  []capFrame
	stuckVrnicd bool
}

// fromS says f left the requester's side.
func (v ackLoss) fromS(f *capFrame) bool { return f.toVrnicd != v.stuckVrnicd }

// rcHas says f is RC and its opcode has flag.
func rcHas(f *capFrame, flag wire.OpFlags) bool {
	info := f.op.Info()
	return info != nil && f.op.Transport() == 0 && info.Has(flag)
}

func (v ackLoss) isAck(f *capFrame) bool {
	return !v.fromS(f) && rcHas(f, wire.FlagResponse) && f.hasAETH && f.syndrome>>5 == 0
}

// lost checks the stream from the requester's QP x to the finisher's y:
// the finisher's last ACK to x left its TAP, nothing covering it reached
// the requester's, and the requester then retransmitted what it covers,
// unanswered. It says so when all of that holds.
func (v ackLoss) lost(x, y uint32) (string, bool) {
	var last *capFrame
	for i := range v.fTap {
		if f := &v.fTap[i]; f.qp == x && v.isAck(f) {
			last = f
		}
	}
	if last == nil {
		return "", false
	}
	a := wire.PSN(last.psn)
	for i := range v.sTap {
		if f := &v.sTap[i]; f.qp == x && v.isAck(f) && !wire.PSN(f.psn).Before(a) {
			return "", false // it arrived
		}
	}
	retrans, answered := 0, false
	for i := range v.fTap {
		f := &v.fTap[i]
		if f.at <= last.at {
			continue
		}
		switch {
		case v.fromS(f) && f.qp == y && rcHas(f, wire.FlagRequest) && !wire.PSN(f.psn).After(a):
			retrans++
		case !v.fromS(f) && f.qp == x && rcHas(f, wire.FlagResponse):
			answered = true
		}
	}
	if retrans == 0 || answered {
		return "", false
	}
	return fmt.Sprintf("qp %#06x: the ACK of psn %#06x left the finisher's TAP at %.3f ms and never reached the requester's; "+
		"%d retransmitted packets then reached the finisher's TAP unanswered", y, last.psn, msec(last.at), retrans), true
}
