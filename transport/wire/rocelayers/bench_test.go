package rocelayers

import (
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/vrnic/vrnicd/transport/wire"
)

// benchFrame is an Ethernet/IPv4/UDP RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE with
// RETH, ImmDt and 64 bytes of payload (the headers of wire's BenchmarkParse).
func benchFrame(b testing.TB) (frame, roce []byte) {
	f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAWriteOnlyWithImm, PKey: wire.DefaultPKey, DestQP: 0x11, AckReq: true, PSN: 9},
		RETH: wire.RETHFields{VA: 0x1000, RKey: 0x1234, Length: 64}, Imm: 5, Payload: make([]byte, 64)}
	r := make([]byte, f.EncodedLen())
	f.Encode(r)
	frame = frameOf(b, r, false, false)
	return frame, frame[14+20+8:]
}

// BenchmarkDecode compares, on the same packet, the gopacket
// DecodingLayerParser path (whole frame, and from the BTH on), the
// allocating gopacket.NewPacket path, and the baseline wire.Packet.Parse
// that the data path uses.
func BenchmarkDecode(b *testing.B) {
	frame, roce := benchFrame(b)
	var sink uint32

	b.Run("wire.Parse/roce", func(b *testing.B) {
		b.ReportAllocs()
		var p wire.Packet
		for b.Loop() {
			if err := p.Parse(roce); err != nil {
				b.Fatal(err)
			}
			sink += p.BTH.PSN() + p.RETH.RKey() + p.ImmDt.Imm() + uint32(len(p.Payload))
		}
	})
	b.Run("DecodingLayerParser/roce", func(b *testing.B) {
		var rl Layers
		p := gopacket.NewDecodingLayerParser(LayerTypeBTH, rl.DecodingLayers()...)
		decoded := make([]gopacket.LayerType, 0, 8)
		b.ReportAllocs()
		for b.Loop() {
			if err := p.DecodeLayers(roce, &decoded); err != nil {
				b.Fatal(err)
			}
			sink += rl.BTH.PSN + rl.RETH.RKey + rl.ImmDt.Imm + uint32(len(rl.Payload))
		}
	})
	b.Run("DecodingLayerParser/frame", func(b *testing.B) {
		var (
			eth layers.Ethernet
			ip4 layers.IPv4
			udp layers.UDP
			rl  Layers
		)
		p := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, append([]gopacket.DecodingLayer{&eth, &ip4, &udp}, rl.DecodingLayers()...)...)
		decoded := make([]gopacket.LayerType, 0, 8)
		b.ReportAllocs()
		for b.Loop() {
			if err := p.DecodeLayers(frame, &decoded); err != nil {
				b.Fatal(err)
			}
			sink += rl.BTH.PSN + rl.RETH.RKey + rl.ImmDt.Imm + uint32(len(rl.Payload))
		}
	})
	b.Run("NewPacket/frame", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.NoCopy)
			sink += pkt.Layer(LayerTypeBTH).(*BTH).PSN
		}
	})
	_ = sink
}

// The DecodingLayerParser path does not allocate (a property, not a
// timing): the layers decode into the preallocated set.
func TestDecodingLayerParserDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	frame, _ := benchFrame(t)
	var (
		eth layers.Ethernet
		ip4 layers.IPv4
		udp layers.UDP
		rl  Layers
	)
	p := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, append([]gopacket.DecodingLayer{&eth, &ip4, &udp}, rl.DecodingLayers()...)...)
	decoded := make([]gopacket.LayerType, 0, 8)
	if n := testing.AllocsPerRun(100, func() {
		if err := p.DecodeLayers(frame, &decoded); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%v allocations per decode", n)
	}
}
