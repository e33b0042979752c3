package header

import (
	"bytes"
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// roceV2Port is RoCEv2's UDP port (wire.RoCEv2Port; header imports nothing
// of the project).
const roceV2Port = 4791

// serialize is gopacket's rendering of ls with lengths and checksums
// computed: an implementation independent of the views.
func serialize(t *testing.T, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A UDP datagram built with the views, checksum included, is the one
// gopacket builds, over IPv4 and IPv6.
func TestUDPChecksumMatchesGopacket(t *testing.T) {
	payload := []byte("RoCEv2 payload, odd length")
	for _, pair := range [][2]string{{"192.0.2.1", "198.51.100.2"}, {"2001:db8::1", "2001:db8::2"}} {
		src, dst := netip.MustParseAddr(pair[0]), netip.MustParseAddr(pair[1])
		udpl := &layers.UDP{SrcPort: 0xc123, DstPort: roceV2Port}
		var ipl gopacket.NetworkLayer
		var hlen int
		got := make([]byte, IPv6HeaderLen+UDPHeaderLen+len(payload))
		if src.Is4() {
			l := &layers.IPv4{Version: 4, IHL: 5, TOS: 0x02, Id: 7, Flags: layers.IPv4DontFragment, TTL: 64,
				Protocol: layers.IPProtocolUDP, SrcIP: net.IP(src.AsSlice()), DstIP: net.IP(dst.AsSlice())}
			ipl, hlen = l, IPv4HeaderLen
			IPv4(got).Encode(&IPv4Fields{TOS: 0x02, TotalLen: uint16(hlen + UDPHeaderLen + len(payload)), ID: 7,
				Flags: IPv4DontFragment, TTL: 64, Protocol: IPProtoUDP, Src: src.As4(), Dst: dst.As4()})
		} else {
			l := &layers.IPv6{Version: 6, TrafficClass: 0x02, FlowLabel: 0x12345, NextHeader: layers.IPProtocolUDP,
				HopLimit: 64, SrcIP: net.IP(src.AsSlice()), DstIP: net.IP(dst.AsSlice())}
			ipl, hlen = l, IPv6HeaderLen
			IPv6(got).Encode(&IPv6Fields{TrafficClass: 0x02, FlowLabel: 0x12345, PayloadLen: uint16(UDPHeaderLen + len(payload)),
				NextHeader: IPProtoUDP, HopLimit: 64, Src: src.As16(), Dst: dst.As16()})
		}
		got = got[:hlen+UDPHeaderLen+len(payload)]
		udpl.SetNetworkLayerForChecksum(ipl)
		want := serialize(t, ipl.(gopacket.SerializableLayer), udpl, gopacket.Payload(payload))
		u := UDP(got[hlen:])
		u.Encode(0xc123, roceV2Port, uint16(UDPHeaderLen+len(payload)))
		copy(u[UDPHeaderLen:], payload)
		u.SetChecksum(UDPChecksum(src, dst, u))
		if !bytes.Equal(got, want) {
			t.Errorf("%v: views build\n% x\ngopacket\n% x", src, got, want)
		}
		if L4Checksum(src, dst, IPProtoUDP, u) != 0 {
			t.Errorf("%v: the datagram's own checksum does not verify", src)
		}
	}
}

// A neighbour advertisement built with the views is the one gopacket
// builds, and the views read gopacket's back.
func TestICMPv6NAMatchesGopacket(t *testing.T) {
	src, dst := netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("fe80::2")
	mac := [6]byte{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}
	ip6 := &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: 255,
		SrcIP: net.IP(src.AsSlice()), DstIP: net.IP(dst.AsSlice())}
	icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborAdvertisement, 0)}
	icmp.SetNetworkLayerForChecksum(ip6)
	na := &layers.ICMPv6NeighborAdvertisement{Flags: NASolicited | NAOverride, TargetAddress: net.IP(src.AsSlice()),
		Options: layers.ICMPv6Options{{Type: layers.ICMPv6OptTargetAddress, Data: mac[:]}}}
	want := serialize(t, ip6, icmp, na)

	got := make([]byte, IPv6HeaderLen+NDHeaderLen+8)
	IPv6(got).Encode(&IPv6Fields{PayloadLen: NDHeaderLen + 8, NextHeader: IPProtoICMPv6, HopLimit: 255, Src: src.As16(), Dst: dst.As16()})
	m := ICMPv6(got[IPv6HeaderLen:])
	m.SetType(ICMPv6NeighborAdvert)
	m.SetNAFlags(NASolicited | NAOverride)
	m.SetTarget(src.As16())
	PutNDLinkAddr(m.NDOptions(), NDOptTargetLinkAddr, mac)
	m.UpdateChecksum(src, dst)
	if !bytes.Equal(got, want) {
		t.Fatalf("views build\n% x\ngopacket\n% x", got, want)
	}

	r := ICMPv6(want[IPv6HeaderLen:])
	h := IPv6(want)
	tll, found, bad := NDLinkAddr(r.NDOptions(), NDOptTargetLinkAddr)
	if h.NextHeader() != IPProtoICMPv6 || h.HopLimit() != 255 || h.Src() != src || h.Dst() != dst ||
		r.Type() != ICMPv6NeighborAdvert || r.Code() != 0 || r.NAFlags() != NASolicited|NAOverride ||
		r.Target() != src || !found || bad || tll != mac || !r.ChecksumValid(src, dst) {
		t.Fatalf("read back: next %d hop %d %v>%v type %d code %d flags %#x target %v tll %v,%v,%v checksum ok %v",
			h.NextHeader(), h.HopLimit(), h.Src(), h.Dst(), r.Type(), r.Code(), r.NAFlags(), r.Target(), tll, found, bad, r.ChecksumValid(src, dst))
	}
	r[len(r)-1] ^= 1
	if r.ChecksumValid(src, dst) {
		t.Error("a flipped bit still verifies")
	}
}

// NDLinkAddr walks the options as RFC 4861 §4.6 lays them out and reports
// a zero length or an option past the end as bad.
func TestNDLinkAddrBadOptions(t *testing.T) {
	mac := [6]byte{2, 0, 0, 0, 0, 1}
	opts := make([]byte, 16)
	opts[0], opts[1] = 14, 1 // an unknown option first (nonce), skipped
	PutNDLinkAddr(opts[8:], NDOptSourceLinkAddr, mac)
	if got, found, bad := NDLinkAddr(opts, NDOptSourceLinkAddr); got != mac || !found || bad {
		t.Errorf("found %v %v bad %v", got, found, bad)
	}
	if _, found, bad := NDLinkAddr(opts, NDOptTargetLinkAddr); found || bad {
		t.Errorf("absent option: found %v bad %v", found, bad)
	}
	for _, b := range [][]byte{{1, 0, 0, 0, 0, 0, 0, 0}, {1, 2, 0, 0, 0, 0, 0, 0}, {1}} {
		if _, _, bad := NDLinkAddr(b, NDOptSourceLinkAddr); !bad {
			t.Errorf("% x: not reported bad", b)
		}
	}
}

// An echo request built with the ICMPv4 view is gopacket's.
func TestICMPv4EchoMatchesGopacket(t *testing.T) {
	payload := []byte("vrnicd")
	want := serialize(t, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(ICMPv4EchoRequest, 0), Id: 0x1234, Seq: 7}, gopacket.Payload(payload))
	got := make([]byte, ICMPHeaderLen+len(payload))
	m := ICMPv4(got)
	m.SetType(ICMPv4EchoRequest)
	m.SetIdent(0x1234)
	m.SetSeq(7)
	copy(got[ICMPHeaderLen:], payload)
	m.UpdateChecksum()
	if !bytes.Equal(got, want) {
		t.Fatalf("views build % x, gopacket % x", got, want)
	}
	if m.Type() != ICMPv4EchoRequest || m.Code() != 0 || m.Ident() != 0x1234 || m.Seq() != 7 || Checksum(m) != 0 {
		t.Fatalf("read back type %d code %d id %#x seq %d", m.Type(), m.Code(), m.Ident(), m.Seq())
	}
}

// The views allocate nothing (the engine's and the stack's hot paths use
// them per packet).
func TestHeaderViewsDoNotAllocate(t *testing.T) {
	b := make([]byte, IPv6HeaderLen+UDPHeaderLen+64)
	src, dst := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	f := &IPv4Fields{TotalLen: uint16(len(b)), TTL: 64, Protocol: IPProtoUDP, Src: src.As4(), Dst: dst.As4()}
	n := testing.AllocsPerRun(100, func() {
		IPv4(b).Encode(f)
		u := UDP(b[IPv4HeaderLen:])
		u.Encode(1, roceV2Port, uint16(len(b)-IPv4HeaderLen))
		u.SetChecksum(UDPChecksum(IPv4(b).Src(), IPv4(b).Dst(), u))
		_ = IPv4(b).ChecksumValid()
	})
	if n != 0 {
		t.Errorf("%v allocations per packet", n)
	}
}
