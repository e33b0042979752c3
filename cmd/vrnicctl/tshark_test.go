package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/vrnic/vrnicd/transport/wire"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/rocetest"
)

// tsharkField is one tshark field and where decode --json keeps the same
// value; hex fields are tshark byte strings.
type tsharkField struct {
	name string
	hex  bool
	ours func(m map[string]any) (uint64, bool)
	bth  bool // a BTH field: compared for every opcode
}

func jsonNum(v any) (uint64, bool) {
	switch x := v.(type) {
	case json.Number:
		n, err := strconv.ParseUint(string(x), 10, 64)
		return n, err == nil
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

func key(k string) func(map[string]any) (uint64, bool) {
	return func(m map[string]any) (uint64, bool) { return jsonNum(m[k]) }
}

func sub(o string, keys ...string) func(map[string]any) (uint64, bool) {
	return func(m map[string]any) (uint64, bool) {
		x, ok := m[o].(map[string]any)
		if !ok {
			return 0, false
		}
		for _, k := range keys {
			if v, ok := jsonNum(x[k]); ok {
				return v, true
			}
		}
		return 0, false
	}
}

// either reads the first of several sources present (tshark shows the
// AtomicETH's VA and R_Key in its RETH fields).
func either(fs ...func(map[string]any) (uint64, bool)) func(map[string]any) (uint64, bool) {
	return func(m map[string]any) (uint64, bool) {
		for _, f := range fs {
			if v, ok := f(m); ok {
				return v, true
			}
		}
		return 0, false
	}
}

var tsharkFields = []tsharkField{
	{name: "infiniband.bth.opcode", ours: key("opcode_num"), bth: true},
	{name: "infiniband.bth.psn", ours: key("psn"), bth: true},
	{name: "infiniband.bth.destqp", ours: key("dqpn"), bth: true},
	{name: "infiniband.bth.padcnt", ours: key("padcnt"), bth: true},
	{name: "infiniband.bth.p_key", ours: key("pkey"), bth: true},
	{name: "infiniband.bth.se", ours: key("se"), bth: true},
	{name: "infiniband.bth.a", ours: key("ackreq"), bth: true},
	{name: "infiniband.bth.tver", ours: key("tver"), bth: true},
	{name: "infiniband.reth.va", ours: either(sub("reth", "va"), sub("atomic", "va"))},
	{name: "infiniband.reth.r_key", ours: either(sub("reth", "rkey"), sub("atomic", "rkey"))},
	{name: "infiniband.reth.dmalen", ours: sub("reth", "len")},
	{name: "infiniband.aeth.syndrome", ours: sub("aeth", "syndrome")},
	{name: "infiniband.aeth.msn", ours: sub("aeth", "msn")},
	{name: "infiniband.deth.q_key", ours: sub("deth", "qkey")},
	{name: "infiniband.deth.srcqp", ours: sub("deth", "src_qp")},
	{name: "infiniband.atomiceth.swapdt", ours: sub("atomic", "swap_add")},
	{name: "infiniband.atomiceth.cmpdt", ours: sub("atomic", "compare")},
	{name: "infiniband.atomicacketh.origremdt", ours: sub("atomic_ack", "orig")},
	{name: "infiniband.immdt", hex: true, ours: key("imm")},
	{name: "infiniband.ieth", hex: true, ours: sub("ieth", "rkey")},
	{name: "infiniband.mad.attributeid", ours: sub("mad", "attr_id")},
	{name: "infiniband.mad.transactionid", ours: sub("mad", "tid")},
	{name: "infiniband.mad.mgmtclass", ours: sub("mad", "class")},
	{name: "infiniband.cm.req.localqpn", ours: func(m map[string]any) (uint64, bool) {
		if v, _ := sub("mad", "attr_id")(m); v != 0x10 {
			return 0, false
		}
		return sub("mad", "local_qpn")(m)
	}},
	{name: "infiniband.cm.req.startpsn", ours: func(m map[string]any) (uint64, bool) {
		if v, _ := sub("mad", "attr_id")(m); v != 0x10 {
			return 0, false
		}
		return sub("mad", "starting_psn")(m)
	}},
	{name: "infiniband.cm.rep.startpsn", ours: func(m map[string]any) (uint64, bool) {
		if v, _ := sub("mad", "attr_id")(m); v != 0x13 {
			return 0, false
		}
		return sub("mad", "starting_psn")(m)
	}},
	{name: "infiniband.invariant.crc", hex: false, ours: func(m map[string]any) (uint64, bool) {
		s, ok := m["icrc_wire"].(string)
		if !ok {
			return 0, false
		}
		v, err := strconv.ParseUint(s, 16, 32)
		return v, err == nil
	}},
}

// tsharkDissectsHeaders: Wireshark 4.0 decodes the BTH of FLUSH, ATOMIC
// WRITE and CNP but nothing after it (not even the ICRC).
func tsharkDissectsHeaders(op uint64) bool {
	switch wire.Opcode(op) {
	case wire.RCFlush, wire.RCAtomicWrite, wire.CNP:
		return false
	}
	return true
}

// tsharkSkipsICRC: Wireshark 4.0 shows no ICRC for a SEND that ends a
// message and carries no payload.
func tsharkSkipsICRC(op uint64, m map[string]any) bool {
	info := wire.Opcode(op).Info()
	pl, _ := jsonNum(m["payload_len"])
	return info != nil && info.Has(wire.FlagSend|wire.FlagEnd) && pl == 0
}

// An independent decoder agrees: tshark reads the same fields from every
// golden packet and from a packet of every opcode (IPv4, IPv6, VLAN).
func TestDecodeMatchesTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed (DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends tshark): skipping the cross-check against Wireshark's decoder")
	}
	path := tsharkCapture(t)
	rc, out, errOut := runCmd("decode", "--json", path)
	if rc != 0 {
		t.Fatalf("decode: exit %d: %s", rc, errOut)
	}
	ours := map[int]map[string]any{}
	for _, m := range jsonPackets(t, out) {
		n, _ := jsonNum(m["frame"])
		ours[int(n)] = m
	}
	tout := runTshark(t, tshark, path)
	seen, compared := 0, 0
	for _, line := range strings.Split(strings.TrimSuffix(string(tout), "\n"), "\n") {
		cols := strings.Split(line, "\t")
		n, err := strconv.Atoi(cols[0])
		if err != nil || len(cols) != len(tsharkFields)+1 {
			t.Fatalf("tshark line %q", line)
		}
		m := ours[n]
		if m == nil {
			t.Errorf("frame %d: tshark decodes InfiniBand, vrnicctl printed nothing", n)
			continue
		}
		seen++
		compared += compareTsharkFrame(t, n, m, cols[1:])
	}
	if seen != len(ours) {
		t.Errorf("tshark decoded %d InfiniBand frames, vrnicctl printed %d", seen, len(ours))
	}
	t.Logf("%d frames, %d fields compared with %s", seen, compared, tshark)
}

// tsharkCapture writes one capture with every golden frame and the
// every-opcode frames, which keeps the test to one tshark run.
func tsharkCapture(t *testing.T) string {
	t.Helper()
	var frames [][]byte
	files, err := rocetest.Files()
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		fs, err := rocetest.ReadFrames(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			frames = append(frames, f.Data)
		}
	}
	for o := range 256 {
		if op := wire.Opcode(o); op.Valid() {
			for _, v := range []struct{ v6, vlan bool }{{false, false}, {true, false}, {false, true}} {
				for _, n := range []int{0, 13} {
					frames = append(frames, opcodeFrame(t, op, n, v.v6, v.vlan))
				}
			}
		}
	}
	path := filepath.Join(t.TempDir(), "all.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := pcapgo.NewWriter(f)
	w.WriteFileHeader(65535, layers.LinkTypeEthernet)
	for _, fr := range frames {
		w.WritePacket(gopacket.CaptureInfo{Timestamp: time.Unix(1700000000, 0), CaptureLength: len(fr), Length: len(fr)}, fr)
	}
	f.Close()
	return path
}

// runTshark is tshark's first occurrence of every tsharkFields field of
// path's InfiniBand frames, one tab-separated line a frame.
func runTshark(t *testing.T, tshark, path string) []byte {
	t.Helper()
	args := []string{"-r", path, "-Y", "infiniband", "-T", "fields", "-E", "occurrence=f", "-e", "frame.number"}
	for _, tf := range tsharkFields {
		args = append(args, "-e", tf.name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tshark, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	tout, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v: %s", err, stderr.String())
	}
	return tout
}

// compareTsharkFrame compares frame n's fields as vrnicctl printed them (m)
// with tshark's columns (tsharkFields' order) and says how many it compared.
func compareTsharkFrame(t *testing.T, n int, m map[string]any, cols []string) int {
	t.Helper()
	compared := 0
	op, _ := jsonNum(m["opcode_num"])
	for i, tf := range tsharkFields {
		if !tf.bth && !tsharkDissectsHeaders(op) {
			continue
		}
		tv := cols[i]
		ov, have := tf.ours(m)
		if tv == "" {
			if tf.name == "infiniband.invariant.crc" && tsharkSkipsICRC(op, m) {
				continue
			}
			if have {
				t.Errorf("frame %d (%v): %s: vrnicctl %#x, tshark has none", n, m["opcode"], tf.name, ov)
			}
			continue
		}
		base := 0
		if tf.hex {
			base = 16
		}
		v, err := strconv.ParseUint(tv, base, 64)
		if err != nil {
			t.Fatalf("frame %d: tshark %s=%q: %v", n, tf.name, tv, err)
		}
		if !have || v != ov {
			t.Errorf("frame %d (%v): %s: vrnicctl %#x (present %v), tshark %s", n, m["opcode"], tf.name, ov, have, tv)
		}
		compared++
	}
	return compared
}
