package rocelayers

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net"
	"reflect"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/vrnic/vrnicd/header"
	"github.com/vrnic/vrnicd/transport/wire"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
)

// allOpcodes is every opcode of the wire table.
func allOpcodes() []wire.Opcode {
	var out []wire.Opcode
	for o := range 256 {
		if wire.Opcode(o).Valid() {
			out = append(out, wire.Opcode(o))
		}
	}
	return out
}

// randomPacket encodes a packet of opcode o with random fields through the
// wire encoder.
func randomPacket(r *rand.Rand, o wire.Opcode, payload int) []byte {
	f := wire.PacketFields{
		BTH: wire.BTHFields{Opcode: o, SE: r.IntN(2) == 0, MigReq: r.IntN(2) == 0, PKey: uint16(r.Uint32()),
			FECN: r.IntN(2) == 0, BECN: r.IntN(2) == 0, DestQP: r.Uint32() & 0xFFFFFF, AckReq: r.IntN(2) == 0,
			PSN: r.Uint32() & 0xFFFFFF},
		DETH:         wire.DETHFields{QKey: r.Uint32(), SrcQP: r.Uint32() & 0xFFFFFF},
		RETH:         wire.RETHFields{VA: r.Uint64(), RKey: r.Uint32(), Length: r.Uint32()},
		AtomicETH:    wire.AtomicETHFields{VA: r.Uint64(), RKey: r.Uint32(), SwapAdd: r.Uint64(), Compare: r.Uint64()},
		AETH:         wire.AETHFields{Syndrome: uint8(r.Uint32()), MSN: r.Uint32() & 0xFFFFFF},
		AtomicAckETH: r.Uint64(), Imm: r.Uint32(), IETH: r.Uint32(),
		FETH:    wire.FETHFields{Selectivity: uint8(r.IntN(4)), Placement: uint8(r.IntN(16))},
		Payload: make([]byte, payload),
	}
	for i := range f.Payload {
		f.Payload[i] = byte(r.Uint32())
	}
	out := make([]byte, f.EncodedLen())
	f.Encode(out)
	return out
}

// frameOf wraps a RoCE packet in Ethernet/IPv4 (or IPv6)/UDP and seals it.
func frameOf(t testing.TB, roce []byte, v6 bool, udpChecksum bool) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}
	udp := &layers.UDP{SrcPort: 49152, DstPort: wire.RoCEv2Port}
	var ip gopacket.SerializableLayer
	if v6 {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip6 := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP,
			SrcIP: net.ParseIP("2001:db8::1"), DstIP: net.ParseIP("2001:db8::2"), FlowLabel: 0x12345, TrafficClass: 0x88}
		_ = udp.SetNetworkLayerForChecksum(ip6)
		ip = ip6
	} else {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip4 := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, Flags: layers.IPv4DontFragment,
			SrcIP: net.IPv4(192, 0, 2, 1), DstIP: net.IPv4(192, 0, 2, 2), Id: 7}
		_ = udp.SetNetworkLayerForChecksum(ip4)
		ip = ip4
	}
	frame := serialize(t, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: udpChecksum},
		eth, ip, udp, gopacket.Payload(roce))
	if err := SealFrame(frame); err != nil {
		t.Fatal(err)
	}
	return frame
}

// Every opcode of the wire table, over IPv4 and IPv6, decodes to the chain
// its headers say, agrees with wire.Parse, verifies and re-serializes.
func TestEveryOpcodeDecodes(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	fp := newFrameParser()
	for _, o := range allOpcodes() {
		info := o.Info()
		for _, payload := range []int{0, 1, 7, 64} {
			if !info.Has(wire.FlagPayload) && payload > 0 {
				continue
			}
			for _, v6 := range []bool{false, true} {
				roce := randomPacket(r, o, payload)
				frame := frameOf(t, roce, v6, true)
				if err := fp.decode(frame); err != nil {
					t.Fatalf("%s/%d: %v", o, payload, err)
				}
				if got, want := fp.roceTypes(), wantChain(info, payload, false); !reflect.DeepEqual(got, want) {
					t.Errorf("%s/%d: layers %v, want %v", o, payload, got, want)
				}
				checkAgainstWire(t, &fp.rl, fp.udp.Payload)
				if err := VerifyNetworkICRC(fp.network()); err != nil {
					t.Errorf("%s v6=%v: %v", o, v6, err)
				}
				if out := serialize(t, gopacket.SerializeOptions{}, fp.rl.Serializable(fp.decoded)...); !bytes.Equal(out, fp.udp.Payload) {
					t.Errorf("%s/%d: re-serialized\n got %x\nwant %x", o, payload, out, fp.udp.Payload)
				}
				pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.DecodeOptions{SkipDecodeRecovery: true})
				if el := pkt.ErrorLayer(); el != nil {
					t.Errorf("%s: NewPacket: %v", o, el.Error())
				}
				if err := VerifyPacketICRC(pkt); err != nil {
					t.Errorf("%s: VerifyPacketICRC: %v", o, err)
				}
			}
		}
	}
}

// A corrupted byte anywhere the ICRC covers makes the check fail.
func TestVerifyICRCDetectsCorruption(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	frame := frameOf(t, randomPacket(r, wire.RCSendOnly, 40), false, false)
	for _, off := range []int{14 + 12, 14 + 20 + 0, 14 + 20 + 8, 14 + 20 + 8 + 11, len(frame) - 5, len(frame) - 1} {
		bad := bytes.Clone(frame)
		bad[off] ^= 0x10
		pkt := gopacket.NewPacket(bad, layers.LayerTypeEthernet, gopacket.Default)
		if err := VerifyPacketICRC(pkt); !errors.Is(err, wire.ErrBadICRC) {
			t.Errorf("flip at %d: %v", off, err)
		}
	}
	pkt := gopacket.NewPacket(frame[:14+20], layers.LayerTypeEthernet, gopacket.Default)
	if err := VerifyPacketICRC(pkt); !errors.Is(err, ErrNotRoCE) {
		t.Errorf("no UDP: %v", err)
	}
	if err := VerifyNetworkICRC(&layers.UDP{}); !errors.Is(err, ErrNotRoCE) {
		t.Errorf("UDP as network layer: %v", err)
	}
}

// SealFrame's UDP checksum is the one gopacket computes over the sealed
// packet, and a frame without a UDP checksum keeps none.
func TestSealFrame(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, v6 := range []bool{false, true} {
		roce := randomPacket(r, wire.RCRDMAWriteOnly, 33)
		frame := frameOf(t, roce, v6, true)
		fp := newFrameParser()
		if err := fp.decode(frame); err != nil {
			t.Fatal(err)
		}
		sealed := bytes.Clone(fp.udp.Payload)
		again := frameOf(t, sealed, v6, true) // sealed ICRC already in place: gopacket's checksum covers it
		if !bytes.Equal(again, frame) {
			t.Errorf("v6=%v: UDP checksum %x, gopacket %x", v6, frame[len(frame)-len(roce)-2:][:2], again[len(again)-len(roce)-2:][:2])
		}
		plain := frameOf(t, roce, v6, false)
		ipLen := 20
		if v6 {
			ipLen = 40
		}
		if c := plain[14+ipLen+6 : 14+ipLen+8]; !bytes.Equal(c, []byte{0, 0}) {
			t.Errorf("v6=%v: zero UDP checksum became %x", v6, c)
		}
		if err := wire.VerifyICRC(plain[14:]); err != nil {
			t.Errorf("v6=%v: %v", v6, err)
		}
	}
	if err := SealFrame(make([]byte, 10)); !errors.Is(err, ErrNotRoCE) {
		t.Errorf("short frame: %v", err)
	}
	arp := make([]byte, header.EthernetHeaderLen+header.ARPLen)
	header.Ethernet(arp).SetType(header.EtherTypeARP)
	header.ARP(arp[header.EthernetHeaderLen:]).Encode(&header.ARPFields{Op: header.ARPRequest})
	if err := SealFrame(arp); !errors.Is(err, ErrNotRoCE) {
		t.Errorf("ARP frame: %v", err)
	}
}

// Bad packets give errors, never panics: every truncation of every opcode,
// unknown opcodes, PadCnt past the payload.
func TestDecodeErrors(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	var rl Layers
	p := gopacket.NewDecodingLayerParser(LayerTypeBTH, rl.DecodingLayers()...)
	p.IgnorePanic = true
	var decoded []gopacket.LayerType
	for _, o := range allOpcodes() {
		roce := randomPacket(r, o, 0)
		for n := range len(roce) {
			err := p.DecodeLayers(roce[:n], &decoded)
			if n > 0 && (!errors.Is(err, wire.ErrTruncated) || !p.Truncated) {
				t.Errorf("%s cut to %d: %v (truncated %v)", o, n, err, p.Truncated)
			}
		}
	}
	for _, o := range []byte{0x15, 0x18, 0x1e, 0x40, 0x66, 0x80, 0xff} {
		b := make([]byte, 32)
		b[0] = o
		if err := p.DecodeLayers(b, &decoded); !errors.Is(err, wire.ErrUnknownOpcode) {
			t.Errorf("opcode %#x: %v", o, err)
		}
	}
	ack := randomPacket(r, wire.RCAcknowledge, 0)
	ack[1] |= 0x30 // PadCnt 3, no payload
	if err := p.DecodeLayers(ack, &decoded); !errors.Is(err, wire.ErrPadCnt) {
		t.Errorf("PadCnt past payload: %v", err)
	}
}

// Reserved bits survive decode and serialize; FixLengths recomputes PadCnt.
func TestReservedBitsAndFixLengths(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	var rl Layers
	p := gopacket.NewDecodingLayerParser(LayerTypeBTH, rl.DecodingLayers()...)
	var decoded []gopacket.LayerType
	for _, o := range []wire.Opcode{wire.UDSendOnly, wire.RCFlush, wire.CNP, wire.RCSendOnly} {
		b := randomPacket(r, o, 5)
		if o == wire.CNP || o == wire.RCFlush {
			b = randomPacket(r, o, 0)
		}
		b[4] |= 0x2a // resv6a
		b[8] |= 0x55 // resv7
		b[1] |= 0x0f // TVer
		switch o {
		case wire.UDSendOnly:
			b[12+4] = 0xee // DETH reserved
		case wire.RCFlush:
			b[12] = 0xab // FETH reserved
		case wire.CNP:
			b[12+3] = 0x99
		case wire.RCSendOnly:
			b[len(b)-5] = 0x77 // a pad byte
		}
		if err := p.DecodeLayers(b, &decoded); err != nil {
			t.Fatalf("%s: %v", o, err)
		}
		if out := serialize(t, gopacket.SerializeOptions{}, rl.Serializable(decoded)...); !bytes.Equal(out, b) {
			t.Errorf("%s: reserved bits lost\n got %x\nwant %x", o, out, b)
		}
	}
	// A payload that grew: FixLengths pads it anew.
	b := randomPacket(r, wire.RCSendOnly, 5)
	if err := p.DecodeLayers(b, &decoded); err != nil {
		t.Fatal(err)
	}
	rl.Payload = append(rl.Payload[:len(rl.Payload):len(rl.Payload)], 1, 2)
	out := serialize(t, gopacket.SerializeOptions{FixLengths: true}, rl.Serializable(decoded)...)
	var wp wire.Packet
	if err := wp.Parse(out); err != nil || len(wp.Payload) != 7 || wp.BTH.PadCnt() != 1 || !bytes.Equal(wp.Pad, []byte{0}) {
		t.Errorf("FixLengths: %v payload %d PadCnt %d", err, len(wp.Payload), wp.BTH.PadCnt())
	}
	// Too few bytes for the opcode's extension headers.
	buf := gopacket.NewSerializeBuffer()
	bth := &BTH{BTHFields: wire.BTHFields{Opcode: wire.RCRDMAWriteFirst}}
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, bth); err == nil {
		t.Error("RDMA WRITE FIRST without RETH serialized")
	}
	bth.Opcode = 0x1e
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, bth); !errors.Is(err, wire.ErrUnknownOpcode) {
		t.Errorf("unknown opcode: %v", err)
	}
}

// Only a UD SEND_ONLY to or from QP1 with the GSI Q_Key carries a MAD.
func TestMADSelection(t *testing.T) {
	mk := func(o wire.Opcode, destQP, srcQP, qkey uint32) []byte {
		f := wire.PacketFields{BTH: wire.BTHFields{Opcode: o, PKey: 0xffff, DestQP: destQP},
			DETH: wire.DETHFields{QKey: qkey, SrcQP: srcQP}, Payload: mad.AppendCM(nil, mad.CMHeader(9, 0), &mad.RTU{LocalCommID: 5})}
		b := make([]byte, f.EncodedLen())
		f.Encode(b)
		return b
	}
	var rl Layers
	p := gopacket.NewDecodingLayerParser(LayerTypeBTH, rl.DecodingLayers()...)
	var decoded []gopacket.LayerType
	for _, c := range []struct {
		b    []byte
		want gopacket.LayerType
	}{
		{mk(wire.UDSendOnly, 1, 0x11, wire.GSIQKey), LayerTypeMAD},
		{mk(wire.UDSendOnly, 0x22, 1, wire.GSIQKey), LayerTypeMAD},
		{mk(wire.UDSendOnly, 1, 1, 0x11111111), gopacket.LayerTypePayload},
		{mk(wire.UDSendOnly, 0x22, 0x23, wire.GSIQKey), gopacket.LayerTypePayload},
		{mk(wire.UDSendOnlyWithImmediate, 1, 1, wire.GSIQKey), gopacket.LayerTypePayload},
	} {
		if err := p.DecodeLayers(c.b, &decoded); err != nil {
			t.Fatal(err)
		}
		if got := decoded[len(decoded)-1]; got != c.want {
			t.Errorf("dqp %#x sqp %#x qkey %#x opcode %s: last layer %v, want %v", rl.BTH.DestQP, rl.DETH.SrcQP,
				rl.DETH.QKey, rl.BTH.Opcode, got, c.want)
		}
		if c.want == LayerTypeMAD {
			if rtu, ok := rl.MAD.CM.(*mad.RTU); !ok || rtu.LocalCommID != 5 || rl.MAD.TransactionID != 9 {
				t.Errorf("MAD %+v", rl.MAD.CM)
			}
		}
	}
	// A CM MAD cut short is an error; one of an unknown attribute is not.
	short := mk(wire.UDSendOnly, 1, 1, wire.GSIQKey)
	f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.UDSendOnly, DestQP: 1}, DETH: wire.DETHFields{QKey: wire.GSIQKey, SrcQP: 1},
		Payload: short[20 : 20+100]}
	b := make([]byte, f.EncodedLen())
	f.Encode(b)
	if err := p.DecodeLayers(b, &decoded); !errors.Is(err, mad.ErrShort) {
		t.Errorf("short CM MAD: %v", err)
	}
	var m MAD
	m.SetCM(1, &mad.RTU{})
	binaryAttr := m.Contents
	binaryAttr[17] = 0x77
	f.Payload = binaryAttr
	b = make([]byte, f.EncodedLen())
	f.Encode(b)
	if err := p.DecodeLayers(b, &decoded); err != nil || rl.MAD.CM != nil || rl.MAD.AttributeID != 0x0077 {
		t.Errorf("unknown attribute: %v %v", err, rl.MAD.CM)
	}
}

// SetCM builds a MAD layer that serializes to the mad package's encoding.
func TestMADSetCMSerializes(t *testing.T) {
	rep := &mad.REP{LocalCommID: 1, RemoteCommID: 2, LocalQPN: 0x1f, StartingPSN: 0x92a1e, RNRRetryCount: 7}
	var m MAD
	m.SetCM(0x2c2f938e3, rep)
	out := serialize(t, gopacket.SerializeOptions{}, &m)
	want := mad.AppendCM(nil, mad.CMHeader(0x2c2f938e3, mad.AttrConnectReply), rep)
	if !bytes.Equal(out, want) || len(out) != mad.Size {
		t.Errorf("SetCM serialized %x", out)
	}
}

// An extension layer decoded on its own passes the rest on as payload.
func TestStandaloneLayer(t *testing.T) {
	b := make([]byte, wire.RETHLen+3)
	wire.RETH(b).Encode(&wire.RETHFields{VA: 0x1000, RKey: 0x42, Length: 3})
	pkt := gopacket.NewPacket(b, LayerTypeRETH, gopacket.DecodeOptions{SkipDecodeRecovery: true})
	reth, ok := pkt.Layer(LayerTypeRETH).(*RETH)
	if !ok || reth.RKey != 0x42 || reth.VA != 0x1000 {
		t.Fatalf("RETH %+v", pkt.Layers())
	}
	if app := pkt.ApplicationLayer(); app == nil || len(app.Payload()) != 3 {
		t.Errorf("payload %v", pkt.Layers())
	}
}
