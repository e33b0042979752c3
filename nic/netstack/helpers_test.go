package netstack

import (
	"context"
	"encoding/binary"
	"errors"
	"github.com/vrnic/vrnicd/header"
	"github.com/vrnic/vrnicd/transport/clock"
	"io"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/vrnic/vrnicd/nic/link"
	"github.com/vrnic/vrnicd/transport/wire"
)

var (
	stackMAC = net.HardwareAddr{0x02, 0xaa, 0, 0, 0, 0x10}
	peerMAC  = net.HardwareAddr{0x02, 0xbb, 0, 0, 0, 0x20}
	myV4     = netip.MustParseAddr("192.0.2.10")
	peerV4   = netip.MustParseAddr("192.0.2.20")
	myV6     = netip.MustParseAddr("2001:db8::10")
	peerV6   = netip.MustParseAddr("2001:db8::20")
	myLL     = netip.MustParseAddr("fe80::aa:ff:fe00:10")
	peerLL   = netip.MustParseAddr("fe80::bb:ff:fe00:20")
)

type harness struct {
	t      *testing.T
	st     *Stack
	peer   *link.PipeEnd
	clock  *clock.Manual
	rx     chan RxPacket
	frames chan []byte // what the stack sent, read by one goroutine
}

// newHarness runs a TAP-mode stack on one end of a pipe; the test plays
// the peer host on the other end. The start-up announcements are consumed.
func newHarness(t *testing.T, mod func(*Config)) *harness {
	t.Helper()
	a, b := link.NewPipe(link.PipeConfig{MTU: 9000, MAC: [2]net.HardwareAddr{stackMAC, peerMAC}})
	h := &harness{t: t, peer: b, clock: clock.NewManual(time.Unix(1_000_000, 0)), rx: make(chan RxPacket, 1024), frames: make(chan []byte, 1024)}
	go func() {
		bufs := [][]byte{make([]byte, 9100)}
		sizes := []int{0}
		for {
			if _, err := b.Read(bufs, sizes, 0); err != nil {
				return
			}
			h.frames <- append([]byte(nil), bufs[0][:sizes[0]]...)
		}
	}()
	cfg := Config{
		Link:  a,
		Addrs: []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24"), netip.MustParsePrefix("2001:db8::10/64")},
		Clock: h.clock,
		Deliver: func(pkts []RxPacket) {
			for _, p := range pkts {
				// Copy: the buffers are reused after Deliver returns.
				f := append([]byte(nil), p.Frame...)
				q := p
				q.Frame = f
				q.IPHeader = f[14 : 14+len(p.IPHeader)]
				q.Transport = f[len(f)-len(p.Transport):]
				h.rx <- q
			}
		},
	}
	if mod != nil {
		mod(&cfg)
	}
	st, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.st = st
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		st.Close()
		b.Close()
	})
	// A gratuitous ARP or unsolicited NA per address.
	for range st.Addrs() {
		h.next()
	}
	return h
}

// next returns the next frame the stack sent, failing after 2 s.
func (h *harness) next() []byte {
	h.t.Helper()
	f, ok := h.tryNext(2 * time.Second)
	if !ok {
		h.t.Fatal("timed out waiting for a frame from the stack")
	}
	return f
}

func (h *harness) tryNext(d time.Duration) ([]byte, bool) {
	select {
	case f := <-h.frames:
		return f, true
	case <-time.After(d):
		return nil, false
	}
}

// quiet asserts the stack sends nothing for a while.
func (h *harness) quiet() {
	h.t.Helper()
	if f, ok := h.tryNext(100 * time.Millisecond); ok {
		h.t.Fatalf("unexpected frame % x", f)
	}
}

func (h *harness) inject(f []byte) {
	h.t.Helper()
	if _, err := h.peer.Write([][]byte{f}, 0); err != nil {
		h.t.Fatal(err)
	}
}

// arpFrame is an ARP message from src to dst, padded to Ethernet's minimum.
func arpFrame(dst, src net.HardwareAddr, f header.ARPFields) []byte {
	b := make([]byte, 60)
	header.Ethernet(b).Encode([6]byte(dst), [6]byte(src), header.EtherTypeARP)
	header.ARP(b[header.EthernetHeaderLen:]).Encode(&f)
	return b
}

// serialize builds a frame from gopacket layers with checksums computed.
func serialize(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	for _, l := range ls {
		switch x := l.(type) {
		case *layers.UDP:
			x.SetNetworkLayerForChecksum(ls[1].(gopacket.NetworkLayer))
		case *layers.ICMPv6:
			x.SetNetworkLayerForChecksum(ls[1].(gopacket.NetworkLayer))
		}
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// checksumsOK re-serializes a decoded frame with gopacket computing every
// checksum and reports whether the bytes match (an independent check of
// our checksums).
func checksumsOK(t *testing.T, f []byte) bool {
	t.Helper()
	p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
	var ls []gopacket.SerializableLayer
	for _, l := range p.Layers() {
		if ic, ok := l.(*layers.ICMPv6); ok {
			// The ICMPv6 message bodies do not all re-serialize; the
			// checksum only needs the bytes.
			ls = append(ls, ic, gopacket.Payload(ic.LayerPayload()))
			break
		}
		sl, ok := l.(gopacket.SerializableLayer)
		if !ok {
			if l.LayerType() == gopacket.LayerTypePayload {
				ls = append(ls, gopacket.Payload(l.LayerContents()))
				continue
			}
			t.Fatalf("layer %v not serializable", l.LayerType())
		}
		ls = append(ls, sl)
	}
	for _, l := range ls {
		switch x := l.(type) {
		case *layers.ICMPv6:
			x.SetNetworkLayerForChecksum(p.NetworkLayer())
		case *layers.UDP:
			x.SetNetworkLayerForChecksum(p.NetworkLayer())
		}
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	got := buf.Bytes()
	if len(got) < len(f) { // Ethernet padding is not re-serialized
		f = f[:len(got)]
	}
	return string(got) == string(f[:len(got)])
}

// transport returns a minimal RC SEND_ONLY packet (BTH + payload + ICRC
// space) at buf[Headroom:].
func transport(payload int) []byte {
	b := make([]byte, Headroom+wire.BTHLen+payload+wire.ICRCLen)
	bth := wire.BTH(b[Headroom:])
	bth.SetOpcode(0x04)
	bth.SetPKey(0xffff)
	bth.SetDestQP(0x11)
	bth.SetPSN(0x123456)
	bth.SetAckReq(true)
	for i := range payload {
		b[Headroom+wire.BTHLen+i] = byte(i)
	}
	return b
}

// goldenIPv4 returns the first RoCEv2 frame of a kernel rxe capture.
func goldenIPv4(t testing.TB) []byte {
	f, err := os.Open("../../testdata/roce/rc_send_only.pcap")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	for {
		d, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			t.Fatal("no RoCE frame in capture")
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(d) > 42 && binary.BigEndian.Uint16(d[12:]) == 0x0800 && d[23] == 17 && binary.BigEndian.Uint16(d[36:]) == 4791 {
			return d
		}
	}
}
