package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/verbsock/server"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// resObjects is one client's objects of every kind: rcPair's PD, CQ, MR
// and two RC QPs, and on a second PD an MR with a window bound to it, an
// SRQ and an AH to the other host.
type resObjects struct {
	*rcPair
	mr2 *verbs.MR
	mw  *verbs.MW
	srq *verbs.SRQ
}

func newResObjects(t *testing.T, sock string, ha, hb *nictest.Host) *resObjects {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	o := &resObjects{rcPair: newRCPair(t, sock, ha)}
	pd, err := o.d.AllocPD()
	must(err)
	buf, err := pd.AllocBuffer(1 << 13)
	must(err)
	o.mr2, err = pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessMWBind)
	must(err)
	o.mw, err = pd.AllocMW(verbs.MWType1)
	must(err)
	must(o.mw.Bind(o.mr2, o.mr2.Addr(), 4096, verbs.AccessRemoteRead))
	o.srq, err = pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: 16, MaxSGE: 2})
	must(err)
	_, err = pd.CreateAH(verbs.AHAttr{DGID: hb.GID(), SGIDIndex: ha.GIDIndex(), HopLimit: 7, Port: 1})
	must(err)
	return o
}

// runJSON runs vrnicctl with args and decodes its one line of JSON into v.
func runJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	rc, out, errOut := runCmd(args...)
	if rc != 0 || strings.Count(out, "\n") != 1 {
		t.Fatalf("%q: exit %d, stdout %q, stderr %q", args, rc, out, errOut)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber() // keys and addresses exact, printed as they came
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%q: %v in %s", args, err, out)
	}
}

func self(t *testing.T) (int, string) {
	b, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	return os.Getpid(), strings.TrimSpace(string(b))
}

// res: the summary counts every object of the client (and two clients:
// it and vrnicctl's own connection), in text as rdma resource show.
func TestResSummary(t *testing.T) {
	ha, hb, sock := daemonHost(t)
	newResObjects(t, sock, ha, hb)
	var doc struct {
		Device string         `json:"device"`
		Counts map[string]int `json:"counts"`
	}
	runJSON(t, &doc, "res", "--json", "--socket", sock)
	want := map[string]int{"pd": 2, "mr": 2, "mw": 1, "cq": 1, "qp": 2, "srq": 1, "ah": 1, "client": 2}
	if doc.Device != "vrnic0" || fmt.Sprint(doc.Counts) != fmt.Sprint(want) {
		t.Errorf("res --json: %+v, want vrnic0 %v", doc, want)
	}
	rc, out, errOut := runCmd("res", "--socket", sock)
	if wantText := "vrnic0: pd 2 mr 2 mw 1 cq 1 qp 2 srq 1 ah 1 client 2\n"; rc != 0 || out != wantText {
		t.Errorf("res: exit %d, %q (stderr %q), want %q", rc, out, errOut, wantText)
	}
	if rc, _, errOut := runCmd("res", "bogus", "--socket", sock); rc != exitUsage || !strings.Contains(errOut, `unknown object kind "bogus"`) {
		t.Errorf("res bogus: exit %d, stderr %q", rc, errOut)
	}
	if rc, _, errOut := runCmd("res", "mr", "qp", "--socket", sock); rc != exitUsage || !strings.Contains(errOut, "one object kind at most") {
		t.Errorf("res mr qp: exit %d, stderr %q", rc, errOut)
	}
}

// resDoc is res KIND --json's list.
type resDoc map[string][]map[string]any

// one returns the entry of doc's list whose key has the value v.
func (doc resDoc) one(t *testing.T, kind, key string, v any) map[string]any {
	t.Helper()
	for _, e := range doc[kind] {
		if fmt.Sprint(e[key]) == fmt.Sprint(v) {
			return e
		}
	}
	t.Fatalf("no %s with %s %v in %v", kind, key, v, doc[kind])
	return nil
}

// has checks that e has the fields of want (compared as text).
func has(t *testing.T, what string, e map[string]any, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if fmt.Sprint(e[k]) != fmt.Sprint(v) {
			t.Errorf("%s: %s = %v, want %v (%v)", what, k, e[k], v, e)
		}
	}
}

// res KIND --json lists each object with its owner and what its kind has:
// keys, range and access of MRs and windows, CQ and SRQ sizes and users,
// QP numbers, types, states, depths and peers, AH destinations.
func TestResKinds(t *testing.T) {
	ha, hb, sock := daemonHost(t)
	o := newResObjects(t, sock, ha, hb)
	pid, me := self(t)
	owner := map[string]any{"pid": pid, "comm": me}
	get := func(kind string) resDoc {
		var doc resDoc
		runJSON(t, &doc, "res", kind, "--json", "--socket", sock)
		if len(doc) != 1 || doc[kind] == nil {
			t.Fatalf("res %s --json: %v", kind, doc)
		}
		for _, e := range doc[kind] {
			has(t, kind, e, owner)
		}
		return doc
	}
	if d := get("pd"); len(d["pd"]) != 2 {
		t.Errorf("PDs %v", d["pd"])
	}
	mrs := get("mr")
	has(t, "MR", mrs.one(t, "mr", "lkey", o.mr.LKey()), map[string]any{"rkey": o.mr.RKey(), "iova": o.mr.Addr(),
		"length": 1 << 16, "access": "LOCAL_WRITE|REMOTE_WRITE", "bound_mws": 0, "keys_hidden": false})
	has(t, "MR 2", mrs.one(t, "mr", "lkey", o.mr2.LKey()), map[string]any{"length": 1 << 13,
		"access": "LOCAL_WRITE|REMOTE_READ|MW_BIND", "bound_mws": 1})
	has(t, "MW", get("mw").one(t, "mw", "rkey", o.mw.RKey()), map[string]any{"type": "1", "iova": o.mr2.Addr(),
		"length": 4096, "access": "REMOTE_READ"})
	has(t, "CQ", get("cq")["cq"][0], map[string]any{"cqe": 64, "users": 2})
	qps := get("qp")
	for _, q := range []*verbs.QP{o.a, o.b} {
		has(t, "QP", qps.one(t, "qp", "qpn", q.QPN()), map[string]any{"type": "RC", "state": "RTS", "max_send_wr": 8,
			"max_recv_wr": 8, "max_send_sge": 1, "srq": 0, "peer": ha.Addr.String()})
	}
	has(t, "SRQ", get("srq").one(t, "srq", "srqn", o.srq.SRQN()), map[string]any{"max_wr": 16, "max_sge": 2, "users": 0})
	has(t, "AH", get("ah")["ah"][0], map[string]any{"dest": hb.Addr.String(), "hop_limit": 7, "sgid_index": ha.GIDIndex()})
}

// res mr and res qp as text: a header and one aligned line per object,
// keys in hex, the owner's pid and name last.
func TestResText(t *testing.T) {
	ha, hb, sock := daemonHost(t)
	o := newResObjects(t, sock, ha, hb)
	pid, me := self(t)
	rc, out, errOut := runCmd("res", "mr", "--socket", sock)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if rc != 0 || len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "CLIENT HANDLE PD LKEY RKEY IOVA LENGTH ACCESS MWS PID COMM" {
		t.Fatalf("res mr: exit %d, stderr %q:\n%s", rc, errOut, out)
	}
	want := fmt.Sprintf(`^\d+ +\d+ +\d+ +0x%08x +0x%08x +0x%x +65536 +LOCAL_WRITE\|REMOTE_WRITE +0 +%d +%s$`,
		o.mr.LKey(), o.mr.RKey(), o.mr.Addr(), pid, regexp.QuoteMeta(me))
	if !regexp.MustCompile(want).MatchString(lines[1]) && !regexp.MustCompile(want).MatchString(lines[2]) {
		t.Errorf("res mr: no line matches %s:\n%s", want, out)
	}
	rc, out, _ = runCmd("res", "qp", "--socket", sock)
	want = fmt.Sprintf(`(?m)^\d+ +\d+ +0x%06x +RC +RTS +\d+ +8 +8 +1 +\d+ +\d+ +0 +%s +%d +%s$`, o.a.QPN(),
		regexp.QuoteMeta(ha.Addr.String()), pid, regexp.QuoteMeta(me))
	if rc != 0 || !regexp.MustCompile(want).MatchString(out) {
		t.Errorf("res qp: exit %d, no line matches %s:\n%s", rc, want, out)
	}
}

// res client: each connection's objects against its quotas, and its
// uid's against the uid's; the client that made the objects holds them,
// vrnicctl's own connection nothing.
func TestResClient(t *testing.T) {
	ha, hb, sock := daemonHost(t)
	newResObjects(t, sock, ha, hb)
	pid, me := self(t)
	var doc struct {
		Clients []struct {
			Client int    `json:"client"`
			PID    int    `json:"pid"`
			Comm   string `json:"comm"`
			UID    int    `json:"uid"`
			jsonQuota
		} `json:"clients"`
		Users []struct {
			UID int `json:"uid"`
			jsonQuota
		} `json:"users"`
	}
	runJSON(t, &doc, "res", "client", "--json", "--socket", sock)
	if len(doc.Clients) != 2 || len(doc.Users) != 1 {
		t.Fatalf("res client --json: %+v", doc)
	}
	maker, tool := doc.Clients[0], doc.Clients[1]
	wantUsed := map[string]uint64{"pd": 2, "cq": 1, "qp": 2, "srq": 1, "mr": 2, "mw": 1, "ah": 1, "mr_bytes": 1<<16 + 1<<13}
	for k, v := range wantUsed {
		if maker.Used[k] != v || doc.Users[0].Used[k] != v || tool.Used[k] != 0 {
			t.Errorf("%s: client %d, uid %d, vrnicctl %d; want %d", k, maker.Used[k], doc.Users[0].Used[k], tool.Used[k], v)
		}
	}
	if maker.Used["mem"] < 2 || maker.Used["mem_bytes"] < 1<<16 {
		t.Errorf("memory: %d objects, %d bytes", maker.Used["mem"], maker.Used["mem_bytes"])
	}
	if maker.PID != pid || maker.Comm != me || maker.UID != os.Getuid() || doc.Users[0].UID != os.Getuid() ||
		maker.Limit["qp"] != uint64(server.DefaultLimits.MaxQP) || maker.Limit["mr_bytes"] != server.DefaultLimits.MaxMRBytes ||
		doc.Users[0].Limit["pd"] != uint64(server.DefaultUserLimits.MaxPD) {
		t.Errorf("client %+v, uid %+v", maker, doc.Users[0])
	}
	rc, out, _ := runCmd("res", "client", "--socket", sock)
	want := fmt.Sprintf(`(?m)^%d +%d +%s +%d +2/%d +1/%d +2/%d `, maker.Client, pid, regexp.QuoteMeta(me), os.Getuid(),
		server.DefaultLimits.MaxPD, server.DefaultLimits.MaxCQ, server.DefaultLimits.MaxQP)
	if rc != 0 || !regexp.MustCompile(want).MatchString(out) || !regexp.MustCompile(`(?m)^uid +- +- +\d+ +2/`).MatchString(out) {
		t.Errorf("res client: exit %d, want a line matching %s and a uid line:\n%s", rc, want, out)
	}
}

// res pages through more objects than a reply holds: every one once.
func TestResPages(t *testing.T) {
	ha, hb, sock := daemonHost(t)
	d, err := verbs.Open(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	const n = 150 // more than two pages of ListResPage
	for i := range n {
		if _, err := pd.CreateAH(verbs.AHAttr{DGID: hb.GID(), SGIDIndex: ha.GIDIndex(), HopLimit: uint8(i + 1), Port: 1}); err != nil {
			t.Fatal(err)
		}
	}
	var doc resDoc
	runJSON(t, &doc, "res", "ah", "--json", "--socket", sock)
	seen := map[string]bool{}
	for _, e := range doc["ah"] {
		seen[fmt.Sprint(e["hop_limit"])] = true
	}
	if len(doc["ah"]) != n || len(seen) != n {
		t.Errorf("%d AHs listed, %d different; want %d", len(doc["ah"]), len(seen), n)
	}
}
