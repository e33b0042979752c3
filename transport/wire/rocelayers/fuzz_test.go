package rocelayers

import (
	"bytes"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/vrnic/vrnicd/transport/wire"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/rocetest"
)

// goldenRoCE returns the UDP payloads (BTH..ICRC) of every golden packet.
func goldenRoCE(t testing.TB) [][]byte {
	t.Helper()
	files, err := rocetest.Files()
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, path := range files {
		frames, err := rocetest.ReadFrames(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, fr := range frames {
			pkt := gopacket.NewPacket(fr.Data, layers.LayerTypeEthernet, gopacket.NoCopy)
			if udp, ok := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP); ok && udp.DstPort == wire.RoCEv2Port {
				out = append(out, bytes.Clone(udp.Payload))
			}
		}
	}
	return out
}

// FuzzLayers: the layer chain from the BTH never panics, decodes exactly
// when wire.Parse accepts the bytes, agrees with it field for field, and
// serializes a fully decoded packet back to the same bytes.
func FuzzLayers(f *testing.F) {
	for _, b := range goldenRoCE(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var rl Layers
		p := gopacket.NewDecodingLayerParser(LayerTypeBTH, rl.DecodingLayers()...)
		p.IgnorePanic = true
		var decoded []gopacket.LayerType
		err := p.DecodeLayers(data, &decoded)
		var wp wire.Packet
		werr := wp.Parse(data)
		if (werr == nil) != (len(decoded) > 0) {
			t.Fatalf("wire.Parse %v, layers %v (%v)", werr, decoded, err)
		}
		if werr == nil {
			checkAgainstWire(t, &rl, data)
		}
		if err == nil && werr == nil {
			if out := serialize(t, gopacket.SerializeOptions{}, rl.Serializable(decoded)...); !bytes.Equal(out, data) {
				t.Fatalf("re-serialized\n got %x\nwant %x", out, data)
			}
		}
		pkt := gopacket.NewPacket(data, LayerTypeBTH, gopacket.DecodeOptions{SkipDecodeRecovery: true})
		if (pkt.ErrorLayer() == nil) != (err == nil) {
			t.Fatalf("NewPacket error %v, parser error %v", pkt.ErrorLayer(), err)
		}
	})
}

// FuzzMAD: the MAD layer never panics, serializes what it decoded byte for
// byte, and a decoded CM message re-encodes to the bytes it came from with
// only reserved bits cleared (checked by re-decoding).
func FuzzMAD(f *testing.F) {
	for _, b := range goldenRoCE(f) {
		if len(b) == wire.BTHLen+wire.DETHLen+mad.Size+wire.ICRCLen {
			f.Add(b[wire.BTHLen+wire.DETHLen : len(b)-wire.ICRCLen])
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m MAD
		if err := m.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			return
		}
		if out := serialize(t, gopacket.SerializeOptions{}, &m); !bytes.Equal(out, data) {
			t.Fatalf("re-serialized MAD differs")
		}
		if m.CM == nil {
			return
		}
		enc := mad.AppendCM(nil, m.Header, m.CM)
		_, again, err := mad.Decode(enc)
		if err != nil {
			t.Fatal(err)
		}
		enc2 := mad.AppendCM(nil, m.Header, again)
		if !bytes.Equal(enc, enc2) {
			t.Fatal("CM encode/decode not stable")
		}
	})
}
