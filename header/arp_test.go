package header

import (
	"bytes"
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket/layers"
)

// An ARP reply built with the Ethernet and ARP views is the frame gopacket
// builds, and the views read gopacket's request back.
func TestARPMatchesGopacket(t *testing.T) {
	src, dst := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
	sip, tip := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	f := make([]byte, EthernetHeaderLen+ARPLen)
	Ethernet(f).Encode(dst, src, EtherTypeARP)
	ARP(f[EthernetHeaderLen:]).Encode(&ARPFields{Op: ARPReply, SenderMAC: src, SenderIP: sip.As4(), TargetMAC: dst, TargetIP: tip.As4()})
	want := serialize(t, &layers.Ethernet{SrcMAC: src[:], DstMAC: dst[:], EthernetType: layers.EthernetTypeARP}, &layers.ARP{
		AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
		Operation: layers.ARPReply, SourceHwAddress: src[:], SourceProtAddress: sip.AsSlice(),
		DstHwAddress: dst[:], DstProtAddress: tip.AsSlice()})
	// gopacket pads the frame to Ethernet's 60 bytes.
	if !bytes.Equal(f, want[:len(f)]) || !bytes.Equal(want[len(f):], make([]byte, len(want)-len(f))) {
		t.Fatalf("views build\n% x\ngopacket\n% x", f, want)
	}

	req := serialize(t, &layers.Ethernet{SrcMAC: dst[:], DstMAC: net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, EthernetType: layers.EthernetTypeARP}, &layers.ARP{
		AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
		Operation: layers.ARPRequest, SourceHwAddress: dst[:], SourceProtAddress: tip.AsSlice(),
		DstHwAddress: make([]byte, 6), DstProtAddress: sip.AsSlice()})
	e, a := Ethernet(req), ARP(req[EthernetHeaderLen:])
	if e.Type() != EtherTypeARP || e.Src() != dst || e.Dst() != [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff} {
		t.Fatalf("Ethernet %v > %v type %#x", e.Src(), e.Dst(), e.Type())
	}
	if !a.IsIPv4OverEthernet() || a.Op() != ARPRequest || a.SenderMAC() != dst || a.SenderIP() != tip ||
		a.TargetMAC() != [6]byte{} || a.TargetIP() != sip {
		t.Fatalf("ARP op %d %v/%v asks %v/%v", a.Op(), a.SenderMAC(), a.SenderIP(), a.TargetMAC(), a.TargetIP())
	}
}

// IsIPv4OverEthernet rejects what the accessors would misread.
func TestARPNotIPv4OverEthernet(t *testing.T) {
	good := make([]byte, ARPLen)
	ARP(good).Encode(&ARPFields{Op: ARPRequest})
	for name, mangle := range map[string]func(b []byte) []byte{
		"short":    func(b []byte) []byte { return b[:ARPLen-1] },
		"hardware": func(b []byte) []byte { b[1] = 6; return b },
		"protocol": func(b []byte) []byte { b[2], b[3] = 0x86, 0xdd; return b },
		"hlen":     func(b []byte) []byte { b[4] = 8; return b },
		"plen":     func(b []byte) []byte { b[5] = 16; return b },
	} {
		if ARP(mangle(bytes.Clone(good))).IsIPv4OverEthernet() {
			t.Errorf("%s: accepted", name)
		}
	}
	if !ARP(good).IsIPv4OverEthernet() {
		t.Error("Encode's message rejected")
	}
}

func TestARPViewsDoNotAllocate(t *testing.T) {
	f := make([]byte, EthernetHeaderLen+ARPLen)
	fields := &ARPFields{Op: ARPRequest, SenderMAC: [6]byte{2}, SenderIP: [4]byte{192, 0, 2, 1}, TargetIP: [4]byte{192, 0, 2, 2}}
	n := testing.AllocsPerRun(100, func() {
		Ethernet(f).Encode([6]byte{0xff}, fields.SenderMAC, EtherTypeARP)
		a := ARP(f[EthernetHeaderLen:])
		a.Encode(fields)
		_ = a.IsIPv4OverEthernet() && a.TargetIP() == a.SenderIP()
	})
	if n != 0 {
		t.Errorf("%v allocations", n)
	}
}
