package netstack

import (
	"context"
	"encoding/binary"
	"github.com/vrnic/vrnicd/transport/clock"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vrnic/vrnicd/nic/gid"
	"github.com/vrnic/vrnicd/nic/link"
	"github.com/vrnic/vrnicd/nic/link/linktest"
	"github.com/vrnic/vrnicd/transport/wire"
)

// runStack runs st until the test ends.
func runStack(t *testing.T, st *Stack) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		st.Close()
	})
}

func deliverTo(ch chan RxPacket) func([]RxPacket) {
	return func(pkts []RxPacket) {
		for _, p := range pkts {
			q := p
			q.Transport = append([]byte(nil), p.Transport...)
			q.Frame, q.IPHeader = nil, nil
			select {
			case ch <- q:
			default:
			}
		}
	}
}

// How long the tests wait for the stack or the kernel to settle
// (linktest.WaitFor), looking every waitPoll.
const waitLimit, waitPoll = 5 * time.Second, 20 * time.Millisecond

// tapBridged makes the root tests' bed: a TAP (MTU 1500) in namespace a,
// a port of bridge br there, whose veth's peer vb is in namespace b. tag
// tells the tests' interface names apart.
func tapBridged(t *testing.T, tag string) (a, b *linktest.NS, tap *link.TAP, tapName, br, vb string) {
	a, b = linktest.NewNS(t, "n"+tag+"a"), linktest.NewNS(t, "n"+tag+"b")
	tapName, br, va := linktest.UniqueName("t"+tag), linktest.UniqueName("b"+tag), linktest.UniqueName(tag+"a")
	vb = linktest.UniqueName(tag + "b")
	if err := a.Do(func() (err error) {
		tap, err = link.OpenTAP(link.TAPConfig{Name: tapName, MTU: 1500})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tap.Close() })
	linktest.BridgedVeth(t, a, br, va, b, vb)
	a.Exec(t, "ip", "link", "set", tapName, "master", br)
	return a, b, tap, tapName, br, vb
}

// TestTAPModeInNetns: a stack on a TAP in namespace A, bridged to a veth
// whose peer is in namespace B. B pings it (IPv4 and link-local IPv6), the
// stack resolves B, a UDP datagram from a socket in B reaches Deliver, and a
// packet from the stack reaches a UDP socket in B.
func TestTAPModeInNetns(t *testing.T) {
	linktest.RequireRoot(t)
	_, nsB, tap, _, _, vb := tapBridged(t, "s")
	nsB.Exec(t, "ip", "addr", "add", "192.0.2.20/24", "dev", vb)

	rx := make(chan RxPacket, 16)
	st, err := New(Config{Link: tap, Addrs: []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24")}, Deliver: deliverTo(rx)})
	if err != nil {
		t.Fatal(err)
	}
	runStack(t, st)

	out := nsB.Exec(t, "ping", "-c", "2", "-W", "2", "192.0.2.10")
	if !strings.Contains(out, "2 received") {
		t.Fatalf("IPv4 ping: %s", out)
	}
	ll := gid.LinkLocal(tap.HardwareAddr())
	out = nsB.Exec(t, "ping", "-6", "-c", "2", "-W", "2", ll.String()+"%"+vb)
	if !strings.Contains(out, "2 received") {
		t.Fatalf("IPv6 link-local ping: %s", out)
	}

	nlB := nsB.Netlink(t)
	l, err := nlB.LinkByName(vb)
	if err != nil {
		t.Fatal(err)
	}
	bMAC := l.Attrs().HardwareAddr
	bIP := netip.MustParseAddr("192.0.2.20")
	nsB.Exec(t, "ip", "neigh", "flush", "dev", vb) // nothing cached in B either
	st.Resolve(bIP)
	linktest.WaitFor(t, "the stack to resolve B", waitLimit, waitPoll, func() bool {
		m, ok := st.Neighbor(bIP)
		return ok && m.String() == bMAC.String()
	})

	// B → stack: a kernel UDP socket (unconnected, DF: IPv4 ID 0) carrying
	// a RoCE packet whose ICRC the test computes for the header the kernel
	// will build. The kernel also fills in a UDP checksum, which the stack
	// verifies.
	me := netip.MustParseAddr("192.0.2.10")
	const sport = 50123
	tp := make([]byte, wire.BTHLen+16+wire.ICRCLen)
	bth := wire.BTH(tp)
	bth.SetOpcode(0x04)
	bth.SetPKey(0xffff)
	bth.SetDestQP(0x42)
	pseudo := make([]byte, 28+len(tp))
	pseudo[0] = 0x45
	binary.BigEndian.PutUint16(pseudo[2:], uint16(len(pseudo)))
	binary.BigEndian.PutUint16(pseudo[6:], 0x4000)
	pseudo[9] = 17
	copy(pseudo[12:], bIP.AsSlice())
	copy(pseudo[16:], me.AsSlice())
	binary.BigEndian.PutUint16(pseudo[20:], sport)
	binary.BigEndian.PutUint16(pseudo[22:], RoCEPort)
	binary.BigEndian.PutUint16(pseudo[24:], uint16(8+len(tp)))
	copy(pseudo[28:], tp)
	if err := wire.PutICRC(pseudo); err != nil {
		t.Fatal(err)
	}
	copy(tp, pseudo[28:])
	var recvB *net.UDPConn
	if err := nsB.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrInet4{Port: sport, Addr: bIP.As4()}); err != nil {
			return err
		}
		if err := unix.Sendto(fd, tp, 0, &unix.SockaddrInet4{Port: RoCEPort, Addr: me.As4()}); err != nil {
			return err
		}
		recvB, err = net.ListenUDP("udp4", &net.UDPAddr{IP: bIP.AsSlice(), Port: RoCEPort})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer recvB.Close()
	select {
	case p := <-rx:
		if p.Src != bIP || p.Dst != me || p.SrcPort != sport || string(p.Transport) != string(tp) {
			t.Fatalf("delivered %+v", p)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("UDP datagram from B not delivered; counters %v", st.Counters().Map())
	}

	// stack → B: the kernel's UDP stack in B accepts our headers.
	buf := transport(40)
	d := &Dest{Dst: bIP, SrcPort: 0xc123, HopLimit: 1}
	if _, err := st.Send([]TxPacket{{Buf: buf, Offset: Headroom, Dest: d}}); err != nil {
		t.Fatal(err)
	}
	recvB.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, 2048)
	n, from, err := recvB.ReadFromUDP(got)
	if err != nil {
		t.Fatalf("B's UDP socket got nothing: %v", err)
	}
	if from.Port != 0xc123 || from.IP.String() != "192.0.2.10" || string(got[:n]) != string(buf[Headroom:]) {
		t.Fatalf("B received %d bytes from %v", n, from)
	}
}

// TestRawModeInNetns: a raw-mode stack on a veth in namespace R1. Frames
// from the peer in R2 are delivered and draw no ICMP port unreachable (they
// did before the stack started: the control), the stack follows address
// changes, and a packet it sends after the kernel resolves R2 appears on
// R2's wire with a correct ICRC.
func TestRawModeInNetns(t *testing.T) {
	linktest.RequireRoot(t)
	r1, r2 := linktest.NewNS(t, "nr1"), linktest.NewNS(t, "nr2")
	v1, v2 := linktest.UniqueName("r1"), linktest.UniqueName("r2")
	linktest.VethPair(t, r1, v1, r2, v2)
	r1.Exec(t, "ip", "addr", "add", "198.51.100.1/24", "dev", v1)
	r2.Exec(t, "ip", "addr", "add", "198.51.100.2/24", "dev", v2)
	ip1, ip2 := netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.2")
	l1, err := r1.Netlink(t).LinkByName(v1)
	if err != nil {
		t.Fatal(err)
	}
	mac1 := l1.Attrs().HardwareAddr

	capt, frames := rawCapture(t, r2, v2)
	roce := scratchRoCEFrame(t, capt.HardwareAddr(), ip1, mac1)
	inject := func() {
		if _, err := capt.Write([][]byte{roce}, 0); err != nil {
			t.Fatal(err)
		}
	}
	// Control: without the stack the kernel answers port unreachable.
	inject()
	if u := drainUnreach(frames, time.Second); u == 0 {
		t.Fatal("control failed: no ICMP port unreachable without the stack (capture broken?)")
	}

	st, rx, addrc := rawStack(t, r1, v1, mac1, ip1)
	for range 3 {
		inject()
	}
	for i := range 3 {
		select {
		case p := <-rx:
			if p.Src != ip2 || p.Dst != ip1 || p.SrcPort != 0xc777 {
				t.Fatalf("delivered %+v", p)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("frame %d not delivered; counters %v", i, st.Counters().Map())
		}
	}
	if u := drainUnreach(frames, 500*time.Millisecond); u != 0 {
		t.Fatalf("kernel sent %d ICMP port unreachable with the stack running", u)
	}

	// The stack follows the interface's addresses.
	r1.Exec(t, "ip", "addr", "add", "198.51.100.7/24", "dev", v1)
	var addrs []netip.Addr
	linktest.WaitFor(t, "the new address", waitLimit, waitPoll, func() bool {
		for {
			select {
			case a := <-addrc:
				addrs = a
			default:
				return containsAddr(addrs, netip.MustParseAddr("198.51.100.7"))
			}
		}
	})
	rawSendResolves(t, r1, v1, st, capt.HardwareAddr(), frames, ip1, ip2)
}

// rawCapture opens R2's capture/injection socket on dev (no filter) and
// copies what it reads to the channel (dropping when it is full).
func rawCapture(t *testing.T, ns *linktest.NS, dev string) (*link.Raw, chan []byte) {
	t.Helper()
	var capt *link.Raw
	if err := ns.Do(func() (err error) {
		capt, err = link.OpenRaw(link.RawConfig{Interface: dev})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { capt.Close() })
	frames := make(chan []byte, 256)
	go func() {
		bufs := [][]byte{make([]byte, 2048)}
		sizes := []int{0}
		for {
			if _, err := capt.Read(bufs, sizes, 0); err != nil {
				return
			}
			select {
			case frames <- append([]byte(nil), bufs[0][:sizes[0]]...):
			default:
			}
		}
	}()
	return capt, frames
}

// scratchRoCEFrame is a RoCE frame from R2 (srcMAC) to R1 (ip1 at mac1),
// built by a scratch stack.
func scratchRoCEFrame(t *testing.T, srcMAC net.HardwareAddr, ip1 netip.Addr, mac1 net.HardwareAddr) []byte {
	t.Helper()
	cl := newCaptureLink(srcMAC)
	b, err := New(Config{Link: cl, Addrs: []netip.Prefix{netip.MustParsePrefix("198.51.100.2/24")}, Clock: clock.NewManual(time.Unix(1_000_000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	b.neigh.confirm(ip1, [6]byte(mac1), true)
	for range 4 {
		if _, err := b.Send([]TxPacket{{Buf: transport(24), Offset: Headroom, Dest: &Dest{Dst: ip1, SrcPort: 0xc777}}}); err != nil {
			t.Fatal(err)
		}
	}
	return cl.frames[0]
}

// drainUnreach reads frames for d and counts the ICMP port unreachables.
func drainUnreach(frames chan []byte, d time.Duration) (unreach int) {
	isUnreach := func(f []byte) bool {
		return len(f) >= 14+20+8 && binary.BigEndian.Uint16(f[12:]) == 0x0800 && f[23] == 1 &&
			f[14+int(f[14]&0xf)*4] == 3 && f[14+int(f[14]&0xf)*4+1] == 3
	}
	end := time.After(d)
	for {
		select {
		case f := <-frames:
			if isUnreach(f) {
				unreach++
			}
		case <-end:
			return
		}
	}
}

// rawStack runs a raw-mode stack on R1's dev behind the RoCE filter and
// checks the addresses it starts with (the MAC's link-local GID first).
func rawStack(t *testing.T, ns *linktest.NS, dev string, mac1 net.HardwareAddr, ip1 netip.Addr) (*Stack, chan RxPacket, chan []netip.Addr) {
	t.Helper()
	var raw *link.Raw
	if err := ns.Do(func() (err error) {
		raw, err = link.OpenRaw(link.RawConfig{Interface: dev, Filter: link.RoCEFilter()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	rx := make(chan RxPacket, 16)
	addrc := make(chan []netip.Addr, 16)
	st, err := New(Config{Link: raw, Mode: ModeRaw, NetNS: ns.Handle, Deliver: deliverTo(rx),
		OnAddrs: func(a []netip.Addr) { addrc <- a }})
	if err != nil {
		t.Fatal(err)
	}
	runStack(t, st)
	addrs := <-addrc
	if len(addrs) < 2 || addrs[0] != gid.LinkLocal(mac1) || !containsAddr(addrs, ip1) {
		t.Fatalf("raw-mode addresses %v", addrs)
	}
	return st, rx, addrc
}

// rawSendResolves: a send to R2 with no kernel neighbour entry makes the
// stack ask the kernel, which ARPs; the queued packet then goes out to
// R2's MAC (captMAC) with a correct ICRC.
func rawSendResolves(t *testing.T, ns *linktest.NS, dev string, st *Stack, captMAC net.HardwareAddr, frames chan []byte, ip1, ip2 netip.Addr) {
	t.Helper()
	ns.Exec(t, "ip", "neigh", "flush", "dev", dev)
	// The kernel's deletion reaches the stack's mirror as an event: send
	// once it has, or the send may still find the old entry.
	linktest.WaitFor(t, "the flush in the stack's table", waitLimit, waitPoll, func() bool {
		_, _, ok := st.neigh.get(ip2)
		return !ok
	})
	buf := transport(100)
	if n, err := st.Send([]TxPacket{{Buf: buf, Offset: Headroom, Dest: &Dest{Dst: ip2, SrcPort: 0xc999, HopLimit: 3}}}); n != 1 || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	deadline := time.After(5 * time.Second)
	for {
		select {
		case f := <-frames:
			if len(f) < 42 || binary.BigEndian.Uint16(f[12:]) != 0x0800 || f[23] != 17 || binary.BigEndian.Uint16(f[36:]) != RoCEPort {
				continue
			}
			ip := f[14 : 14+int(binary.BigEndian.Uint16(f[16:]))]
			if err := wire.VerifyICRC(ip); err != nil {
				t.Fatalf("ICRC on the wire: %v", err)
			}
			if net.HardwareAddr(f[0:6]).String() != captMAC.String() || netip.AddrFrom4([4]byte(ip[12:16])) != ip1 ||
				string(ip[28:]) != string(buf[Headroom:]) {
				t.Fatalf("wrong frame on the wire % x", f)
			}
			if st.Counters().NeighMisses.Load() == 0 {
				t.Error("expected a neighbour miss (entry was flushed)")
			}
			return
		case <-deadline:
			t.Fatalf("no RoCE frame on R2's wire; counters %v", st.Counters().Map())
		}
	}
}

func containsAddr(l []netip.Addr, a netip.Addr) bool {
	for _, x := range l {
		if x == a {
			return true
		}
	}
	return false
}
