package rocetest

import (
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/vrnic/vrnicd/header"
	"github.com/vrnic/vrnicd/transport/wire"
)

// A built frame decodes, in gopacket and in wire, to what was asked for,
// and its ICRC verifies.
func TestBuildFrame(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		s := &FrameSpec{DstMAC: [6]byte{2, 0, 0, 0, 0, 2}, SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, V6: v6, Packet: wire.PacketFields{
			BTH:     wire.BTHFields{Opcode: wire.UDSendOnly, PKey: 0xffff, DestQP: 0x123456, PSN: 7},
			DETH:    wire.DETHFields{QKey: 0x11111111, SrcQP: 0x22},
			Payload: []byte{1, 2, 3, 4, 5},
		}}
		f := BuildFrame(s)
		p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
		udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if p.ErrorLayer() != nil || udp == nil || udp.DstPort != wire.RoCEv2Port || udp.SrcPort != 49152 {
			t.Fatalf("v6=%v: gopacket reads %v", v6, p)
		}
		ip := f[header.EthernetHeaderLen:]
		if !v6 && !header.IPv4(ip).ChecksumValid() {
			t.Errorf("IPv4 checksum wrong")
		}
		if err := wire.VerifyICRC(ip); err != nil {
			t.Errorf("v6=%v: %v", v6, err)
		}
		var pk wire.Packet
		if err := pk.Parse(udp.Payload); err != nil {
			t.Fatal(err)
		}
		if g := pk.Fields(); g.BTH.DestQP != 0x123456 || g.BTH.PSN != 7 || g.DETH != s.Packet.DETH || string(g.Payload) != "\x01\x02\x03\x04\x05" {
			t.Errorf("v6=%v: fields %+v", v6, g)
		}
	}
}
