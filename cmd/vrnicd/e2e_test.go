package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"github.com/vrnic/vrnicd/header"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link/linktest"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// End-to-end: two vrnicd processes, each in raw mode on one end of a veth
// pair in its own network namespace (A: 192.0.2.1 and 2001:db8::1, B:
// 192.0.2.2 and 2001:db8::2), and verbs clients in this process reaching
// them through their sockets. Every transfer's contents are checked.

const (
	e2eA4, e2eA6 = "192.0.2.1", "2001:db8::1"
	e2eB4, e2eB6 = "192.0.2.2", "2001:db8::2"
)

type e2eNet struct {
	a, b         *daemonProc
	sockA, sockB string
	vrnicctl     string
	nsA          *linktest.NS
	argsA        []string // A's command line, to start it again
}

// newE2ENet starts the two daemons; extraA are more flags for A.
func newE2ENet(t *testing.T, extraA ...string) *e2eNet {
	t.Helper()
	linktest.RequireRoot(t)
	_, ctl := binaries(t)
	nsA, nsB := linktest.NewNS(t, "vea"), linktest.NewNS(t, "veb")
	va, vb := linktest.UniqueName("ea"), linktest.UniqueName("eb")
	linktest.VethPair(t, nsA, va, nsB, vb)
	for _, x := range []struct {
		ns     *linktest.NS
		dev    string
		v4, v6 string
	}{{nsA, va, e2eA4, e2eA6}, {nsB, vb, e2eB4, e2eB6}} {
		x.ns.Exec(t, "ip", "addr", "add", x.v4+"/24", "dev", x.dev)
		x.ns.Exec(t, "ip", "addr", "add", x.v6+"/64", "dev", x.dev, "nodad")
	}
	dir := t.TempDir()
	n := &e2eNet{sockA: filepath.Join(dir, "a.sock"), sockB: filepath.Join(dir, "b.sock"), vrnicctl: ctl, nsA: nsA}
	n.argsA = append([]string{"--iface", va, "--socket", n.sockA, "--name", "vrnicA"}, extraA...)
	n.a = startDaemon(t, nsA, nil, n.argsA...)
	n.b = startDaemon(t, nsB, nil, "--iface", vb, "--socket", n.sockB, "--name", "vrnicB")
	return n
}

// ctl runs vrnicctl and returns its stdout.
func (n *e2eNet) ctl(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(n.vrnicctl, args...)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0") // the race runtime's exit pause is not ours
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("vrnicctl %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return string(out)
}

// e2eQPs is `vrnicctl qp --json`.
func (n *e2eNet) e2eQPs(t *testing.T, sock string) []jsonQPLine {
	t.Helper()
	var doc struct {
		QPs []jsonQPLine `json:"qps"`
	}
	out := n.ctl(t, "qp", "--json", "--socket", sock)
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("vrnicctl qp --json: %q: %v", out, err)
	}
	return doc.QPs
}

// e2eStat is `vrnicctl stat --json`.
func (n *e2eNet) e2eStat(t *testing.T, sock string) (map[string]uint64, []map[string]uint64) {
	t.Helper()
	var doc struct {
		Device map[string]uint64   `json:"device"`
		QPs    []map[string]uint64 `json:"qps"`
	}
	out := n.ctl(t, "stat", "--json", "--socket", sock)
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("vrnicctl stat --json: %q: %v", out, err)
	}
	return doc.Device, doc.QPs
}

// jsonQPLine is one QP of `vrnicctl qp --json`.
type jsonQPLine struct {
	QPN         uint32 `json:"qpn"`
	Type        string `json:"type"`
	State       string `json:"state"`
	DestQPN     uint32 `json:"dest_qpn"`
	SendPSN     uint32 `json:"send_psn"`
	CompPSN     uint32 `json:"comp_psn"`
	RecvPSN     uint32 `json:"recv_psn"`
	Outstanding int    `json:"outstanding"`
	PID         int    `json:"pid"`
	Comm        string `json:"comm"`
	Peer        string `json:"peer"`
	Window      int    `json:"window"`
	SRTTUS      int64  `json:"srtt_us"`
}

// e2eClient is one verbs client of a daemon.
type e2eClient struct {
	t            *testing.T
	d            *verbs.Device
	pd           *verbs.PD
	gidx4, gidx6 uint8
	gid4, gid6   verbs.GID
}

func e2eOpen(t *testing.T, sock, v4, v6 string) *e2eClient {
	t.Helper()
	d, err := verbs.Open(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	c := &e2eClient{t: t, d: d, gid4: verbs.GIDFromAddr(netip.MustParseAddr(v4)), gid6: verbs.GIDFromAddr(netip.MustParseAddr(v6))}
	// The daemon learns the addresses from the kernel; wait for both.
	found := func() bool {
		n := 0
		for i := range 16 {
			g, err := d.QueryGID(1, i)
			if err != nil {
				t.Fatal(err)
			}
			switch g {
			case c.gid4:
				c.gidx4, n = uint8(i), n+1
			case c.gid6:
				c.gidx6, n = uint8(i), n+1
			}
		}
		return n == 2
	}
	if !waitUntil(5*time.Second, found) {
		t.Fatalf("%s: no GIDs for %s and %s", d.Name(), v4, v6)
	}
	if c.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	return c
}

// e2eEnd is one QP with its CQs and a registered buffer.
type e2eEnd struct {
	c        *e2eClient
	qp       *verbs.QP
	scq, rcq *verbs.CQ
	buf      *verbs.Buffer
	mr       *verbs.MR
}

func (c *e2eClient) end(typ verbs.QPType, srq *verbs.SRQ, size int) *e2eEnd {
	t := c.t
	t.Helper()
	e := &e2eEnd{c: c}
	var err error
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	e.scq, err = c.d.CreateCQ(256, false)
	must(err)
	e.rcq, err = c.d.CreateCQ(256, false)
	must(err)
	e.buf, err = c.pd.AllocBuffer(size)
	must(err)
	e.mr, err = c.pd.RegMR(e.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	must(err)
	e.qp, err = c.pd.CreateQP(verbs.QPInitAttr{Type: typ, SendCQ: e.scq, RecvCQ: e.rcq, SRQ: srq,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}})
	must(err)
	return e
}

// e2eLink is how a QP reaches its peer.
type e2eLink struct {
	v6             bool
	timeout, retry uint8 // RC: local ACK timeout and retry count (0: 14 and 7)
}

func (e *e2eEnd) sgid(l e2eLink) (uint8, verbs.GID) {
	if l.v6 {
		return e.c.gidx6, e.c.gid6
	}
	return e.c.gidx4, e.c.gid4
}

// e2eConnect brings two RC or UC QPs to RTS against each other (both to
// RTR first, as rc_pingpong does), SQ PSN 100 and RQ PSN 100 on both.
func e2eConnect(t *testing.T, a, b *e2eEnd, l e2eLink) {
	t.Helper()
	e2eConnectTo(t, a, b.qp.QPN(), b.sgidOf(l), l)
	e2eConnectTo(t, b, a.qp.QPN(), a.sgidOf(l), l)
	e2eToRTS(t, a, l)
	e2eToRTS(t, b, l)
}

func (e *e2eEnd) sgidOf(l e2eLink) verbs.GID { _, g := e.sgid(l); return g }

// e2eConnectTo moves e to RTR against QP qpn at dgid.
func e2eConnectTo(t *testing.T, e *e2eEnd, qpn uint32, dgid verbs.GID, l e2eLink) {
	t.Helper()
	rc := e.qp.Type() == verbs.QPTypeRC
	acc := verbs.AccessRemoteWrite
	if rc {
		acc |= verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	}
	if err := e.qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1, AccessFlags: acc},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	gidx, _ := e.sgid(l)
	mask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
	if rc {
		mask |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
	}
	if err := e.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: qpn, RQPSN: 100,
		MaxDestRdAtomic: 4, MinRNRTimer: 1, AV: verbs.AHAttr{DGID: dgid, SGIDIndex: gidx, HopLimit: 64, Port: 1}}, mask); err != nil {
		t.Fatalf("to RTR: %v", err)
	}
}

func e2eToRTS(t *testing.T, e *e2eEnd, l e2eLink) {
	t.Helper()
	timeout, retry := l.timeout, l.retry
	if timeout == 0 {
		timeout, retry = 14, 7
	}
	mask := verbs.QPAttrState | verbs.QPAttrSQPSN
	if e.qp.Type() == verbs.QPTypeRC {
		mask |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
	}
	if err := e.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 100, Timeout: timeout, RetryCnt: retry, RNRRetry: 7,
		MaxRdAtomic: 4}, mask); err != nil {
		t.Fatalf("to RTS: %v", err)
	}
}

func e2eUDReady(t *testing.T, e *e2eEnd, qkey uint32) {
	t.Helper()
	for _, st := range []struct {
		a verbs.QPAttr
		m verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.QPStateInit, Port: 1, QKey: qkey}, verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey},
		{verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState},
		{verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 1}, verbs.QPAttrState | verbs.QPAttrSQPSN},
	} {
		if err := e.qp.Modify(&st.a, st.m); err != nil {
			t.Fatalf("UD to %v: %v", st.a.State, err)
		}
	}
}

// fill writes a pattern that differs for every seed and offset.
func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*131+i>>8) ^ seed
	}
}

// ok waits for one successful completion of the expected opcode and WR.
func ok(t *testing.T, cq *verbs.CQ, id uint64, op verbs.WCOpcode) verbs.WC {
	t.Helper()
	wc := poll1(t, cq)
	if wc.Status != verbs.WCSuccess || wc.WRID != id || wc.Opcode != op {
		t.Fatalf("completion %+v, want WR %d %v successful", wc, id, op)
	}
	return wc
}

func TestE2E(t *testing.T) {
	n := newE2ENet(t)
	t.Run("RC", func(t *testing.T) { e2eRC(t, n, e2eLink{}) })
	t.Run("RCv6", func(t *testing.T) { e2eRC(t, n, e2eLink{v6: true}) })
	t.Run("UC", func(t *testing.T) { e2eUC(t, n) })
	t.Run("UD", func(t *testing.T) { e2eUD(t, n) })
	t.Run("SRQ", func(t *testing.T) { e2eSRQ(t, n) })
	t.Run("vrnicctl", func(t *testing.T) { e2eCtl(t, n) })
	t.Run("KilledClient", func(t *testing.T) { e2eKilledClient(t, n) })
	t.Run("TruncatedMemfd", func(t *testing.T) { e2eTruncate(t, n) })
}

// RC: SEND (several packets), RDMA WRITE, RDMA READ, compare-and-swap (a
// match and a miss) and fetch-and-add, between the two daemons.
func e2eRC(t *testing.T, n *e2eNet, l e2eLink) {
	a := e2eOpen(t, n.sockA, e2eA4, e2eA6).end(verbs.QPTypeRC, nil, 1<<20)
	b := e2eOpen(t, n.sockB, e2eB4, e2eB6).end(verbs.QPTypeRC, nil, 1<<20)
	e2eConnect(t, a, b, l)
	src, dst := a.buf.Bytes(), b.buf.Bytes()
	fill(src, 1)

	if err := b.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{b.mr.SGE(0, 8192)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(verbs.SendWR{ID: 10, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 3000), a.mr.SGE(10000, 2500)}}); err != nil {
		t.Fatal(err)
	}
	if wc := ok(t, b.rcq, 1, verbs.WCRecv); wc.ByteLen != 5500 || wc.QPN != b.qp.QPN() {
		t.Fatalf("receive %+v", wc)
	}
	ok(t, a.scq, 10, verbs.WCSend)
	if !bytes.Equal(dst[:3000], src[:3000]) || !bytes.Equal(dst[3000:5500], src[10000:12500]) {
		t.Fatal("SEND data differs")
	}

	// WRITE 200 KiB into B, READ 100 KiB of it back elsewhere.
	if err := a.qp.PostSend(
		verbs.SendWR{ID: 11, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(100000, 200<<10)},
			RemoteAddr: b.mr.Addr() + 300000, RKey: b.mr.RKey()},
		verbs.SendWR{ID: 12, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(600000, 100<<10)},
			RemoteAddr: b.mr.Addr() + 350000, RKey: b.mr.RKey()},
	); err != nil {
		t.Fatal(err)
	}
	ok(t, a.scq, 11, verbs.WCRDMAWrite)
	if wc := ok(t, a.scq, 12, verbs.WCRDMARead); wc.ByteLen != 100<<10 {
		t.Fatalf("READ %+v", wc)
	}
	if !bytes.Equal(dst[300000:300000+200<<10], src[100000:100000+200<<10]) {
		t.Fatal("WRITE data differs")
	}
	if !bytes.Equal(src[600000:600000+100<<10], src[150000:150000+100<<10]) {
		t.Fatal("READ data differs")
	}

	// Atomics on a word of B's memory (host byte order, as rxe).
	word := dst[900000:900008]
	binary.NativeEndian.PutUint64(word, 5)
	ret := src[900000:900024]
	if err := a.qp.PostSend(
		verbs.SendWR{ID: 13, Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(900000, 8)},
			RemoteAddr: b.mr.Addr() + 900000, RKey: b.mr.RKey(), CompareAdd: 1 << 40},
		verbs.SendWR{ID: 14, Opcode: verbs.WRAtomicCmpAndSwp, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(900008, 8)},
			RemoteAddr: b.mr.Addr() + 900000, RKey: b.mr.RKey(), CompareAdd: 1<<40 + 5, Swap: 0xdeadbeefcafe},
		verbs.SendWR{ID: 15, Opcode: verbs.WRAtomicCmpAndSwp, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(900016, 8)},
			RemoteAddr: b.mr.Addr() + 900000, RKey: b.mr.RKey(), CompareAdd: 1, Swap: 2},
	); err != nil {
		t.Fatal(err)
	}
	ok(t, a.scq, 13, verbs.WCFetchAdd)
	ok(t, a.scq, 14, verbs.WCCompSwap)
	ok(t, a.scq, 15, verbs.WCCompSwap)
	le := binary.NativeEndian
	if got := [4]uint64{le.Uint64(ret), le.Uint64(ret[8:]), le.Uint64(ret[16:]), le.Uint64(word)}; got !=
		[4]uint64{5, 1<<40 + 5, 0xdeadbeefcafe, 0xdeadbeefcafe} {
		t.Fatalf("atomics: fetched %#x, %#x (swap), %#x (miss); word %#x", got[0], got[1], got[2], got[3])
	}
}

// UC: a SEND and an RDMA WRITE (no ACKs: the completions are local).
func e2eUC(t *testing.T, n *e2eNet) {
	a := e2eOpen(t, n.sockA, e2eA4, e2eA6).end(verbs.QPTypeUC, nil, 256<<10)
	b := e2eOpen(t, n.sockB, e2eB4, e2eB6).end(verbs.QPTypeUC, nil, 256<<10)
	e2eConnect(t, a, b, e2eLink{})
	src, dst := a.buf.Bytes(), b.buf.Bytes()
	fill(src, 2)
	// UC has no RNR NAK: a SEND that finds no receive is dropped, so both
	// receives are there first.
	if err := b.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{b.mr.SGE(0, 4096)}},
		verbs.RecvWR{ID: 2, SGL: []verbs.SGE{b.mr.SGE(4096, 4096)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(
		verbs.SendWR{ID: 20, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 2100)}},
		verbs.SendWR{ID: 21, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(8192, 40000)},
			RemoteAddr: b.mr.Addr() + 65536, RKey: b.mr.RKey()},
		// The WRITE's last packet is seen once this SEND arrives after it.
		verbs.SendWR{ID: 22, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(4096, 10)}},
	); err != nil {
		t.Fatal(err)
	}
	for id := uint64(20); id <= 22; id++ {
		ok(t, a.scq, id, map[uint64]verbs.WCOpcode{20: verbs.WCSend, 21: verbs.WCRDMAWrite, 22: verbs.WCSend}[id])
	}
	if wc := ok(t, b.rcq, 1, verbs.WCRecv); wc.ByteLen != 2100 {
		t.Fatalf("UC receive %+v", wc)
	}
	if !bytes.Equal(dst[:2100], src[:2100]) {
		t.Fatal("UC SEND data differs")
	}
	if wc := ok(t, b.rcq, 2, verbs.WCRecv); wc.ByteLen != 10 {
		t.Fatalf("UC receive %+v", wc)
	}
	if !bytes.Equal(dst[65536:65536+40000], src[8192:8192+40000]) {
		t.Fatal("UC WRITE data differs")
	}
}

// UD: a SEND over IPv4 and one over IPv6; the receive buffer starts with
// the 40-byte GRH: the IPv4 header in its last 20 bytes, or the IPv6
// header, as B received it.
func e2eUD(t *testing.T, n *e2eNet) {
	ca, cb := e2eOpen(t, n.sockA, e2eA4, e2eA6), e2eOpen(t, n.sockB, e2eB4, e2eB6)
	a, b := ca.end(verbs.QPTypeUD, nil, 64<<10), cb.end(verbs.QPTypeUD, nil, 64<<10)
	e2eUDReady(t, a, 0x1111)
	e2eUDReady(t, b, 0x2222)
	src, dst := a.buf.Bytes(), b.buf.Bytes()
	fill(src, 3)
	for i, v6 := range []bool{false, true} {
		l := e2eLink{v6: v6}
		gidx, _ := a.sgid(l)
		ah, err := ca.pd.CreateAH(verbs.AHAttr{DGID: b.sgidOf(l), SGIDIndex: gidx, HopLimit: 33, Port: 1})
		if err != nil {
			t.Fatal(err)
		}
		const size = 1000
		off := uint64(i * 8192)
		if err := b.qp.PostRecv(verbs.RecvWR{ID: uint64(30 + i), SGL: []verbs.SGE{b.mr.SGE(off, 40+size)}}); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSend(verbs.SendWR{ID: uint64(40 + i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, AH: ah,
			RemoteQPN: b.qp.QPN(), RemoteQKey: 0x2222, SGL: []verbs.SGE{a.mr.SGE(off, size)}}); err != nil {
			t.Fatal(err)
		}
		ok(t, a.scq, uint64(40+i), verbs.WCSend)
		wc := ok(t, b.rcq, uint64(30+i), verbs.WCRecv)
		if wc.ByteLen != 40+size || wc.SrcQP != a.qp.QPN() || wc.Flags&verbs.WCWithGRH == 0 {
			t.Fatalf("UD receive %+v", wc)
		}
		if !bytes.Equal(dst[off+40:off+40+size], src[off:off+size]) {
			t.Fatalf("UD payload differs (v6 %v)", v6)
		}
		grh := dst[off : off+40]
		udpLen := 8 + 12 + 8 + size + 4 // UDP, BTH, DETH, payload, ICRC
		if !v6 {
			ip := grh[20:]
			if ip[0] != 0x45 || int(binary.BigEndian.Uint16(ip[2:])) != 20+udpLen || ip[8] != 33 || ip[9] != 17 ||
				netip.AddrFrom4([4]byte(ip[12:16])).String() != e2eA4 || netip.AddrFrom4([4]byte(ip[16:20])).String() != e2eB4 ||
				!header.IPv4(ip).ChecksumValid() {
				t.Fatalf("IPv4 GRH % x", grh)
			}
		} else if grh[0]>>4 != 6 || int(binary.BigEndian.Uint16(grh[4:])) != udpLen || grh[6] != 17 || grh[7] != 33 ||
			netip.AddrFrom16([16]byte(grh[8:24])).String() != e2eA6 || netip.AddrFrom16([16]byte(grh[24:40])).String() != e2eB6 {
			t.Fatalf("IPv6 GRH % x", grh)
		}
	}
}

// SRQ: two QPs of B take their receives from one SRQ; two QPs of A send
// to them, two messages each. Every receive holds one message whole, and
// its completion names the QP the message came in on.
func e2eSRQ(t *testing.T, n *e2eNet) {
	ca, cb := e2eOpen(t, n.sockA, e2eA4, e2eA6), e2eOpen(t, n.sockB, e2eB4, e2eB6)
	srq, err := cb.pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: 16, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	var as, bs []*e2eEnd
	for range 2 {
		a, b := ca.end(verbs.QPTypeRC, nil, 64<<10), cb.end(verbs.QPTypeRC, srq, 64<<10)
		e2eConnect(t, a, b, e2eLink{})
		as, bs = append(as, a), append(bs, b)
	}
	if err := bs[0].qp.PostRecv(verbs.RecvWR{ID: 1}); err == nil {
		t.Fatal("PostRecv on a QP with an SRQ succeeded")
	}
	// The receives: four slots of B's first QP's buffer.
	rbuf := bs[0]
	for i := range 4 {
		if err := srq.PostRecv(verbs.RecvWR{ID: uint64(100 + i), SGL: []verbs.SGE{rbuf.mr.SGE(uint64(i*4096), 4096)}}); err != nil {
			t.Fatal(err)
		}
	}
	msgs := map[string]uint32{} // message → B's QPN it goes to
	for q, a := range as {
		for m := range 2 {
			msg := fmt.Sprintf("message %d on QP %d, ", m, q) + strings.Repeat(string(rune('a'+q*2+m)), 1500+q*100+m)
			off := uint64(m * 8192)
			copy(a.buf.Bytes()[off:], msg)
			msgs[msg] = bs[q].qp.QPN()
			if err := a.qp.PostSend(verbs.SendWR{ID: uint64(m), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{a.mr.SGE(off, uint64(len(msg)))}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := map[uint64]bool{}
	for range 4 {
		var wc verbs.WC
		// The completions go to each QP's own receive CQ.
		if !waitUntil(10*time.Second, func() bool {
			w := make([]verbs.WC, 1)
			for _, b := range bs {
				if b.rcq.Poll(w) == 1 {
					wc = w[0]
					return true
				}
			}
			return false
		}) {
			t.Fatalf("only %d SRQ receives completed", len(got))
		}
		slot := wc.WRID - 100
		if wc.Status != verbs.WCSuccess || slot >= 4 || got[wc.WRID] {
			t.Fatalf("SRQ completion %+v", wc)
		}
		got[wc.WRID] = true
		msg := string(rbuf.buf.Bytes()[slot*4096 : slot*4096+uint64(wc.ByteLen)])
		if qpn, ok := msgs[msg]; !ok || qpn != wc.QPN {
			t.Fatalf("receive %d (QP %#x) holds %.30q..., not a message sent to that QP", wc.WRID, wc.QPN, msg)
		}
		delete(msgs, msg)
	}
	for _, a := range as {
		ok(t, a.scq, 0, verbs.WCSend)
		ok(t, a.scq, 1, verbs.WCSend)
	}
}

// vrnicctl against the real daemon: devinfo names the device, its GUID
// from the interface's MAC, the GIDs of its addresses, its interface and
// raw mode; qp and res qp list a client's QPs with its pid, peer and
// PSNs; stat counts the packets.
func e2eCtl(t *testing.T, n *e2eNet) {
	out := n.ctl(t, "devinfo", "--socket", n.sockA)
	mac := interfaceMACString(n.a.ready)
	hw, err := net.ParseMAC(mac)
	if err != nil {
		t.Fatal(err)
	}
	guid := fmt.Sprintf("%02x%02x:%02xff:fe%02x:%02x%02x", hw[0]^2, hw[1], hw[2], hw[3], hw[4], hw[5])
	for _, want := range []string{"hca_id:\tvrnicA\n", "\tnode_guid:\t\t\t" + guid + "\n", "\tsys_image_guid:\t\t\t" + guid + "\n",
		"\tatomic_cap:\t\t\tATOMIC_HCA (1)\n", "\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n", "\t\t\tactive_mtu:\t\t1024 (3)\n",
		"\t\t\tlink_layer:\t\tEthernet\n", "\t\t\tGID[  1]:\t\t::ffff:192.0.2.1, RoCE v2\n", "]:\t\t2001:db8::1, RoCE v2\n",
		"\tnetdev:\t\t\t\t" + n.argsA[1] + "\n", "\tmode:\t\t\t\traw\n", "\tdaemon_version:\t\t\t"} {
		if !strings.Contains(out, want) {
			t.Errorf("devinfo lacks %q:\n%s", want, out)
		}
	}

	a := e2eOpen(t, n.sockA, e2eA4, e2eA6).end(verbs.QPTypeRC, nil, 64<<10)
	b := e2eOpen(t, n.sockB, e2eB4, e2eB6).end(verbs.QPTypeRC, nil, 64<<10)
	e2eConnect(t, a, b, e2eLink{})
	if err := a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 5000)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	ok(t, a.scq, 1, verbs.WCRDMAWrite)
	var mine jsonQPLine
	if !waitUntil(5*time.Second, func() bool {
		for _, q := range n.e2eQPs(t, n.sockA) {
			if q.QPN == a.qp.QPN() {
				mine = q
			}
		}
		return mine.CompPSN == 105
	}) {
		t.Fatalf("vrnicctl qp: %+v, want comp_psn 105 after 5 packets from 100", mine)
	}
	// The owner by pid and name, the peer by address, the send window
	// (128 PSNs on a clean link) and the round trip the WRITE measured.
	self, _ := os.ReadFile("/proc/self/comm")
	if mine.SRTTUS <= 0 {
		t.Errorf("vrnicctl qp: srtt_us %d after a WRITE", mine.SRTTUS)
	}
	mine.SRTTUS = 0
	if out := n.ctl(t, "res", "qp", "--json", "--socket", n.sockA); !strings.Contains(out, fmt.Sprintf(`"qpn":%d,"type":"RC","state":"RTS"`, a.qp.QPN())) {
		t.Errorf("vrnicctl res qp lacks QP %#x in RTS: %s", a.qp.QPN(), out)
	}
	if want := (jsonQPLine{QPN: a.qp.QPN(), Type: "RC", State: "RTS", DestQPN: b.qp.QPN(), SendPSN: 105, CompPSN: 105,
		RecvPSN: 100, PID: os.Getpid(), Comm: strings.TrimSpace(string(self)), Peer: e2eB4, Window: 128}); mine != want {
		t.Errorf("vrnicctl qp: %+v, want %+v", mine, want)
	}
	dev, qps := n.e2eStat(t, n.sockB)
	var qb map[string]uint64
	for _, q := range qps {
		if uint32(q["qpn"]) == b.qp.QPN() {
			qb = q
		}
	}
	if qb == nil || qb["rcvd_pkts"] != 5 || dev["rcvd_pkts"] < 5 || dev["roce_in"] < 5 || dev["icrc_errors"] != 0 {
		t.Errorf("vrnicctl stat on B: QP %v, device %v", qb, dev)
	}
}
