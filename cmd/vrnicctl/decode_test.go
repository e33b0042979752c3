package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/vrnic/vrnicd/header"
	"github.com/vrnic/vrnicd/transport/wire"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/rocetest"
)

// runCmd runs vrnicctl with args and returns its exit status and output.
func runCmd(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	rc := run(args, &out, &errb)
	return rc, out.String(), errb.String()
}

// jsonPackets decodes decode --json output, one object with the list
// "packets", numbers kept exact.
func jsonPackets(t *testing.T, out string) []map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	var doc map[string][]map[string]any
	if err := dec.Decode(&doc); err != nil || dec.More() || len(doc) != 1 || doc["packets"] == nil {
		t.Fatalf("not one object with the list packets (%v): %q", err, out)
	}
	return doc["packets"]
}

// jsonRecord decodes one packet's object, numbers kept exact.
func jsonRecord(t *testing.T, b []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("not JSON: %q: %v", b, err)
	}
	return m
}

func num(t *testing.T, m map[string]any, key string) uint64 {
	t.Helper()
	n, ok := m[key].(json.Number)
	if !ok {
		t.Fatalf("frame %v: %q is %T (%v), want a number", m["frame"], key, m[key], m[key])
	}
	v, err := strconv.ParseUint(string(n), 10, 64)
	if err != nil {
		t.Fatalf("%q: %v", key, err)
	}
	return v
}

func str(t *testing.T, m map[string]any, key string) string {
	t.Helper()
	s, ok := m[key].(string)
	if !ok {
		t.Fatalf("frame %v: %q is %T (%v), want a string", m["frame"], key, m[key], m[key])
	}
	return s
}

func boolean(t *testing.T, m map[string]any, key string) bool {
	t.Helper()
	b, ok := m[key].(bool)
	if !ok {
		t.Fatalf("frame %v: %q is %T (%v), want a boolean", m["frame"], key, m[key], m[key])
	}
	return b
}

func obj(t *testing.T, m map[string]any, key string) map[string]any {
	t.Helper()
	o, ok := m[key].(map[string]any)
	if !ok {
		t.Fatalf("frame %v: %q is %T, want an object", m["frame"], key, m[key])
	}
	return o
}

// extObjects names the JSON object of each extension header.
var extObjects = map[wire.Header]string{
	wire.HdrRETH: "reth", wire.HdrAETH: "aeth", wire.HdrDETH: "deth", wire.HdrAtomicETH: "atomic",
	wire.HdrAtomicAckETH: "atomic_ack", wire.HdrImmDt: "imm", wire.HdrIETH: "ieth", wire.HdrFETH: "feth",
}

// checkRecord checks the keys every good RoCEv2 line has, and that the
// extension-header objects are exactly the opcode's.
func checkRecord(t *testing.T, m map[string]any) *wire.OpInfo {
	t.Helper()
	if e, ok := m["error"]; ok {
		t.Errorf("frame %v: error %v", m["frame"], e)
	}
	for _, k := range []string{"frame", "sport", "opcode_num", "dqpn", "psn", "padcnt", "pkey", "payload_len"} {
		num(t, m, k)
	}
	for _, k := range []string{"src", "dst", "opcode", "icrc"} {
		str(t, m, k)
	}
	boolean(t, m, "ackreq")
	boolean(t, m, "se")
	op := wire.Opcode(num(t, m, "opcode_num"))
	info := op.Info()
	if info == nil || str(t, m, "opcode") != op.String() {
		t.Fatalf("frame %v: opcode %v/%v", m["frame"], m["opcode"], m["opcode_num"])
	}
	for h, key := range extObjects {
		if _, ok := m[key]; ok != info.HasHeader(h) {
			t.Errorf("frame %v (%s): %q present %v", m["frame"], op, key, ok)
		}
	}
	return info
}

// Every capture decodes to the README's listing: the same frames, opcodes,
// QPs, PSNs, AckReq bits, lengths and good ICRCs, in JSON and as text.
func TestDecodeGoldenCaptures(t *testing.T) {
	files, err := rocetest.Files()
	if err != nil {
		t.Fatal(err)
	}
	listing, err := rocetest.Listing()
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		name := filepath.Base(path)
		want := listing[name]
		t.Run(name, func(t *testing.T) {
			rc, out, errOut := runCmd("decode", path, "--json")
			if rc != 0 || errOut != "" {
				t.Fatalf("exit %d: %s", rc, errOut)
			}
			recs := jsonPackets(t, out)
			if len(recs) != want.Count || len(recs) != len(want.Lines) {
				t.Fatalf("%d lines, README lists %d (%d)", len(recs), len(want.Lines), want.Count)
			}
			ok := 0
			for i, m := range recs {
				w := want.Lines[i]
				info := checkRecord(t, m)
				got := fmt.Sprintf("#%d %s:%d > %s %s qp=0x%06x psn=%d ackreq=%v icrc=%s", num(t, m, "frame"), str(t, m, "src"),
					num(t, m, "sport"), str(t, m, "dst"), str(t, m, "opcode"), num(t, m, "dqpn"), num(t, m, "psn"),
					boolean(t, m, "ackreq"), str(t, m, "icrc"))
				exp := fmt.Sprintf("#%d %s:%d > %s %s qp=0x%06x psn=%d ackreq=%v icrc=ok", w.Frame, w.Src, w.Sport, w.Dst,
					w.Opcode, w.QP, w.PSN, w.Ack)
				if got != exp {
					t.Errorf("line %d\n got %s\nwant %s", i, got, exp)
				}
				// README len = extension headers + payload + pad.
				if l := info.HdrLen - wire.BTHLen + int(num(t, m, "payload_len")) + int(num(t, m, "padcnt")); l != w.Len {
					t.Errorf("frame %d: headers+payload+pad %d, README len %d", w.Frame, l, w.Len)
				}
				if str(t, m, "icrc_wire") != w.ICRC {
					t.Errorf("frame %d: ICRC bytes %v, README %s", w.Frame, m["icrc_wire"], w.ICRC)
				}
				if str(t, m, "icrc") == "ok" {
					ok++
				}
			}
			if ok != want.OK {
				t.Errorf("%d ICRCs ok, README %d", ok, want.OK)
			}

			// The text form starts with the README's line (opcode names as
			// the wire table spells them).
			rc, out, _ = runCmd("decode", path)
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if rc != 0 || len(lines) != len(want.Lines) {
				t.Fatalf("text: exit %d, %d lines", rc, len(lines))
			}
			for i, w := range want.Lines {
				f := strings.Fields(w.Text)
				f[4] = rocetest.WireOpcode(f[4])
				if prefix := strings.Join(f, " "); !strings.HasPrefix(lines[i], prefix+" ") && lines[i] != prefix {
					t.Errorf("text line %d\n got %s\nwant %s...", i, lines[i], prefix)
				}
			}
		})
	}
}

// The CM MADs decode to the values of the README's tshark table.
func TestDecodeGoldenCM(t *testing.T) {
	dir, err := rocetest.Dir()
	if err != nil {
		t.Fatal(err)
	}
	listing, err := rocetest.Listing()
	if err != nil {
		t.Fatal(err)
	}
	rc, out, _ := runCmd("decode", "--json", filepath.Join(dir, "rdma_cm_rping.pcap"))
	if rc != 0 {
		t.Fatalf("exit %d", rc)
	}
	byFrame := map[uint64]map[string]any{}
	for _, m := range jsonPackets(t, out) {
		byFrame[num(t, m, "frame")] = m
	}
	names := map[uint64]string{0x10: "ConnectRequest", 0x13: "ConnectReply", 0x14: "ReadyToUse",
		0x15: "DisconnectRequest", 0x16: "DisconnectReply"}
	table := listing["rdma_cm_rping.pcap"].Tables
	if len(table) != 1 || len(table[0]) != 5 {
		t.Fatalf("README CM table %v", table)
	}
	for _, row := range table[0] {
		n, _ := strconv.ParseUint(row["frame.number"], 10, 64)
		m := byFrame[n]
		if m == nil {
			t.Fatalf("frame %d not decoded", n)
		}
		md := obj(t, m, "mad")
		hexEq := func(key string, got uint64) {
			t.Helper()
			if w, ok := row[key]; ok {
				if v, err := strconv.ParseUint(w, 0, 64); err != nil || v != got {
					t.Errorf("frame %d %s: %#x, tshark %s", n, key, got, w)
				}
			}
		}
		if num(t, md, "class") != mad.ClassCM || num(t, md, "method") != mad.MethodSend {
			t.Errorf("frame %d: class %v method %v", n, md["class"], md["method"])
		}
		attr := num(t, md, "attr_id")
		hexEq("infiniband.mad.attributeid", attr)
		if str(t, md, "attr") != names[attr] {
			t.Errorf("frame %d: attr %v, want %s", n, md["attr"], names[attr])
		}
		hexEq("infiniband.mad.transactionid", num(t, md, "tid"))
		if str(t, m, "src") != row["ip.src"] {
			t.Errorf("frame %d: src %v, tshark %s", n, m["src"], row["ip.src"])
		}
		switch attr {
		case mad.AttrConnectRequest:
			hexEq("infiniband.cm.req.serviceid.dport", num(t, md, "service_id")&0xffff)
			hexEq("infiniband.cm.req.localqpn", num(t, md, "local_qpn"))
			hexEq("infiniband.cm.req.startpsn", num(t, md, "starting_psn"))
			hexEq("infiniband.cm.req.pppmtu", num(t, md, "path_mtu"))
			ipcm := obj(t, md, "ip_cm")
			if str(t, ipcm, "src") != "192.0.2.12" || str(t, ipcm, "dst") != "192.0.2.11" {
				t.Errorf("ip_cm %v", ipcm)
			}
		case mad.AttrConnectReply:
			hexEq("infiniband.cm.rep.localqpn", num(t, md, "local_qpn"))
			hexEq("infiniband.cm.rep.startpsn", num(t, md, "starting_psn"))
		default:
			num(t, md, "local_comm_id")
			num(t, md, "remote_comm_id")
		}
	}
}

// handFrame is one frame of a hand-made capture and what decoding it must
// print.
type handFrame struct {
	data     []byte
	caplen   int    // 0: all of data
	wantLine bool   // a line is printed
	wantErr  string // substring of the error, "" for none
	wantICRC string // "ok", "bad" or "" (absent)
}

func goldenFrame(t *testing.T, name string, n int) []byte {
	t.Helper()
	dir, err := rocetest.Dir()
	if err != nil {
		t.Fatal(err)
	}
	frames, err := rocetest.ReadFrames(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(frames[n-1].Data)
}

func udpFrame(t *testing.T, sport, dport uint16, payload []byte) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2},
		EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.IPv4(192, 0, 2, 1), DstIP: net.IPv4(192, 0, 2, 2)}
	udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, eth, ip, udp, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func handMadeFrames(t *testing.T) []handFrame {
	good := goldenFrame(t, "rdma_write.pcap", 20) // RC_RDMA_WRITE_FIRST
	corrupt := bytes.Clone(good)
	corrupt[len(corrupt)-100] ^= 0x01 // a payload byte
	unknown := udpFrame(t, 49152, wire.RoCEv2Port, make([]byte, 40))
	unknown[14+20+8] = 0x1e // no such opcode
	if err := rocelayers.SealFrame(unknown); err != nil {
		t.Fatal(err)
	}
	shortRoCE := udpFrame(t, 49152, wire.RoCEv2Port, []byte{byte(wire.RCRDMAWriteFirst), 0, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 1, 1, 2, 3, 4})
	arp := make([]byte, header.EthernetHeaderLen+header.ARPLen)
	header.Ethernet(arp).Encode([6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, [6]byte{2, 0, 0, 0, 0, 1}, header.EtherTypeARP)
	header.ARP(arp[header.EthernetHeaderLen:]).Encode(&header.ARPFields{Op: header.ARPRequest,
		SenderMAC: [6]byte{2, 0, 0, 0, 0, 1}, SenderIP: [4]byte{192, 0, 2, 1}, TargetIP: [4]byte{192, 0, 2, 2}})
	tcp := goldenFrame(t, "rc_send.pcap", 4) // the TCP out-of-band exchange
	return []handFrame{
		{data: arp},
		{data: good, wantLine: true, wantICRC: "ok"},
		{data: tcp},
		{data: udpFrame(t, 5353, 53, []byte("not RoCE"))},
		{data: udpFrame(t, wire.RoCEv2Port, 40000, make([]byte, 32))}, // source port 4791 only
		{data: good[:14+20+8+6], wantLine: true, wantErr: "truncated"},
		{data: shortRoCE, wantLine: true, wantErr: "truncated RoCEv2 packet"},
		{data: corrupt, wantLine: true, wantICRC: "bad"},
		{data: unknown, wantLine: true, wantErr: "unknown opcode 0x1e"},
		{data: good, caplen: 200, wantLine: true, wantErr: "truncated capture: 200 of"},
		{data: good[:13]},
		{data: goldenFrame(t, "rdma_cm_rping.pcap", 1), wantLine: true, wantICRC: "ok"},
	}
}

func writePcap(t *testing.T, frames []handFrame, ng bool) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hand.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var write func(gopacket.CaptureInfo, []byte) error
	if ng {
		w, err := pcapgo.NewNgWriter(f, layers.LinkTypeEthernet)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Flush()
		write = w.WritePacket
	} else {
		w := pcapgo.NewWriter(f)
		if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
			t.Fatal(err)
		}
		write = w.WritePacket
	}
	for i, fr := range frames {
		data := fr.data
		if fr.caplen > 0 {
			data = data[:fr.caplen]
		}
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(1700000000, int64(i)*1000), CaptureLength: len(data), Length: len(fr.data)}
		if err := write(ci, data); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// Non-RoCE frames print nothing, broken RoCE frames an error line, a bad
// ICRC "bad"; decoding goes on to the end, frames counted as tshark does.
func TestDecodeHandMadeCapture(t *testing.T) {
	frames := handMadeFrames(t)
	for _, ng := range []bool{false, true} {
		path := writePcap(t, frames, ng)
		rc, out, errOut := runCmd("decode", "--json", path)
		if rc != 0 || errOut != "" {
			t.Fatalf("ng=%v: exit %d: %s", ng, rc, errOut)
		}
		recs := jsonPackets(t, out)
		i := 0
		for n, fr := range frames {
			if !fr.wantLine {
				continue
			}
			if i >= len(recs) {
				t.Fatalf("ng=%v: no line for frame %d", ng, n+1)
			}
			m := recs[i]
			i++
			if got := num(t, m, "frame"); got != uint64(n+1) {
				t.Fatalf("ng=%v: line for frame %d, want %d", ng, got, n+1)
			}
			e, hasErr := m["error"].(string)
			if fr.wantErr == "" && hasErr || fr.wantErr != "" && !strings.Contains(e, fr.wantErr) {
				t.Errorf("ng=%v frame %d: error %q, want %q", ng, n+1, e, fr.wantErr)
			}
			if ic, _ := m["icrc"].(string); ic != fr.wantICRC {
				t.Errorf("ng=%v frame %d: icrc %q, want %q", ng, n+1, ic, fr.wantICRC)
			}
			if fr.wantErr == "" {
				checkRecord(t, m)
			} else if str(t, m, "src") != "192.0.2.12" && str(t, m, "src") != "192.0.2.1" {
				t.Errorf("frame %d: src %v", n+1, m["src"])
			}
		}
		if i != len(recs) {
			t.Errorf("ng=%v: %d lines, want %d", ng, len(recs), i)
		}
		// The same in text: one line each, errors spelled out.
		rc, out, _ = runCmd("decode", path)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if rc != 0 || len(lines) != len(recs) {
			t.Fatalf("text: exit %d, %d lines", rc, len(lines))
		}
		if !strings.Contains(lines[1], "error: ") || !strings.Contains(lines[3], "icrc=") || !strings.Contains(lines[3], " bad") {
			t.Errorf("text lines:\n%s", out)
		}
	}
}

// Files that cannot be read exit 1 with one line on stderr; the frames
// before a cut-off record still print.
func TestDecodeUnreadable(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pcap")
	os.WriteFile(garbage, []byte("this is not a capture file at all"), 0o644)
	empty := filepath.Join(dir, "empty.pcap")
	os.WriteFile(empty, nil, 0o644)
	golden, _ := os.ReadFile(writePcap(t, handMadeFrames(t)[:3], false))
	cut := filepath.Join(dir, "cut.pcap")
	os.WriteFile(cut, golden[:len(golden)-10], 0o644)
	raw := filepath.Join(dir, "raw.pcap")
	{
		f, _ := os.Create(raw)
		w := pcapgo.NewWriter(f)
		w.WriteFileHeader(65535, layers.LinkTypeRaw)
		f.Close()
	}
	for _, c := range []struct {
		path, errPart string
		lines         int
	}{
		{filepath.Join(dir, "missing.pcap"), "no such file", 0},
		{garbage, "garbage.pcap", 0},
		{empty, "empty.pcap", 0},
		{cut, "frame 3", 1},
		{raw, "link type", 0},
		{dir, "", 0},
	} {
		rc, out, errOut := runCmd("decode", c.path)
		if rc != exitFail {
			t.Errorf("%s: exit %d", c.path, rc)
		}
		if strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "vrnicctl decode: ") || !strings.Contains(errOut, c.errPart) {
			t.Errorf("%s: stderr %q", c.path, errOut)
		}
		if n := strings.Count(out, "\n"); n != c.lines {
			t.Errorf("%s: %d lines printed, want %d", c.path, n, c.lines)
		}
	}
}

func TestCommandLine(t *testing.T) {
	dir, err := rocetest.Dir()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "uc_send.pcap")
	for _, c := range []struct {
		args   []string
		rc     int
		out    string // substring of stdout
		errOut string // substring of stderr
	}{
		{nil, exitUsage, "", "usage: vrnicctl COMMAND"},
		{[]string{"help"}, exitOK, "decode ", ""},
		{[]string{"--help"}, exitOK, "commands:", ""},
		{[]string{"help", "decode"}, exitOK, "-json", ""},
		{[]string{"help", "nosuch"}, exitUsage, "", "unknown command"},
		{[]string{"nosuch"}, exitUsage, "", `unknown command "nosuch"`},
		{[]string{"decode"}, exitUsage, "", "want 1 argument"},
		{[]string{"decode", file, file}, exitUsage, "", "want 1 argument"},
		{[]string{"decode", "--bogus", file}, exitUsage, "", "flag provided but not defined"},
		{[]string{"decode", "-h"}, exitOK, "", "usage: vrnicctl decode"},
		{[]string{"decode", file, "--json"}, exitOK, `"opcode":"UC_SEND_ONLY"`, ""},
		{[]string{"decode", "-json", file}, exitOK, `"opcode":"UC_SEND_ONLY"`, ""},
		{[]string{"decode", "--", file}, exitOK, "UC_SEND_ONLY qp=", ""},
	} {
		rc, out, errOut := runCmd(c.args...)
		if rc != c.rc || !strings.Contains(out, c.out) || !strings.Contains(errOut, c.errOut) {
			t.Errorf("%q: exit %d (want %d)\nstdout %q\nstderr %q", c.args, rc, c.rc, out, errOut)
		}
	}
}

// The frame decoder handles every opcode of the wire table, also over IPv6
// and with a VLAN tag.
func TestDecodeEveryOpcode(t *testing.T) {
	d := newFrameDecoder()
	for o := range 256 {
		op := wire.Opcode(o)
		if !op.Valid() {
			continue
		}
		for _, v6 := range []bool{false, true} {
			frame := opcodeFrame(t, op, 13, v6, v6)
			rec := d.decode(1, frame, gopacket.CaptureInfo{CaptureLength: len(frame), Length: len(frame)})
			b, err := json.Marshal(rec)
			if err != nil {
				t.Fatal(err)
			}
			m := jsonRecord(t, b)
			info := checkRecord(t, m)
			if str(t, m, "icrc") != "ok" {
				t.Errorf("%s: icrc %v", op, m["icrc"])
			}
			want := 0
			if info.Has(wire.FlagPayload) {
				want = 13
			}
			if got := num(t, m, "payload_len"); got != uint64(want) {
				t.Errorf("%s: payload_len %d, want %d", op, got, want)
			}
			if v6 && str(t, m, "src") != "2001:db8::1" {
				t.Errorf("src %v", m["src"])
			}
			if rec.human() == "" {
				t.Error("empty text")
			}
		}
	}
}

// opcodeFrame is a sealed frame of opcode op with fixed, recognisable
// header fields.
func opcodeFrame(t testing.TB, op wire.Opcode, payload int, v6, vlan bool) []byte {
	t.Helper()
	info := op.Info()
	if !info.Has(wire.FlagPayload) {
		payload = 0
	}
	f := wire.PacketFields{
		BTH:          wire.BTHFields{Opcode: op, SE: true, PKey: 0xffff, DestQP: 0x123456, AckReq: true, PSN: 0xabcdef},
		DETH:         wire.DETHFields{QKey: 0x11111111, SrcQP: 0x654321},
		RETH:         wire.RETHFields{VA: 0x1122334455667788, RKey: 0x99aabbcc, Length: 4096},
		AtomicETH:    wire.AtomicETHFields{VA: 0x1000, RKey: 0x42, SwapAdd: 0x0102030405060708, Compare: 0x1112131415161718},
		AETH:         wire.AETHFields{Syndrome: 0x1f, MSN: 0x77},
		AtomicAckETH: 0xdeadbeefcafef00d, Imm: 0x2a2b2c2d, IETH: 0x5151,
		FETH:    wire.FETHFields{Selectivity: 1, Placement: 2},
		Payload: bytes.Repeat([]byte{0xa5}, payload),
	}
	roce := make([]byte, f.EncodedLen())
	f.Encode(roce)
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}
	ls := []gopacket.SerializableLayer{eth}
	next := &eth.EthernetType
	if vlan {
		eth.EthernetType = layers.EthernetTypeDot1Q
		q := &layers.Dot1Q{VLANIdentifier: 100}
		ls = append(ls, q)
		next = &q.Type
	}
	if v6 {
		*next = layers.EthernetTypeIPv6
		ls = append(ls, &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP,
			SrcIP: net.ParseIP("2001:db8::1"), DstIP: net.ParseIP("2001:db8::2")})
	} else {
		*next = layers.EthernetTypeIPv4
		ls = append(ls, &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP,
			SrcIP: net.IPv4(192, 0, 2, 1), DstIP: net.IPv4(192, 0, 2, 2)})
	}
	ls = append(ls, &layers.UDP{SrcPort: 49152, DstPort: wire.RoCEv2Port}, gopacket.Payload(roce))
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, ls...); err != nil {
		t.Fatal(err)
	}
	out := buf.Bytes()
	if err := rocelayers.SealFrame(out); err != nil {
		t.Fatal(err)
	}
	return out
}
