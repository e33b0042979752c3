package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// rcPair is two RC QPs of one device connected to each other through the
// daemon's socket, and a registered buffer.
type rcPair struct {
	d          *verbs.Device
	a, b       *verbs.QP
	cq         *verbs.CQ
	mr         *verbs.MR
	psnA, psnB uint32
}

func newRCPair(t *testing.T, sock string, h *nictest.Host) *rcPair {
	t.Helper()
	d, err := verbs.Open(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	p := &rcPair{d: d, psnA: 0x100, psnB: 0x200}
	pd, err := d.AllocPD()
	must(err)
	p.cq, err = d.CreateCQ(64, false)
	must(err)
	buf, err := pd.AllocBuffer(1 << 16)
	must(err)
	p.mr, err = pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	must(err)
	mk := func() *verbs.QP {
		q, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: p.cq, RecvCQ: p.cq,
			Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
		must(err)
		return q
	}
	p.a, p.b = mk(), mk()
	gid := verbs.GID(h.GID())
	for _, s := range []struct {
		q, peer *verbs.QP
		sq, rq  uint32
	}{{p.a, p.b, p.psnA, p.psnB}, {p.b, p.a, p.psnB, p.psnA}} {
		must(s.q.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1, AccessFlags: verbs.AccessRemoteWrite},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags))
		must(s.q.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: s.peer.QPN(), RQPSN: s.rq,
			MaxDestRdAtomic: 1, MinRNRTimer: 1, AV: verbs.AHAttr{DGID: gid, SGIDIndex: h.GIDIndex(), HopLimit: 64, Port: 1}},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
				verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer))
		must(s.q.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: s.sq, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic))
	}
	return p
}

// write posts an RDMA WRITE of n bytes from a into b's side of the buffer
// and waits for its completion and for the PSNs to be published.
func (p *rcPair) write(t *testing.T, n int) {
	t.Helper()
	if err := p.a.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{p.mr.SGE(0, uint64(n))}, RemoteAddr: p.mr.Addr() + 32768, RKey: p.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	wc := make([]verbs.WC, 1)
	for end := time.Now().Add(10 * time.Second); p.cq.Poll(wc) == 0; {
		if time.Now().After(end) {
			t.Fatal("no completion")
		}
		time.Sleep(100 * time.Microsecond)
	}
	if wc[0].Status != verbs.WCSuccess {
		t.Fatalf("WRITE %+v", wc[0])
	}
	pkts := uint32((n + 1023) / 1024)
	for end := time.Now().Add(10 * time.Second); ; {
		qs, err := p.d.ListQPs()
		if err != nil {
			t.Fatal(err)
		}
		done := 0
		for _, q := range qs {
			if q.QPN == p.a.QPN() && q.CompPSN == p.psnA+pkts || q.QPN == p.b.QPN() && q.RecvPSN == p.psnA+pkts {
				done++
			}
		}
		if done == 2 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("PSNs not published: %+v", qs)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// orderedKeys returns the keys of the JSON object at the decoder, in order,
// with their values.
func orderedKeys(t *testing.T, dec *json.Decoder) ([]string, map[string]json.RawMessage) {
	t.Helper()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("want an object, got %v %v", tok, err)
	}
	var keys []string
	vals := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		k := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		if _, dup := vals[k]; dup {
			t.Fatalf("key %q twice", k)
		}
		keys = append(keys, k)
		vals[k] = v
	}
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	return keys, vals
}

// stat --json: the device's counters in the daemon's order (transport,
// then the port's), icrc_errors from the link layer, every QP with its
// own counters; stat: the same numbers as text.
func TestStat(t *testing.T) {
	ha, _, sock := daemonHost(t)
	p := newRCPair(t, sock, ha)
	p.write(t, 3000) // three packets, three ACKs at most
	ha.Stack.Counters().ICRCErrors.Add(5)
	doc, want := statJSONDevice(t, sock, ha)
	qa, _ := statJSONQPs(t, doc, p)
	statPlain(t, sock, doc, want, p.a.QPN(), qa)
}

// statDoc is stat --json's object.
type statDoc struct {
	Device map[string]uint64   `json:"device"`
	QPs    []map[string]uint64 `json:"qps"`
}

// statJSONDevice runs stat --json and checks its keys and the device's
// counters; it returns the document and the device's names in order.
func statJSONDevice(t *testing.T, sock string, ha *nictest.Host) (statDoc, []string) {
	t.Helper()
	rc, out, errOut := runCmd("stat", "--json", "--socket", sock)
	if rc != 0 || strings.Count(out, "\n") != 1 {
		t.Fatalf("stat --json: exit %d, stdout %q, stderr %q", rc, out, errOut)
	}
	var doc statDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("stat --json output %q: %v", out, err)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	top, raw := orderedKeys(t, dec)
	if strings.Join(top, ",") != "device,qps" {
		t.Fatalf("top-level keys %v", top)
	}
	devKeys, _ := orderedKeys(t, json.NewDecoder(strings.NewReader(string(raw["device"]))))
	var want []string
	want = append(want, transport.CounterNames()...)
	ha.Stack.Counters().Each(func(n string, _ uint64) {
		if n != "icrc_errors" { // one of the transport's names
			want = append(want, n)
		}
	})
	if strings.Join(devKeys, ",") != strings.Join(want, ",") {
		t.Fatalf("device keys\n got %v\nwant %v", devKeys, want)
	}
	if doc.Device["icrc_errors"] != 5 || doc.Device["retransmit_timeouts"] != 0 || doc.Device["local_op_replays"] != 0 {
		t.Errorf("device icrc_errors %d (want 5), retransmit_timeouts %d, local_op_replays %d",
			doc.Device["icrc_errors"], doc.Device["retransmit_timeouts"], doc.Device["local_op_replays"])
	}
	return doc, want
}

// statJSONQPs checks the two QPs' objects of stat --json against the
// traffic and the device's sums, and returns them (writer, target).
func statJSONQPs(t *testing.T, doc statDoc, p *rcPair) (qa, qb map[string]uint64) {
	t.Helper()
	if len(doc.QPs) != 2 {
		t.Fatalf("qps %v", doc.QPs)
	}
	for _, q := range doc.QPs {
		switch uint32(q["qpn"]) {
		case p.a.QPN():
			qa = q
		case p.b.QPN():
			qb = q
		}
		if len(q) != len(transport.CounterNames())+1 {
			t.Errorf("QP %d has %d keys", q["qpn"], len(q))
		}
	}
	if qa == nil || qb == nil {
		t.Fatalf("qps %v, want QPNs %d and %d", doc.QPs, p.a.QPN(), p.b.QPN())
	}
	if qa["sent_pkts"] != 3 || qb["rcvd_pkts"] != 3 || qb["sent_pkts"] == 0 || qa["rcvd_pkts"] != qb["sent_pkts"] {
		t.Errorf("writer %v, target %v", qa, qb)
	}
	for _, n := range transport.CounterNames() {
		if n == "icrc_errors" {
			continue
		}
		if doc.Device[n] != qa[n]+qb[n] {
			t.Errorf("device %s = %d, QPs %d + %d", n, doc.Device[n], qa[n], qb[n])
		}
	}
	return qa, qb
}

// statPlain checks plain stat -a: the device's lines in want's order with
// the values of doc, then one line a QP, the writer's (qpnA) as qa says,
// with every counter; and stat without -a: the counters that are not zero.
func statPlain(t *testing.T, sock string, doc statDoc, want []string, qpnA uint32, qa map[string]uint64) {
	t.Helper()
	statQPLine(t, sock, doc, want, qpnA, qa, false)
	statQPLine(t, sock, doc, want, qpnA, qa, true)
}

// statQPLine runs stat (-a if all) and checks its device lines and QP A's
// line.
func statQPLine(t *testing.T, sock string, doc statDoc, want []string, qpnA uint32, qa map[string]uint64, all bool) {
	t.Helper()
	args := []string{"stat", "--socket", sock}
	if all {
		args = append(args, "-a")
	}
	rc, out, errOut := runCmd(args...)
	if rc != 0 {
		t.Fatalf("stat: exit %d, stderr %q", rc, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if lines[0] != "device vrnic0" {
		t.Fatalf("first line %q", lines[0])
	}
	for i, name := range want {
		f := strings.Fields(lines[1+i])
		if len(f) != 2 || f[0] != name || f[1] != fmt.Sprint(doc.Device[name]) || !strings.HasPrefix(lines[1+i], "    ") {
			t.Errorf("device line %q, want %s %d", lines[1+i], name, doc.Device[name])
		}
	}
	qpLines := lines[1+len(want):]
	if len(qpLines) != 2 {
		t.Fatalf("QP lines %q", qpLines)
	}
	wantA := fmt.Sprintf("qp 0x%06x", qpnA)
	for _, n := range transport.CounterNames() {
		if all || qa[n] != 0 {
			wantA += fmt.Sprintf(" %s %d", n, qa[n])
		}
	}
	if !all && (!strings.Contains(wantA, " sent_pkts 3") || regexp.MustCompile(` 0( |$)`).MatchString(wantA)) {
		t.Errorf("QP A's counters %v: want sent_pkts 3 and zeros left out: %q", qa, wantA)
	}
	if qpLines[0] != wantA && qpLines[1] != wantA {
		t.Errorf("no line %q in %q", wantA, qpLines)
	}
}

// qp and qp --json: each QP of the device, its peer (QPN and address),
// PSNs, send window (128 PSNs on a clean link) and measured round trip,
// outstanding WQEs and the pid and name of its client.
func TestQP(t *testing.T) {
	ha, _, sock := daemonHost(t)
	p := newRCPair(t, sock, ha)
	p.write(t, 2048) // two packets
	rc, out, errOut := runCmd("qp", "--json", "--socket", sock)
	if rc != 0 {
		t.Fatalf("qp --json: exit %d, stderr %q", rc, errOut)
	}
	var doc struct {
		QPs []jsonQP `json:"qps"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	pid := os.Getpid()
	self, _ := os.ReadFile("/proc/self/comm")
	me, peer := strings.TrimSpace(string(self)), ha.Addr.String() // both QPs on one device: each other's peer
	wantA := jsonQP{QPN: p.a.QPN(), Type: "RC", State: "RTS", DestQPN: p.b.QPN(), SendPSN: p.psnA + 2, CompPSN: p.psnA + 2,
		RecvPSN: p.psnB, PID: pid, Comm: me, Peer: peer, Window: 128}
	wantB := jsonQP{QPN: p.b.QPN(), Type: "RC", State: "RTS", DestQPN: p.a.QPN(), SendPSN: p.psnB, CompPSN: p.psnB,
		RecvPSN: p.psnA + 2, PID: pid, Comm: me, Peer: peer, Window: 128}
	if len(doc.QPs) == 2 {
		if doc.QPs[0].SRTTUS <= 0 || doc.QPs[1].SRTTUS != 0 {
			t.Errorf("srtt_us %d and %d: want the WRITEs' round trip for A, none for B (it sent nothing)",
				doc.QPs[0].SRTTUS, doc.QPs[1].SRTTUS)
		}
		doc.QPs[0].SRTTUS = 0
	}
	if len(doc.QPs) != 2 || doc.QPs[0] != wantA || doc.QPs[1] != wantB {
		t.Fatalf("qp --json %+v\nwant %+v\n     %+v", doc.QPs, wantA, wantB)
	}

	rc, out, errOut = runCmd("qp", "--socket", sock)
	if rc != 0 {
		t.Fatalf("qp: exit %d, stderr %q", rc, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 || !regexp.MustCompile(`^QPN +TYPE +STATE +DEST_QPN +PEER +SQ_PSN +COMP_PSN +RQ_PSN +WINDOW +SRTT_US +OUTSTANDING +PID +COMM$`).MatchString(lines[0]) {
		t.Fatalf("qp output:\n%s", out)
	}
	for i, w := range []jsonQP{wantA, wantB} {
		rtt := "-"
		if i == 0 {
			rtt = `\d+`
		}
		want := []string{fmt.Sprintf("0x%06x", w.QPN), "RC", "RTS", fmt.Sprintf("0x%06x", w.DestQPN), regexp.QuoteMeta(peer),
			fmt.Sprintf("0x%06x", w.SendPSN), fmt.Sprintf("0x%06x", w.CompPSN), fmt.Sprintf("0x%06x", w.RecvPSN), "128", rtt, "0",
			fmt.Sprint(pid), regexp.QuoteMeta(me)}
		if got := strings.Fields(lines[1+i]); !regexp.MustCompile("^" + strings.Join(want, " ") + "$").MatchString(strings.Join(got, " ")) {
			t.Errorf("line %q, want fields %v", lines[1+i], want)
		}
	}

	// Once the client is gone, so are its QPs.
	p.d.Close()
	for end := time.Now().Add(5 * time.Second); ; {
		_, out, _ = runCmd("qp", "--json", "--socket", sock)
		if strings.TrimSpace(out) == `{"qps":[]}` {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("QPs left after the client closed: %s", out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
