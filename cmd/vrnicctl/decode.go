package main

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/vrnic/vrnicd/transport/wire"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
)

func init() {
	register(&command{
		Name:    "decode",
		Args:    "FILE.pcap [--json]",
		Summary: "print each RoCEv2 packet (UDP port 4791) of a pcap or pcapng capture on one line",
		NArgs:   1,
		Setup: func(fs *flag.FlagSet) runFunc {
			asJSON := fs.Bool("json", false, `print one JSON object: {"packets": [{"frame": N, "opcode": "...", ...}, ...]}, a packet a line`)
			return func(args []string, stdout, _ io.Writer) error {
				return decodeFile(args[0], stdout, *asJSON)
			}
		},
	})
}

// decodeFile prints one line per RoCEv2 packet of a capture. Frames that
// are not RoCEv2 print nothing; a RoCEv2 frame that does not decode prints a
// line with an error and decoding goes on. Only an unreadable file is an
// error. With asJSON the lines are the packets of one object's list,
// closed even when a frame cannot be read, so that what was printed
// parses.
func decodeFile(path string, w io.Writer, asJSON bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	src, err := openCapture(f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	out := bufio.NewWriter(w)
	sep, end := "", ""
	if asJSON {
		out.WriteString(`{"packets":[`)
		sep, end = "\n", "\n]}\n"
	}
	d := newFrameDecoder()
	for n := 1; ; n++ {
		data, ci, err := src.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			out.WriteString(end)
			out.Flush()
			return fmt.Errorf("%s: frame %d: %w", path, n, err)
		}
		if lt := src.linkType(ci); lt != layers.LinkTypeEthernet {
			continue // counted, as tshark counts it, but not ours to decode
		}
		rec := d.decode(n, data, ci)
		if rec == nil {
			continue
		}
		if asJSON {
			b, err := json.Marshal(rec)
			if err != nil {
				return err
			}
			out.WriteString(sep)
			out.Write(b)
			sep = ",\n"
		} else {
			out.WriteString(rec.human())
			out.WriteByte('\n')
		}
	}
	out.WriteString(end)
	return out.Flush()
}

// capture reads classic pcap or pcapng.
type capture struct {
	gopacket.PacketDataSource
	classic *pcapgo.Reader
	ng      *pcapgo.NgReader
}

func (c *capture) linkType(ci gopacket.CaptureInfo) layers.LinkType {
	if c.classic != nil {
		return c.classic.LinkType()
	}
	if len(ci.AncillaryData) > 0 {
		if lt, ok := ci.AncillaryData[0].(layers.LinkType); ok {
			return lt
		}
	}
	return c.ng.LinkType()
}

const pcapngMagic = 0x0A0D0D0A // the section header block type

func openCapture(r io.Reader) (*capture, error) {
	br := bufio.NewReader(r)
	magic, err := br.Peek(4)
	if err != nil {
		return nil, fmt.Errorf("not a pcap file: %w", err)
	}
	if binary.LittleEndian.Uint32(magic) == pcapngMagic {
		ng, err := pcapgo.NewNgReader(br, pcapgo.NgReaderOptions{WantMixedLinkType: true})
		if err != nil {
			return nil, fmt.Errorf("pcapng: %w", err)
		}
		return &capture{PacketDataSource: ng, ng: ng}, nil
	}
	classic, err := pcapgo.NewReader(br)
	if err != nil {
		return nil, err
	}
	if lt := classic.LinkType(); lt != layers.LinkTypeEthernet {
		return nil, fmt.Errorf("link type %v: only Ethernet captures are decoded", lt)
	}
	return &capture{PacketDataSource: classic, classic: classic}, nil
}

// frameDecoder decodes Ethernet frames down to the RoCE layers, reusing its
// layers from frame to frame.
type frameDecoder struct {
	eth     layers.Ethernet
	dot1q   layers.Dot1Q
	ip4     layers.IPv4
	ip6     layers.IPv6
	udp     layers.UDP
	rl      rocelayers.Layers
	parser  *gopacket.DecodingLayerParser
	decoded []gopacket.LayerType
}

func newFrameDecoder() *frameDecoder {
	d := &frameDecoder{decoded: make([]gopacket.LayerType, 0, 12)}
	dls := append([]gopacket.DecodingLayer{&d.eth, &d.dot1q, &d.ip4, &d.ip6, &d.udp}, d.rl.DecodingLayers()...)
	d.parser = gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, dls...)
	d.parser.IgnoreUnsupported = true
	return d
}

func (d *frameDecoder) has(t gopacket.LayerType) bool {
	for _, x := range d.decoded {
		if x == t {
			return true
		}
	}
	return false
}

// decode turns frame n into a record, or nil if it is not RoCEv2 (not UDP to
// port 4791).
func (d *frameDecoder) decode(n int, data []byte, ci gopacket.CaptureInfo) *record {
	err := d.parser.DecodeLayers(data, &d.decoded)
	if !d.has(layers.LayerTypeUDP) || d.udp.DstPort != wire.RoCEv2Port {
		return nil
	}
	rec := &record{Frame: n}
	var ip gopacket.Layer
	var ipLen, ipHave int // what the IP header says, and what the frame holds
	if d.has(layers.LayerTypeIPv6) {
		ip, ipLen, ipHave = &d.ip6, int(d.ip6.Length), len(d.ip6.Payload)
		rec.addrInfo = &addrInfo{Src: d.ip6.SrcIP.String(), Dst: d.ip6.DstIP.String(), Sport: uint16(d.udp.SrcPort)}
	} else {
		ip, ipLen, ipHave = &d.ip4, int(d.ip4.Length)-len(d.ip4.Contents), len(d.ip4.Payload)
		rec.addrInfo = &addrInfo{Src: d.ip4.SrcIP.String(), Dst: d.ip4.DstIP.String(), Sport: uint16(d.udp.SrcPort)}
	}
	udpLen := int(d.udp.Length)

	// Whether the packet's extent can be trusted, most basic reason first;
	// only then does its ICRC mean anything.
	var problem string
	switch {
	case ci.CaptureLength < ci.Length:
		problem = fmt.Sprintf("truncated capture: %d of %d bytes", ci.CaptureLength, ci.Length)
	case ipHave < ipLen:
		problem = fmt.Sprintf("truncated frame: IP payload %d of %d bytes", ipHave, ipLen)
	case ip == &d.ip4 && (d.ip4.Flags&layers.IPv4MoreFragments != 0 || d.ip4.FragOffset != 0):
		problem = "IPv4 fragment (not reassembled)"
	case udpLen != ipLen:
		problem = fmt.Sprintf("UDP length %d, IP payload %d bytes", udpLen, ipLen)
	}
	rec.Error = problem
	if err != nil && problem == "" {
		rec.Error = err.Error()
	}

	if !d.has(rocelayers.LayerTypeBTH) {
		if rec.Error == "" {
			rec.Error = "no BTH"
		}
		return rec
	}
	b := &d.rl.BTH
	rec.bthInfo = &bthInfo{
		Opcode: b.Opcode.String(), OpcodeNum: uint8(b.Opcode), DQPN: b.DestQP, PSN: b.PSN, AckReq: b.AckReq,
		SE: b.SE, MigReq: b.MigReq, PadCnt: b.PadCnt, TVer: b.TVer, PKey: b.PKey, FECN: b.FECN, BECN: b.BECN,
		afterBTH: len(d.udp.Payload) - wire.BTHLen - wire.ICRCLen,
	}
	if problem == "" {
		t := &tailInfo{ICRC: "ok", ICRCWire: hex.EncodeToString(d.udp.Payload[len(d.udp.Payload)-wire.ICRCLen:])}
		if err := rocelayers.VerifyNetworkICRC(ip); err != nil {
			t.ICRC = "bad"
			if !errors.Is(err, wire.ErrBadICRC) && rec.Error == "" {
				rec.Error = "ICRC not computable: " + err.Error()
			}
		}
		if err == nil {
			n := b.PayloadLen()
			t.PayloadLen = &n
		}
		rec.tailInfo = t
	}
	d.addHeaders(rec)
	return rec
}

// addHeaders adds the extension headers and MAD that decoded.
func (d *frameDecoder) addHeaders(rec *record) {
	l := &d.rl
	for _, t := range d.decoded {
		switch t {
		case rocelayers.LayerTypeRETH:
			rec.RETH = &rethInfo{VA: l.RETH.VA, RKey: l.RETH.RKey, Len: l.RETH.Length}
		case rocelayers.LayerTypeAETH:
			rec.AETH = newAETHInfo(l.AETH.Syndrome, l.AETH.MSN)
		case rocelayers.LayerTypeDETH:
			rec.DETH = &dethInfo{QKey: l.DETH.QKey, SrcQP: l.DETH.SrcQP}
		case rocelayers.LayerTypeAtomicETH:
			a := &l.AtomicETH
			rec.Atomic = &atomicInfo{VA: a.VA, RKey: a.RKey, SwapAdd: a.SwapAdd, Compare: a.Compare}
		case rocelayers.LayerTypeAtomicAckETH:
			rec.AtomicAck = &atomicAckInfo{Orig: l.AtomicAckETH.Orig}
		case rocelayers.LayerTypeImmDt:
			imm := l.ImmDt.Imm
			rec.Imm = &imm
		case rocelayers.LayerTypeIETH:
			rec.IETH = &iethInfo{RKey: l.IETH.RKey}
		case rocelayers.LayerTypeFETH:
			rec.FETH = &fethInfo{Sel: l.FETH.Selectivity, PLT: l.FETH.Placement}
		case rocelayers.LayerTypeMAD:
			rec.MAD = &madInfo{Header: l.MAD.Header, CM: l.MAD.CM}
		}
	}
}

// record is one output line. Embedded parts are present as far as the
// packet decoded; numbers are JSON numbers.
type record struct {
	Frame int `json:"frame"`
	*addrInfo
	*bthInfo
	*tailInfo
	RETH      *rethInfo      `json:"reth,omitempty"`
	AETH      *aethInfo      `json:"aeth,omitempty"`
	DETH      *dethInfo      `json:"deth,omitempty"`
	Atomic    *atomicInfo    `json:"atomic,omitempty"`
	AtomicAck *atomicAckInfo `json:"atomic_ack,omitempty"`
	Imm       *uint32        `json:"imm,omitempty"`
	IETH      *iethInfo      `json:"ieth,omitempty"`
	FETH      *fethInfo      `json:"feth,omitempty"`
	MAD       *madInfo       `json:"mad,omitempty"`
	Error     string         `json:"error,omitempty"`
}

type addrInfo struct {
	Src   string `json:"src"`
	Dst   string `json:"dst"`
	Sport uint16 `json:"sport"`
}

type bthInfo struct {
	Opcode    string `json:"opcode"`
	OpcodeNum uint8  `json:"opcode_num"`
	DQPN      uint32 `json:"dqpn"`
	PSN       uint32 `json:"psn"`
	AckReq    bool   `json:"ackreq"`
	SE        bool   `json:"se"`
	MigReq    bool   `json:"migreq"`
	PadCnt    uint8  `json:"padcnt"`
	TVer      uint8  `json:"tver"`
	PKey      uint16 `json:"pkey"`
	FECN      bool   `json:"fecn"`
	BECN      bool   `json:"becn"`
	afterBTH  int    // bytes after the BTH without the ICRC (the README's len=)
}

type tailInfo struct {
	PayloadLen *int   `json:"payload_len,omitempty"` // absent when the headers did not all decode
	ICRC       string `json:"icrc"`                  // "ok" or "bad"
	ICRCWire   string `json:"icrc_wire"`             // the four ICRC bytes in wire order, hex
}

type rethInfo struct {
	VA   uint64 `json:"va"`
	RKey uint32 `json:"rkey"`
	Len  uint32 `json:"len"`
}

type aethInfo struct {
	Syndrome uint8  `json:"syndrome"`
	MSN      uint32 `json:"msn"`
	Kind     string `json:"kind"`                // ACK, RNR_NAK, NAK, RESERVED
	Credits  *uint8 `json:"credits,omitempty"`   // ACK
	Timer    *uint8 `json:"rnr_timer,omitempty"` // RNR NAK
	NAK      string `json:"nak,omitempty"`       // NAK
}

func newAETHInfo(syn uint8, msn uint32) *aethInfo {
	a := &aethInfo{Syndrome: syn, MSN: msn}
	v := wire.SyndromeValue(syn)
	switch wire.SyndromeType(syn) {
	case wire.AETHAck:
		a.Kind, a.Credits = "ACK", &v
	case wire.AETHRNRNak:
		a.Kind, a.Timer = "RNR_NAK", &v
	case wire.AETHNak:
		a.Kind, a.NAK = "NAK", nakName(syn)
	default:
		a.Kind = "RESERVED"
	}
	return a
}

func nakName(syn uint8) string {
	switch syn {
	case wire.NakPSNSeqError:
		return "PSN_SEQ_ERROR"
	case wire.NakInvalidRequest:
		return "INVALID_REQUEST"
	case wire.NakRemoteAccess:
		return "REMOTE_ACCESS_ERROR"
	case wire.NakRemoteOperation:
		return "REMOTE_OPERATION_ERROR"
	case wire.NakInvalidRDRequest:
		return "INVALID_RD_REQUEST"
	}
	return fmt.Sprintf("0x%02x", syn)
}

type dethInfo struct {
	QKey  uint32 `json:"qkey"`
	SrcQP uint32 `json:"src_qp"`
}

type atomicInfo struct {
	VA      uint64 `json:"va"`
	RKey    uint32 `json:"rkey"`
	SwapAdd uint64 `json:"swap_add"`
	Compare uint64 `json:"compare"`
}

type atomicAckInfo struct {
	Orig uint64 `json:"orig"`
}

type iethInfo struct {
	RKey uint32 `json:"rkey"`
}

type fethInfo struct {
	Sel uint8 `json:"sel"`
	PLT uint8 `json:"plt"`
}

// madInfo is the mad object: header fields, then the CM message's fields.
type madInfo struct {
	Header mad.Header
	CM     mad.Message
}

func (m *madInfo) MarshalJSON() ([]byte, error) {
	h := m.Header
	hdr, err := json.Marshal(struct {
		Class        uint8  `json:"class"`
		Method       uint8  `json:"method"`
		Attr         string `json:"attr"`
		AttrID       uint16 `json:"attr_id"`
		BaseVersion  uint8  `json:"base_version"`
		ClassVersion uint8  `json:"class_version"`
		Status       uint16 `json:"status"`
		TID          uint64 `json:"tid"`
		AttrMod      uint32 `json:"attr_mod"`
	}{h.MgmtClass, h.Method, mad.AttrName(h.MgmtClass, h.AttributeID), h.AttributeID, h.BaseVersion,
		h.ClassVersion, h.Status, h.TransactionID, h.AttributeModifier})
	if err != nil || m.CM == nil {
		return hdr, err
	}
	parts := [][]byte{hdr}
	msg, err := json.Marshal(m.CM)
	if err != nil {
		return nil, err
	}
	parts = append(parts, msg)
	if req, ok := m.CM.(*mad.REQ); ok && mad.IsIPServiceID(req.ServiceID) {
		if cma, err := mad.ParseCMAHeader(req.PrivateData[:]); err == nil {
			ipcm, err := json.Marshal(struct {
				IPCM mad.CMAHeader `json:"ip_cm"`
			}{cma})
			if err != nil {
				return nil, err
			}
			parts = append(parts, ipcm)
		}
	}
	return mergeObjects(parts...), nil
}

// mergeObjects joins JSON objects with disjoint keys into one, in order.
func mergeObjects(objs ...[]byte) []byte {
	out := []byte{'{'}
	for _, o := range objs {
		inner := o[1 : len(o)-1]
		if len(inner) == 0 {
			continue
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, inner...)
	}
	return append(out, '}')
}

// human is the one-line text form: the capture README's format, then
// extension headers and the MAD.
func (r *record) human() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d", r.Frame)
	if a := r.addrInfo; a != nil {
		fmt.Fprintf(&b, " %s:%d > %s", a.Src, a.Sport, a.Dst)
	}
	if h := r.bthInfo; h != nil {
		fmt.Fprintf(&b, " %s qp=0x%06x psn=%d ack=%d", h.Opcode, h.DQPN, h.PSN, b2i(h.AckReq))
	}
	if t := r.tailInfo; t != nil {
		// The packet's extent is known only with the tail.
		fmt.Fprintf(&b, " len=%d icrc=%s %s", r.afterBTH, t.ICRCWire, t.ICRC)
		if t.PayloadLen != nil {
			fmt.Fprintf(&b, " payload=%d", *t.PayloadLen)
		}
	}
	if h := r.bthInfo; h != nil {
		if h.SE {
			b.WriteString(" se=1")
		}
		if h.PKey != wire.DefaultPKey {
			fmt.Fprintf(&b, " pkey=0x%04x", h.PKey)
		}
		if h.FECN || h.BECN {
			fmt.Fprintf(&b, " fecn=%d becn=%d", b2i(h.FECN), b2i(h.BECN))
		}
	}
	if x := r.RETH; x != nil {
		fmt.Fprintf(&b, " reth[va=0x%016x rkey=0x%08x len=%d]", x.VA, x.RKey, x.Len)
	}
	if x := r.AETH; x != nil {
		switch {
		case x.Credits != nil:
			fmt.Fprintf(&b, " aeth[ACK credits=%d msn=%d]", *x.Credits, x.MSN)
		case x.Timer != nil:
			fmt.Fprintf(&b, " aeth[RNR_NAK timer=%d msn=%d]", *x.Timer, x.MSN)
		case x.NAK != "":
			fmt.Fprintf(&b, " aeth[NAK %s msn=%d]", x.NAK, x.MSN)
		default:
			fmt.Fprintf(&b, " aeth[syndrome=0x%02x msn=%d]", x.Syndrome, x.MSN)
		}
	}
	if x := r.Atomic; x != nil {
		fmt.Fprintf(&b, " atomic[va=0x%016x rkey=0x%08x swap_add=0x%x compare=0x%x]", x.VA, x.RKey, x.SwapAdd, x.Compare)
	}
	if x := r.AtomicAck; x != nil {
		fmt.Fprintf(&b, " atomic_ack[orig=0x%x]", x.Orig)
	}
	if x := r.DETH; x != nil {
		fmt.Fprintf(&b, " deth[qkey=0x%08x src_qp=0x%06x]", x.QKey, x.SrcQP)
	}
	if r.Imm != nil {
		fmt.Fprintf(&b, " imm=0x%08x", *r.Imm)
	}
	if x := r.IETH; x != nil {
		fmt.Fprintf(&b, " ieth[rkey=0x%08x]", x.RKey)
	}
	if x := r.FETH; x != nil {
		fmt.Fprintf(&b, " feth[sel=%d plt=%d]", x.Sel, x.PLT)
	}
	if m := r.MAD; m != nil {
		h := m.Header
		fmt.Fprintf(&b, " mad[%s %s %s tid=0x%016x%s]", mad.ClassName(h.MgmtClass), mad.MethodName(h.Method),
			mad.AttrName(h.MgmtClass, h.AttributeID), h.TransactionID, cmSummary(m.CM))
	}
	if r.Error != "" {
		b.WriteString(" error: " + r.Error)
	}
	return b.String()
}

// cmSummary is the CM fields worth a glance, each " key=value".
func cmSummary(m mad.Message) string {
	switch c := m.(type) {
	case *mad.REQ:
		return fmt.Sprintf(" local_comm_id=0x%08x service_id=0x%016x local_qpn=0x%06x starting_psn=0x%06x path_mtu=%d",
			c.LocalCommID, c.ServiceID, c.LocalQPN, c.StartingPSN, c.PathMTU)
	case *mad.REP:
		return fmt.Sprintf(" local_comm_id=0x%08x remote_comm_id=0x%08x local_qpn=0x%06x starting_psn=0x%06x",
			c.LocalCommID, c.RemoteCommID, c.LocalQPN, c.StartingPSN)
	case *mad.REJ:
		return fmt.Sprintf(" local_comm_id=0x%08x remote_comm_id=0x%08x reason=%d", c.LocalCommID, c.RemoteCommID, c.Reason)
	case *mad.MRA:
		return fmt.Sprintf(" local_comm_id=0x%08x remote_comm_id=0x%08x message_mraed=%d service_timeout=%d",
			c.LocalCommID, c.RemoteCommID, c.MessageMRAed, c.ServiceTimeout)
	case *mad.RTU:
		return fmt.Sprintf(" local_comm_id=0x%08x remote_comm_id=0x%08x", c.LocalCommID, c.RemoteCommID)
	case *mad.DREQ:
		return fmt.Sprintf(" local_comm_id=0x%08x remote_comm_id=0x%08x remote_qpn=0x%06x", c.LocalCommID, c.RemoteCommID, c.RemoteQPN)
	case *mad.DREP:
		return fmt.Sprintf(" local_comm_id=0x%08x remote_comm_id=0x%08x", c.LocalCommID, c.RemoteCommID)
	case *mad.SIDRREQ:
		return fmt.Sprintf(" request_id=0x%08x service_id=0x%016x", c.RequestID, c.ServiceID)
	case *mad.SIDRREP:
		return fmt.Sprintf(" request_id=0x%08x status=%d qpn=0x%06x qkey=0x%08x", c.RequestID, c.Status, c.QPN, c.QKey)
	}
	return ""
}

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}
