package rocelayers

import (
	"bytes"
	"fmt"
	"net/netip"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/vrnic/vrnicd/transport/wire"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/rocetest"
)

// frameParser decodes Ethernet frames down to the RoCE layers.
type frameParser struct {
	eth     layers.Ethernet
	dot1q   layers.Dot1Q
	ip4     layers.IPv4
	ip6     layers.IPv6
	udp     layers.UDP
	rl      Layers
	p       *gopacket.DecodingLayerParser
	decoded []gopacket.LayerType
}

func newFrameParser() *frameParser {
	fp := &frameParser{}
	dls := append([]gopacket.DecodingLayer{&fp.eth, &fp.dot1q, &fp.ip4, &fp.ip6, &fp.udp}, fp.rl.DecodingLayers()...)
	fp.p = gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, dls...)
	fp.p.IgnoreUnsupported = true
	return fp
}

func (fp *frameParser) decode(data []byte) error { return fp.p.DecodeLayers(data, &fp.decoded) }

func (fp *frameParser) has(t gopacket.LayerType) bool {
	for _, d := range fp.decoded {
		if d == t {
			return true
		}
	}
	return false
}

func (fp *frameParser) network() gopacket.Layer {
	if fp.has(layers.LayerTypeIPv6) {
		return &fp.ip6
	}
	return &fp.ip4
}

// roceTypes is the decoded layer types from the BTH on.
func (fp *frameParser) roceTypes() []gopacket.LayerType {
	for i, t := range fp.decoded {
		if t == LayerTypeBTH {
			return fp.decoded[i:]
		}
	}
	return nil
}

// wantChain is the layer sequence an opcode's packet decodes to.
func wantChain(op *wire.OpInfo, payload int, isMAD bool) []gopacket.LayerType {
	out := []gopacket.LayerType{LayerTypeBTH}
	for _, h := range op.Headers {
		if h != wire.HdrNone {
			out = append(out, headerLayer[h])
		}
	}
	switch {
	case isMAD:
		out = append(out, LayerTypeMAD)
	case payload > 0:
		out = append(out, gopacket.LayerTypePayload)
	}
	return out
}

func serialize(t testing.TB, opts gopacket.SerializeOptions, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, opts, ls...); err != nil {
		t.Fatalf("serialize: %v", err)
	}
	return buf.Bytes()
}

// checkAgainstWire compares every decoded layer with wire.Packet.Parse of
// the same bytes.
func checkAgainstWire(t testing.TB, rl *Layers, roce []byte) {
	t.Helper()
	var p wire.Packet
	if err := p.Parse(roce); err != nil {
		t.Fatalf("wire.Parse: %v", err)
	}
	f := p.Fields()
	b := &rl.BTH
	if b.BTHFields != f.BTH || b.Op() != p.Op || b.ICRC != p.ICRCValue() || !bytes.Equal(b.Pad, p.Pad) {
		t.Errorf("BTH %+v, wire %+v", b.BTHFields, f.BTH)
	}
	if b.PayloadLen() != len(p.Payload) {
		t.Errorf("PayloadLen %d, wire payload %d", b.PayloadLen(), len(p.Payload))
	}
	for _, h := range p.Op.Headers {
		var ok bool
		switch h {
		case wire.HdrNone:
			continue
		case wire.HdrRETH:
			ok = rl.RETH.RETHFields == f.RETH
		case wire.HdrAETH:
			ok = rl.AETH.AETHFields == f.AETH
		case wire.HdrDETH:
			ok = rl.DETH.DETHFields == f.DETH
		case wire.HdrAtomicETH:
			ok = rl.AtomicETH.AtomicETHFields == f.AtomicETH
		case wire.HdrAtomicAckETH:
			ok = rl.AtomicAckETH.Orig == f.AtomicAckETH
		case wire.HdrImmDt:
			ok = rl.ImmDt.Imm == f.Imm
		case wire.HdrIETH:
			ok = rl.IETH.RKey == f.IETH
		case wire.HdrFETH:
			ok = rl.FETH.FETHFields == f.FETH
		case wire.HdrRDETH:
			ok = rl.RDETH.EEC == f.RDETH
		case wire.HdrCNPReserved:
			ok = bytes.Equal(rl.CNPReserved.Reserved[:], roce[p.Op.Offset[h]:p.Op.Offset[h]+wire.CNPReservedLen])
		}
		if !ok {
			t.Errorf("%s of %s differs from wire", h, p.Op.Name)
		}
	}
}

func TestGoldenCaptures(t *testing.T) {
	files, err := rocetest.Files()
	if err != nil {
		t.Fatal(err)
	}
	listing, err := rocetest.Listing()
	if err != nil {
		t.Fatal(err)
	}
	fp := newFrameParser()
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			frames, err := rocetest.ReadFrames(path)
			if err != nil {
				t.Fatal(err)
			}
			want := listing[name].Lines
			n := 0
			for _, fr := range frames {
				if err := fp.decode(fr.Data); err != nil {
					if fp.has(layers.LayerTypeUDP) && fp.udp.DstPort == wire.RoCEv2Port {
						t.Errorf("frame %d: %v", fr.N, err)
					}
					continue
				}
				if !fp.has(layers.LayerTypeUDP) || fp.udp.DstPort != wire.RoCEv2Port {
					if fp.has(LayerTypeBTH) {
						t.Errorf("frame %d: BTH decoded in a non-RoCE frame", fr.N)
					}
					continue
				}
				if n >= len(want) || want[n].Frame != fr.N {
					t.Fatalf("frame %d is RoCEv2, README lists %v", fr.N, want[min(n, len(want)-1)])
				}
				checkGoldenPacket(t, fp, fr, want[n])
				n++
			}
			if n != len(want) {
				t.Errorf("%d RoCEv2 packets, README lists %d", n, len(want))
			}
		})
	}
}

func checkGoldenPacket(t *testing.T, fp *frameParser, fr rocetest.Frame, want rocetest.Line) {
	t.Helper()
	b := &fp.rl.BTH
	roce := fp.udp.Payload
	got := fmt.Sprintf("%s qp=0x%06x psn=%d ack=%d len=%d icrc=%08x", b.Opcode, b.DestQP, b.PSN, b2i(b.AckReq), len(roce)-wire.BTHLen-wire.ICRCLen, roce[len(roce)-4:])
	exp := fmt.Sprintf("%s qp=0x%06x psn=%d ack=%d len=%d icrc=%s", want.Opcode, want.QP, want.PSN, b2i(want.Ack), want.Len, want.ICRC)
	if got != exp {
		t.Errorf("frame %d: decoded %q\nREADME %q", fr.N, got, exp)
	}
	isMAD := fp.has(LayerTypeMAD)
	if chain := fp.roceTypes(); !reflect.DeepEqual(chain, wantChain(b.Op(), b.PayloadLen(), isMAD)) {
		t.Errorf("frame %d (%s): layers %v", fr.N, b.Opcode, chain)
	}
	if isMAD != (b.DestQP == 1) {
		t.Errorf("frame %d: MAD decoded %v, dest QP %#x", fr.N, isMAD, b.DestQP)
	}
	if err := VerifyNetworkICRC(fp.network()); err != nil {
		t.Errorf("frame %d: ICRC: %v", fr.N, err)
	}
	checkAgainstWire(t, &fp.rl, roce)

	// Re-serialize the RoCE layers, then the whole frame: byte for byte.
	if out := serialize(t, gopacket.SerializeOptions{}, fp.rl.Serializable(fp.decoded)...); !bytes.Equal(out, roce) {
		t.Errorf("frame %d: re-serialized RoCE bytes differ\n got %x\nwant %x", fr.N, out, roce)
	}
	if out := serialize(t, gopacket.SerializeOptions{FixLengths: true}, fp.rl.Serializable(fp.decoded)...); !bytes.Equal(out, roce) {
		t.Errorf("frame %d: re-serialized with FixLengths differs", fr.N)
	}
	all := []gopacket.SerializableLayer{&fp.eth, fp.network().(gopacket.SerializableLayer), &fp.udp}
	if out := serialize(t, gopacket.SerializeOptions{}, append(all, fp.rl.Serializable(fp.decoded)...)...); !bytes.Equal(out, fr.Data) {
		t.Errorf("frame %d: re-serialized frame differs", fr.N)
	}

	// gopacket.NewPacket finds the same layers through the port registration.
	pkt := gopacket.NewPacket(fr.Data, layers.LayerTypeEthernet, gopacket.DecodeOptions{SkipDecodeRecovery: true})
	if el := pkt.ErrorLayer(); el != nil {
		t.Errorf("frame %d: NewPacket: %v", fr.N, el.Error())
	}
	var types []gopacket.LayerType
	for _, l := range pkt.Layers() {
		types = append(types, l.LayerType())
	}
	if !reflect.DeepEqual(types, fp.decoded) {
		t.Errorf("frame %d: NewPacket layers %v, parser %v", fr.N, types, fp.decoded)
	}
	if pb, ok := pkt.Layer(LayerTypeBTH).(*BTH); !ok || pb.BTHFields != b.BTHFields || pb.ICRC != b.ICRC {
		t.Errorf("frame %d: NewPacket BTH differs", fr.N)
	}
	if err := VerifyPacketICRC(pkt); err != nil {
		t.Errorf("frame %d: VerifyPacketICRC: %v", fr.N, err)
	}
}

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}

// The CM MADs of rdma_cm_rping.pcap decode to the values tshark shows (the
// README's table), agree with the RC traffic that follows, and re-encode to
// the kernel's bytes.
func TestGoldenCM(t *testing.T) {
	dir, err := rocetest.Dir()
	if err != nil {
		t.Fatal(err)
	}
	frames, err := rocetest.ReadFrames(filepath.Join(dir, "rdma_cm_rping.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	listing, err := rocetest.Listing()
	if err != nil {
		t.Fatal(err)
	}
	cap := listing["rdma_cm_rping.pcap"]
	if len(cap.Tables) != 1 || len(cap.Tables[0]) != 5 {
		t.Fatalf("README CM table: %v", cap.Tables)
	}
	fp := newFrameParser()
	msgs := map[uint16]mad.Message{}
	for _, row := range cap.Tables[0] {
		n, _ := strconv.Atoi(row["frame.number"])
		m := goldenCMFrame(t, fp, n, frames[n-1].Data, row)
		msgs[m.AttributeID] = m.CM
	}
	req, _ := msgs[mad.AttrConnectRequest].(*mad.REQ)
	rep, _ := msgs[mad.AttrConnectReply].(*mad.REP)
	rtu, _ := msgs[mad.AttrReadyToUse].(*mad.RTU)
	dreq, _ := msgs[mad.AttrDisconnectRequest].(*mad.DREQ)
	drep, _ := msgs[mad.AttrDisconnectReply].(*mad.DREP)
	if req == nil || rep == nil || rtu == nil || dreq == nil || drep == nil {
		t.Fatalf("missing messages: %v", msgs)
	}
	active, passive := netip.MustParseAddr("192.0.2.12"), netip.MustParseAddr("192.0.2.11")
	goldenCMRequest(t, req, active, passive)
	goldenCMIDs(t, req, rep, rtu, dreq, drep)
	goldenCMTraffic(t, fp, frames, req, rep, active, passive)
}

// goldenCMFrame decodes CM frame n and checks it against tshark's row: the
// MAD and DETH headers, the listed fields, the re-encoding.
func goldenCMFrame(t *testing.T, fp *frameParser, n int, data []byte, row map[string]string) *MAD {
	t.Helper()
	if err := fp.decode(data); err != nil || !fp.has(LayerTypeMAD) {
		t.Fatalf("frame %d: %v, layers %v", n, err, fp.decoded)
	}
	m := &fp.rl.MAD
	hexf := func(key string, v uint64, digits int) {
		t.Helper()
		if w, ok := row[key]; ok {
			if got := fmt.Sprintf("0x%0*x", digits, v); got != w {
				t.Errorf("frame %d %s: %s, tshark %s", n, key, got, w)
			}
		}
	}
	if m.BaseVersion != 1 || m.MgmtClass != mad.ClassCM || m.ClassVersion != 2 || m.Method != mad.MethodSend || len(m.Contents) != mad.Size {
		t.Errorf("frame %d: MAD header %+v, %d bytes", n, m.Header, len(m.Contents))
	}
	if fp.rl.DETH.QKey != wire.GSIQKey || fp.rl.DETH.SrcQP != 1 {
		t.Errorf("frame %d: DETH %+v", n, fp.rl.DETH.DETHFields)
	}
	hexf("infiniband.mad.attributeid", uint64(m.AttributeID), 4)
	hexf("infiniband.mad.transactionid", m.TransactionID, 16)
	switch c := m.CM.(type) {
	case *mad.REQ:
		hexf("infiniband.cm.req.serviceid.dport", uint64(mad.ServicePort(c.ServiceID)), 4)
		hexf("infiniband.cm.req.localqpn", uint64(c.LocalQPN), 6)
		hexf("infiniband.cm.req.startpsn", uint64(c.StartingPSN), 6)
		hexf("infiniband.cm.req.pppmtu", uint64(c.PathMTU), 2)
	case *mad.REP:
		hexf("infiniband.cm.rep.localqpn", uint64(c.LocalQPN), 6)
		hexf("infiniband.cm.rep.startpsn", uint64(c.StartingPSN), 6)
	case nil:
		t.Fatalf("frame %d: attribute %#x not decoded", n, m.AttributeID)
	}
	if got := mad.AppendCM(nil, m.Header, m.CM); !bytes.Equal(got, m.Contents) {
		t.Errorf("frame %d: re-encoded %s differs\n got %x\nwant %x", n, mad.AttrName(mad.ClassCM, m.AttributeID), got, m.Contents)
	}
	return m
}

// goldenCMRequest checks the README's notes on the REQ: IP CM service ID
// for TCP port 7174, path MTU 1024, an RC connection, the GIDs and the
// cma_hdr addresses.
func goldenCMRequest(t *testing.T, req *mad.REQ, active, passive netip.Addr) {
	t.Helper()
	if req.ServiceID != mad.IPServiceID(mad.PortSpaceTCP, 7174) || !mad.IsIPServiceID(req.ServiceID) ||
		req.PathMTU != 3 || req.TransportServiceType != mad.ServiceRC || req.PKey != 0xFFFF {
		t.Errorf("REQ %+v", req)
	}
	if req.Primary.LocalGID.String() != active.String() || req.Primary.RemoteGID.String() != passive.String() {
		t.Errorf("REQ GIDs %v %v", req.Primary.LocalGID, req.Primary.RemoteGID)
	}
	cma, err := mad.ParseCMAHeader(req.PrivateData[:])
	if err != nil || cma.Version != mad.CMAVersion || cma.IPVersion != 4 || cma.Src != active || cma.Dst != passive {
		t.Errorf("cma_hdr %+v, %v", cma, err)
	}
}

// goldenCMIDs: the communication IDs and QPNs tie the exchange together.
func goldenCMIDs(t *testing.T, req *mad.REQ, rep *mad.REP, rtu *mad.RTU, dreq *mad.DREQ, drep *mad.DREP) {
	t.Helper()
	if rep.RemoteCommID != req.LocalCommID || rtu.LocalCommID != req.LocalCommID || rtu.RemoteCommID != rep.LocalCommID ||
		dreq.LocalCommID != req.LocalCommID || dreq.RemoteCommID != rep.LocalCommID ||
		drep.LocalCommID != rep.LocalCommID || drep.RemoteCommID != req.LocalCommID {
		t.Errorf("comm IDs: REQ %#x REP %#x/%#x RTU %#x/%#x DREQ %#x/%#x DREP %#x/%#x", req.LocalCommID,
			rep.LocalCommID, rep.RemoteCommID, rtu.LocalCommID, rtu.RemoteCommID, dreq.LocalCommID, dreq.RemoteCommID,
			drep.LocalCommID, drep.RemoteCommID)
	}
	if dreq.RemoteQPN != rep.LocalQPN {
		t.Errorf("DREQ remote QPN %#x, REP local QPN %#x", dreq.RemoteQPN, rep.LocalQPN)
	}
}

// goldenCMTraffic: the REQ's starting PSN is what the passive side sends
// its requests with, the REP's what the active side sends with (ACKs echo
// the requester's PSN); each side's QPN is the other's DestQP.
func goldenCMTraffic(t *testing.T, fp *frameParser, frames []rocetest.Frame, req *mad.REQ, rep *mad.REP, active, passive netip.Addr) {
	t.Helper()
	first := map[netip.Addr]*BTH{}
	for _, fr := range frames {
		if fp.decode(fr.Data) != nil || !fp.has(LayerTypeBTH) || fp.rl.BTH.Opcode.Transport() != wire.TransportRC ||
			!fp.rl.BTH.Op().Has(wire.FlagRequest) {
			continue
		}
		src, _ := netip.AddrFromSlice(fp.ip4.SrcIP.To4())
		if first[src] == nil {
			b := fp.rl.BTH
			first[src] = &b
		}
	}
	if first[passive] == nil || first[active] == nil {
		t.Fatal("no RC traffic")
	}
	if first[passive].PSN != req.StartingPSN || first[active].PSN != rep.StartingPSN {
		t.Errorf("first RC PSNs: passive %#x (REQ %#x), active %#x (REP %#x)", first[passive].PSN, req.StartingPSN,
			first[active].PSN, rep.StartingPSN)
	}
	if first[active].DestQP != rep.LocalQPN || first[passive].DestQP != req.LocalQPN {
		t.Errorf("RC dest QPs %#x/%#x, REQ/REP QPNs %#x/%#x", first[active].DestQP, first[passive].DestQP, req.LocalQPN, rep.LocalQPN)
	}
}
