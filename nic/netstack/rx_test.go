package netstack

import (
	"encoding/binary"
	"github.com/vrnic/vrnicd/header"
	"github.com/vrnic/vrnicd/transport/clock"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link"
	"github.com/vrnic/vrnicd/transport/wire"
)

// captureLink records what is written and never has anything to read.
type captureLink struct {
	mu     sync.Mutex
	mac    net.HardwareAddr
	frames [][]byte
	closed chan struct{}
}

func newCaptureLink(mac net.HardwareAddr) *captureLink {
	return &captureLink{mac: mac, closed: make(chan struct{})}
}

func (c *captureLink) Read([][]byte, []int, int) (int, error) {
	<-c.closed
	return 0, net.ErrClosed
}
func (c *captureLink) Write(bufs [][]byte, off int) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range bufs {
		if len(c.frames) < 64 {
			c.frames = append(c.frames, append([]byte(nil), b[off:]...))
		}
	}
	return len(bufs), nil
}
func (c *captureLink) BatchSize() int                 { return 16 }
func (c *captureLink) MTU() int                       { return 9000 }
func (c *captureLink) HardwareAddr() net.HardwareAddr { return c.mac }
func (c *captureLink) Name() string                   { return "capture" }
func (c *captureLink) Close() error                   { return nil }

var _ link.Link = (*captureLink)(nil)

// peerFrame builds a RoCE frame from the peer to the stack with a peer-side
// stack (its send path is checked against kernel rxe in
// TestSendMatchesKernelRxe).
func peerFrame(t testing.TB, v6 bool, payload int, zeroCsum bool) []byte {
	cl := newCaptureLink(peerMAC)
	ps, err := New(Config{Link: cl, ZeroUDP6Checksum: zeroCsum, Clock: clock.NewManual(time.Unix(1_000_000, 0)),
		Addrs: []netip.Prefix{netip.MustParsePrefix("192.0.2.20/24"), netip.MustParsePrefix("2001:db8::20/64")}})
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	dst := myV4
	if v6 {
		dst = myV6
	}
	ps.neigh.confirm(dst, [6]byte(stackMAC), true)
	d := &Dest{Dst: dst, SrcPort: 0xc0de, TrafficClass: 0x12, HopLimit: 9}
	if _, err := ps.Send([]TxPacket{{Buf: transport(payload), Offset: Headroom, Dest: d}}); err != nil {
		t.Fatal(err)
	}
	return cl.frames[0]
}

func rxStack(t testing.TB) *Stack {
	st, err := New(Config{Link: newCaptureLink(stackMAC), Clock: clock.NewManual(time.Unix(1_000_000, 0)),
		Addrs: []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24"), netip.MustParsePrefix("2001:db8::10/64")}})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func fixIPv4(f []byte) {
	f[24], f[25] = 0, 0
	binary.BigEndian.PutUint16(f[24:], header.Checksum(f[14:14+int(f[14]&0xf)*4]))
}

func TestReceiveGood(t *testing.T) {
	h := newHarness(t, nil)
	for _, tc := range []struct {
		v6, zero bool
	}{{false, false}, {true, false}, {true, true}} {
		f := peerFrame(t, tc.v6, 100, tc.zero)
		h.inject(f)
		p := <-h.rx
		want := peerV4
		ipLen := 20
		if tc.v6 {
			want, ipLen = peerV6, 40
		}
		if p.Src != want || p.SrcPort != 0xc0de || p.TrafficClass != 0x12 || p.HopLimit != 9 ||
			len(p.IPHeader) != ipLen || len(p.Transport) != 12+100+4 || string(p.Frame) != string(f) {
			t.Fatalf("v6=%v: delivered %+v", tc.v6, p)
		}
		if wire.BTH(p.Transport).DestQP() != 0x11 || wire.BTH(p.Transport).PSN() != 0x123456 {
			t.Fatal("transport bytes wrong")
		}
	}
	// IPv4 with a correct non-zero UDP checksum is accepted too.
	f := peerFrame(t, false, 20, false)
	binary.BigEndian.PutUint16(f[40:], header.L4Checksum(peerV4, myV4, 17, f[34:]))
	h.inject(f)
	if p := <-h.rx; p.Src != peerV4 {
		t.Fatal("checksummed IPv4 not delivered")
	}
	if n := h.st.Counters().RoCEIn.Load(); n != 4 {
		t.Fatalf("RoCEIn = %d", n)
	}
}

func TestReceiveDrops(t *testing.T) {
	st := rxStack(t)
	defer st.Close()
	good4 := peerFrame(t, false, 64, false)
	good6 := peerFrame(t, true, 64, false)
	mod := func(f []byte, fn func([]byte)) []byte {
		c := append([]byte(nil), f...)
		fn(c)
		return c
	}
	cases := []struct {
		name    string
		frame   []byte
		counter *uint64
		ctr     func(*Counters) uint64
	}{
		{"bad IPv4 checksum", mod(good4, func(f []byte) { f[24] ^= 0xff }), nil, func(c *Counters) uint64 { return c.BadIPChecksum.Load() }},
		{"bad ICRC v4", mod(good4, func(f []byte) { f[len(f)-1] ^= 1 }), nil, func(c *Counters) uint64 { return c.ICRCErrors.Load() }},
		{"bad ICRC v4 payload", mod(good4, func(f []byte) { f[60] ^= 0x80 }), nil, func(c *Counters) uint64 { return c.ICRCErrors.Load() }},
		{"bad ICRC v6", mod(good6, func(f []byte) { f[len(f)-2] ^= 1; binary.BigEndian.PutUint16(f[60:], 0) }), nil, func(c *Counters) uint64 { return c.ICRCErrors.Load() }},
		{"bad UDP checksum v6", mod(good6, func(f []byte) { f[61] ^= 1 }), nil, func(c *Counters) uint64 { return c.BadUDPChecksum.Load() }},
		{"bad UDP checksum v4", mod(good4, func(f []byte) { f[40], f[41] = 0x12, 0x34 }), nil, func(c *Counters) uint64 { return c.BadUDPChecksum.Load() }},
		{"truncated IP", good4[:14+10], nil, func(c *Counters) uint64 { return c.Malformed.Load() }},
		{"truncated UDP payload", good4[:len(good4)-10], nil, func(c *Counters) uint64 { return c.Malformed.Load() }},
		{"runt", good4[:8], nil, func(c *Counters) uint64 { return c.Malformed.Load() }},
		{"short RoCE", mod(good4, func(f []byte) {}), nil, nil},
		{"fragment", mod(good4, func(f []byte) { f[20] = 0x20; fixIPv4(f) }), nil, func(c *Counters) uint64 { return c.Fragments.Load() }},
		{"options", mod(good4, func(f []byte) { f[14] = 0x46; fixIPv4(f) }), nil, func(c *Counters) uint64 { return c.Malformed.Load() }},
		{"other IP", mod(good4, func(f []byte) { f[33] = 99; fixIPv4(f) }), nil, func(c *Counters) uint64 { return c.NotForUs.Load() }},
		{"other MAC", mod(good4, func(f []byte) { f[5] ^= 0x40 }), nil, func(c *Counters) uint64 { return c.NotForUs.Load() }},
		{"other port", mod(good4, func(f []byte) { f[37] = 0x54 }), nil, func(c *Counters) uint64 { return c.NonRoCE.Load() }},
		{"UDP length lies", mod(good4, func(f []byte) { binary.BigEndian.PutUint16(f[38:], 9) }), nil, func(c *Counters) uint64 { return c.Malformed.Load() }},
		{"IPv6 length lies", mod(good6, func(f []byte) { binary.BigEndian.PutUint16(f[18:], 5000) }), nil, func(c *Counters) uint64 { return c.Malformed.Load() }},
		{"VLAN", mod(good4, func(f []byte) { f[12], f[13] = 0x81, 0 }), nil, func(c *Counters) uint64 { return c.NonRoCE.Load() }},
	}
	for _, tc := range cases {
		if tc.ctr == nil {
			continue
		}
		before := tc.ctr(&st.ctr)
		if _, ok := st.input(tc.frame); ok {
			t.Errorf("%s: delivered", tc.name)
		}
		if tc.ctr(&st.ctr) != before+1 {
			t.Errorf("%s: counter not incremented: %v", tc.name, st.ctr.Map())
		}
	}
	if _, ok := st.input(good4); !ok {
		t.Fatal("good frame rejected after the bad ones")
	}
	// Every truncation of a good frame is dropped without a panic.
	for _, g := range [][]byte{good4, good6} {
		for n := range len(g) {
			if _, ok := st.input(append([]byte(nil), g[:n]...)); ok {
				t.Fatalf("truncated to %d delivered", n)
			}
		}
	}
}

func FuzzInput(f *testing.F) {
	f.Add(peerFrame(f, false, 16, false))
	f.Add(peerFrame(f, true, 16, false))
	f.Add([]byte{})
	arp := make([]byte, 60)
	copy(arp, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0xbb, 0, 0, 0, 0x20, 8, 6, 0, 1, 8, 0, 6, 4, 0, 1})
	f.Add(arp)
	// Multicast: RoCE to a joined group, IGMP and MLD queries (the stack
	// is in both groups, so queries schedule answers).
	f.Add(groupFrame(f, group4))
	f.Add(groupFrame(f, group6))
	f.Add(igmpQueryFrame(allSystems, netip.Addr{}, 100, true))
	f.Add(igmpQueryFrame(group4, group4, 10, false))
	f.Add(mldQueryFrame(router6, allNodes, netip.Addr{}, 1000, true))
	f.Add(mldQueryFrame(router6, group6, group6, 1000, false))
	st := rxStack(f)
	for _, g := range []netip.Addr{group4, group6} {
		if err := st.JoinGroup(g); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		orig := append([]byte(nil), b...)
		p, ok := st.input(b)
		if ok {
			if len(p.Transport) < wire.BTHLen+wire.ICRCLen || (len(p.IPHeader) != 20 && len(p.IPHeader) != 40) {
				t.Fatalf("delivered a malformed packet: %+v", p)
			}
			if string(b) != string(orig) {
				t.Fatal("delivered frame was modified")
			}
		}
	})
}

type countTap struct {
	mu     sync.Mutex
	frames [][]byte
}

func (c *countTap) WriteFrame(f []byte) error {
	c.mu.Lock()
	c.frames = append(c.frames, append([]byte(nil), f...))
	c.mu.Unlock()
	return nil
}

// TestFrameTap: every RoCE frame sent and received reaches the tap (for
// --pcap), control traffic does not.
func TestFrameTap(t *testing.T) {
	tap := &countTap{}
	h := newHarness(t, func(c *Config) { c.Tap = tap })
	in := peerFrame(t, false, 10, false)
	h.inject(in)
	<-h.rx
	h.st.neigh.confirm(peerV4, [6]byte(peerMAC), true)
	if _, err := h.st.Send([]TxPacket{{Buf: transport(10), Offset: Headroom, Dest: &Dest{Dst: peerV4}}}); err != nil {
		t.Fatal(err)
	}
	out := h.next()
	tap.mu.Lock()
	defer tap.mu.Unlock()
	if len(tap.frames) != 2 || string(tap.frames[0]) != string(in) || string(tap.frames[1]) != string(out) {
		t.Fatalf("tap saw %d frames", len(tap.frames))
	}
}
