package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link/linktest"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// The link's life (issue 28): two raw-mode daemons on the ends of a veth
// pair, A in one namespace, B in another; the link goes down and up, loses
// carrier, changes MTU and is deleted under them.

type linkPair struct {
	nsA, nsB *linktest.NS
	va, vb   string
	a, b     *daemonProc
	sockA    string
	sockB    string
}

var (
	addrA = netip.MustParseAddr("198.51.100.1")
	addrB = netip.MustParseAddr("198.51.100.2")
)

// newLinkPair starts both daemons; before runs in A's namespace first (to
// start on an interface that is down, say).
func newLinkPair(t *testing.T, before func(p *linkPair)) *linkPair {
	t.Helper()
	linktest.RequireRoot(t)
	binaries(t)
	p := &linkPair{nsA: linktest.NewNS(t, "vla"), nsB: linktest.NewNS(t, "vlb"),
		va: linktest.UniqueName("la"), vb: linktest.UniqueName("lb")}
	linktest.VethPair(t, p.nsA, p.va, p.nsB, p.vb)
	p.nsA.Exec(t, "ip", "addr", "add", addrA.String()+"/24", "dev", p.va)
	p.nsB.Exec(t, "ip", "addr", "add", addrB.String()+"/24", "dev", p.vb)
	if before != nil {
		before(p)
	}
	dir := t.TempDir()
	p.sockA, p.sockB = filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")
	p.a = startDaemon(t, p.nsA, nil, "--iface", p.va, "--socket", p.sockA, "--name", "vrnicA")
	p.b = startDaemon(t, p.nsB, nil, "--iface", p.vb, "--socket", p.sockB, "--name", "vrnicB")
	t.Cleanup(func() {
		if t.Failed() {
			for _, d := range []*daemonProc{p.a, p.b} {
				ns, dev := d.counters()
				t.Logf("%s: netstack %v device %v", recordString(d.ready, "device"), ns, dev)
			}
			t.Logf("A's neighbours: %s", p.nsA.Exec(t, "ip", "neigh", "show", "dev", p.va))
		}
	})
	return p
}

func (p *linkPair) connect(t *testing.T, path rcPath) (ca, cb *rcSide) {
	t.Helper()
	ca, cb = openSide(t, p.sockA, "vrnicA", addrA), openSide(t, p.sockB, "vrnicB", addrB)
	connectRCWith(t, ca, cb, path)
	return ca, cb
}

// portState is ibv_query_port's state and physical state.
func portState(t *testing.T, s *rcSide) (state, phys uint8) {
	t.Helper()
	pa, err := s.d.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	return uint8(pa.State), uint8(pa.PhysState)
}

func waitPort(t *testing.T, s *rcSide, state, phys uint8) {
	t.Helper()
	var st, ph uint8
	if !waitUntil(5*time.Second, func() bool { st, ph = portState(t, s); return st == state && ph == phys }) {
		t.Fatalf("port state %d phys %d, want %d %d", st, ph, state, phys)
	}
}

// nextEvent waits for the client's next async event, which must be want.
func nextEvent(t *testing.T, s *rcSide, want verbs.EventType) {
	t.Helper()
	select {
	case ev := <-s.d.Events():
		if ev.Type != want {
			t.Fatalf("async event %v, want %v", ev.Type, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no %v event within 5 s", want)
	}
}

// sendStream posts n SENDs of size bytes from a to b (message i carries i
// in its first 4 bytes), at most depth outstanding, calling mid once half
// are posted; it returns the send completions' statuses in order and
// checks every receive that completed carries its message in order.
func sendStream(t *testing.T, a, b *rcSide, n, size int, mid func()) []verbs.WCStatus {
	t.Helper()
	return stream(t, a, b, n, size, false, mid)
}

// stream is sendStream, or with write set the same messages as RDMA
// WRITEs with immediate (the immediate: the message's number) into b's
// buffer, where each is checked once its receive completes.
func stream(t *testing.T, a, b *rcSide, n, size int, write bool, mid func()) []verbs.WCStatus {
	t.Helper()
	const depth = 8
	src, dst := a.buf.Bytes(), b.buf.Bytes()
	slot := func(i int) uint64 { return uint64(i%depth) * uint64(size) }
	recvWR := func(i int) verbs.RecvWR {
		if write {
			return verbs.RecvWR{ID: uint64(i)} // the data goes where the WRITE puts it
		}
		return verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{b.mr.SGE(slot(i)+512<<10, uint64(size))}}
	}
	for i := range depth {
		if err := b.qp.PostRecv(recvWR(i)); err != nil {
			t.Fatal(err)
		}
	}
	message := func(i int) []byte {
		m := make([]byte, size)
		for j := range m {
			m[j] = byte(i + j)
		}
		binary.LittleEndian.PutUint32(m, uint32(i))
		return m
	}
	var statuses []verbs.WCStatus
	posted, received := 0, 0
	wc := make([]verbs.WC, 16)
	end := time.Now().Add(60 * time.Second)
	for (len(statuses) < n || received < n) && time.Now().Before(end) {
		for posted < n && posted-len(statuses) < depth && posted-received < depth {
			off := slot(posted)
			copy(src[off:], message(posted))
			wr := verbs.SendWR{ID: uint64(posted), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{a.mr.SGE(off, uint64(size))}}
			if write {
				wr.Opcode, wr.ImmData = verbs.WRRDMAWriteWithImm, uint32(posted)
				wr.RemoteAddr, wr.RKey = b.mr.Addr()+off+512<<10, b.mr.RKey()
			}
			if err := a.qp.PostSend(wr); err != nil {
				t.Fatal(err)
			}
			posted++
			if posted == n/2 && mid != nil {
				mid()
				mid = nil
			}
		}
		for _, w := range wc[:a.scq.Poll(wc)] {
			statuses = append(statuses, w.Status)
		}
		k := b.rcq.Poll(wc)
		for _, w := range wc[:k] {
			if w.Status != verbs.WCSuccess {
				return statuses // flushed: the sender's error says why
			}
			if write && (w.Opcode != verbs.WCRecvRDMAWithImm || w.ImmData != uint32(received)) {
				t.Fatalf("receive %d: %v with immediate %d", received, w.Opcode, w.ImmData)
			}
			off := slot(received) + 512<<10
			if got := binary.LittleEndian.Uint32(dst[off:]); w.ByteLen != uint32(size) || got != uint32(received) {
				t.Fatalf("receive %d: %d bytes carrying message %d", received, w.ByteLen, got)
			}
			if !bytes.Equal(dst[off:off+uint64(size)], message(received)) {
				t.Fatalf("message %d's bytes differ", received)
			}
			if err := b.qp.PostRecv(recvWR(received)); err != nil {
				t.Fatal(err)
			}
			received++
		}
		if len(statuses) > 0 && statuses[len(statuses)-1] != verbs.WCSuccess {
			return statuses
		}
		if k == 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
	if len(statuses) < n {
		t.Fatalf("%d of %d sends completed, %d received", len(statuses), n, received)
	}
	return statuses
}

// An outage shorter than the retry budget: a stream of SENDs, then one of
// RDMA WRITEs with immediate, each with the link down for 0.6 s in its
// middle, finishes with every message in order and every byte intact; A's
// port went DOWN and ACTIVE again, its client heard PORT_ERR then
// PORT_ACTIVE, its requester retransmitted, what it sent meanwhile was
// dropped and counted (tx_link_down), and the daemon lived through it.
func TestLinkDownUp(t *testing.T) {
	p := newLinkPair(t, nil)
	// 4.096 µs × 2^17 ≈ 0.54 s per try, 7 retries: about 4 s of budget.
	ca, cb := p.connect(t, rcPath{mtu: verbs.MTU1024, timeout: 17, retry: 7})
	for _, write := range []bool{false, true} {
		from := p.a.log.Len()
		ns0, dev0 := p.a.counters()
		// The outage runs while the stream does: messages are in flight.
		outage := make(chan error, 1)
		var sawDown bool
		statuses := stream(t, ca, cb, 2000, 3000, write, func() {
			go func() {
				_, err := p.nsA.TryExec("ip", "link", "set", p.va, "down")
				if err == nil {
					time.Sleep(100 * time.Millisecond)
					pa, qerr := ca.d.QueryPort(1)
					sawDown = qerr == nil && pa.State == 1 && pa.PhysState == 3 // DOWN, DISABLED
					time.Sleep(500 * time.Millisecond)
					_, err = p.nsA.TryExec("ip", "link", "set", p.va, "up")
				}
				outage <- err
			}()
		})
		if err := <-outage; err != nil {
			t.Fatal(err)
		}
		if !sawDown {
			t.Errorf("write %v: the port was not DOWN/DISABLED during the outage", write)
		}
		for i, s := range statuses {
			if s != verbs.WCSuccess {
				t.Fatalf("write %v: message %d: %v", write, i, s)
			}
		}
		waitPort(t, ca, 4, 5)
		nextEvent(t, ca, verbs.EventPortErr)
		nextEvent(t, ca, verbs.EventPortActive)
		p.a.log.waitRecord(t, from, "port DOWN: the interface is admin down; QPs wait for it (RC retransmits on its timer and retry count)", time.Second)
		p.a.log.waitRecord(t, from, "port ACTIVE: the interface is up", time.Second)
		ns, dev := p.a.counters()
		rto, again, dropped := dev["retransmit_timeouts"]-dev0["retransmit_timeouts"],
			dev["retransmitted_pkts"]-dev0["retransmitted_pkts"], ns["tx_link_down"]-ns0["tx_link_down"]
		if rto == 0 || again == 0 || dropped == 0 {
			t.Errorf("write %v: the outage left no trace: retransmit_timeouts +%v, retransmitted_pkts +%v, tx_link_down +%v",
				write, rto, again, dropped)
		}
		t.Logf("write %v: A's retransmit_timeouts +%v, retransmitted_pkts +%v, tx_link_down +%v", write, rto, again, dropped)
	}
	if code, exited := p.a.wait(0); exited {
		t.Fatalf("daemon A exited (%d)", code)
	}
}

// An outage longer than the retry budget ends the requester in
// RETRY_EXC_ERR, no sooner than its timer and retry count give; the daemon
// keeps serving (a new client queries the DOWN port), and once the link is
// up a new connection works.
func TestLinkDownPastRetries(t *testing.T) {
	p := newLinkPair(t, nil)
	// 4.096 µs × 2^15 ≈ 134 ms per try, 2 retries: 3 tries ≈ 0.4 s.
	ca, _ := p.connect(t, rcPath{mtu: verbs.MTU1024, timeout: 15, retry: 2})
	p.nsA.Exec(t, "ip", "link", "set", p.va, "down")
	waitPort(t, ca, 1, 3)
	start := time.Now()
	if err := ca.qp.PostSend(verbs.SendWR{ID: 7, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{ca.mr.SGE(0, 100)}}); err != nil {
		t.Fatal(err)
	}
	wc := poll1(t, ca.scq)
	took := time.Since(start)
	if wc.Status != verbs.WCRetryExcErr {
		t.Fatalf("send during the outage: %v, want RETRY_EXC_ERR", wc.Status)
	}
	if budget := 3 * 134 * time.Millisecond; took < budget {
		t.Fatalf("RETRY_EXC_ERR after %v, sooner than 3 tries of 134 ms", took)
	}
	// The daemon serves while down.
	fresh := openSide(t, p.sockA, "vrnicA", addrA)
	if st, ph := portState(t, fresh); st != 1 || ph != 3 {
		t.Fatalf("a new client sees port %d/%d while the link is down", st, ph)
	}
	p.nsA.Exec(t, "ip", "link", "set", p.va, "up")
	waitPort(t, fresh, 4, 5)
	cb2 := openSide(t, p.sockB, "vrnicB", addrB)
	// Timeout 17 (0.5 s, 4 s with 7 retries): the kernel flushed B's
	// neighbour entry when the link went down, and an ARP probe lost while
	// the link came back is sent again only after retrans_time (1 s); 14
	// (67 ms, 0.5 s in all) ended in RETRY_EXC_ERR on a loaded machine.
	connectRCWith(t, fresh, cb2, rcPath{mtu: verbs.MTU1024, timeout: 17, retry: 7})
	pairRCTraffic(t, fresh, cb2)
}

// Started on an interface that is administratively down, the daemon runs,
// its port DOWN; brought up, the port goes ACTIVE and traffic flows.
func TestLinkStartsDown(t *testing.T) {
	p := newLinkPair(t, func(p *linkPair) { p.nsA.Exec(t, "ip", "link", "set", p.va, "down") })
	p.a.log.waitRecord(t, 0, "port DOWN: the interface is admin down; RoCE traffic flows once it is up", time.Second)
	time.Sleep(300 * time.Millisecond)
	if code, exited := p.a.wait(0); exited {
		t.Fatalf("daemon exited (%d) on a down interface", code)
	}
	ca := openSide(t, p.sockA, "vrnicA", addrA)
	if st, ph := portState(t, ca); st != 1 || ph != 3 {
		t.Fatalf("port %d/%d on a down interface, want DOWN/DISABLED", st, ph)
	}
	p.nsA.Exec(t, "ip", "link", "set", p.va, "up")
	nextEvent(t, ca, verbs.EventPortActive)
	waitPort(t, ca, 4, 5)
	cb := openSide(t, p.sockB, "vrnicB", addrB)
	connectRC(t, ca, cb)
	pairRCTraffic(t, ca, cb)
}

// The far end going down takes A's carrier: A's port is DOWN and POLLING
// (admin up, no link), and ACTIVE again once the carrier is back.
func TestLinkCarrier(t *testing.T) {
	p := newLinkPair(t, nil)
	ca := openSide(t, p.sockA, "vrnicA", addrA)
	p.nsB.Exec(t, "ip", "link", "set", p.vb, "down")
	waitPort(t, ca, 1, 2)
	nextEvent(t, ca, verbs.EventPortErr)
	p.a.log.waitRecord(t, 0, "port DOWN: the interface is no carrier; QPs wait for it (RC retransmits on its timer and retry count)", time.Second)
	p.nsB.Exec(t, "ip", "link", "set", p.vb, "up")
	waitPort(t, ca, 4, 5)
	nextEvent(t, ca, verbs.EventPortActive)
}

// The interface deleted under a running daemon: its client hears
// DEVICE_FATAL, its posted receives come back flushed, and the daemon
// exits 1 with its log line.
func TestLinkDeleted(t *testing.T) {
	p := newLinkPair(t, nil)
	ca, _ := p.connect(t, rcPath{mtu: verbs.MTU1024, timeout: 14, retry: 7})
	for i := range 4 {
		if err := ca.qp.PostRecv(verbs.RecvWR{ID: uint64(100 + i), SGL: []verbs.SGE{ca.mr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	p.nsA.Exec(t, "ip", "link", "del", p.va)
	// The interface goes down before it goes: PORT_ERR may come first.
	for ev := range ca.d.Events() {
		if ev.Type == verbs.EventDeviceFatal {
			break
		}
		if ev.Type != verbs.EventPortErr {
			t.Fatalf("async event %v, want PORT_ERR or DEVICE_FATAL", ev.Type)
		}
	}
	for i := range 4 {
		if wc := poll1(t, ca.rcq); wc.Status != verbs.WCWRFlushErr || wc.WRID != uint64(100+i) {
			t.Fatalf("receive %d after the interface went: %+v, want WR_FLUSH_ERR", i, wc)
		}
	}
	code, ok := p.a.wait(5 * time.Second)
	if !ok || code != exitFail {
		t.Fatalf("daemon after its interface went: exited=%v status %d", ok, code)
	}
	p.a.log.waitRecord(t, 0, "the interface is gone; the device is lost and vrnicd stops", time.Second)
}

func activeMTU(t *testing.T, s *rcSide) verbs.MTU {
	t.Helper()
	pa, err := s.d.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	return verbs.MTU(pa.ActiveMTU)
}

func setMTU(t *testing.T, p *linkPair, mtu int) {
	t.Helper()
	p.nsA.Exec(t, "ip", "link", "set", p.va, "mtu", fmt.Sprint(mtu))
	p.nsB.Exec(t, "ip", "link", "set", p.vb, "mtu", fmt.Sprint(mtu))
}

// The MTU is followed: 1500 → 9000 gives an active MTU of 4096, which a
// new QP uses end to end; back to 1500 the active MTU is 1024 again, and
// the QP whose path MTU no longer fits has its packets dropped at the port
// as kernel rxe's IP layer drops them: counted (tx_too_big), logged once
// for the QP, and its SEND ends in RETRY_EXC_ERR by its timer. A QP made
// afterwards, at the active MTU, works.
func TestLinkMTU(t *testing.T) {
	p := newLinkPair(t, nil)
	probe := openSide(t, p.sockA, "vrnicA", addrA)
	if m := activeMTU(t, probe); m != verbs.MTU1024 {
		t.Fatalf("active MTU %v at link MTU 1500", m)
	}
	// Under load: a stream at path MTU 1024, which fits both, while the
	// MTU goes 1500 → 9000 → 1500 under it, loses and repeats nothing.
	c0, c1 := p.connect(t, rcPath{mtu: verbs.MTU1024, timeout: 17, retry: 7})
	flip := make(chan error, 1)
	st := sendStream(t, c0, c1, 1500, 3000, func() {
		go func() {
			var err error
			for _, m := range []string{"9000", "1500"} {
				for _, x := range []struct {
					ns  *linktest.NS
					dev string
				}{{p.nsA, p.va}, {p.nsB, p.vb}} {
					if err == nil {
						_, err = x.ns.TryExec("ip", "link", "set", x.dev, "mtu", m)
					}
				}
				time.Sleep(100 * time.Millisecond)
			}
			flip <- err
		}()
	})
	if err := <-flip; err != nil {
		t.Fatal(err)
	}
	for i, s := range st {
		if s != verbs.WCSuccess {
			t.Fatalf("send %d across the MTU changes: %v", i, s)
		}
	}
	if r, _ := p.a.log.waitRecord(t, 0, "interface MTU changed; the port follows", time.Second); r["mtu"] != 9000.0 || r["active_mtu"] != 4096.0 {
		t.Fatalf("first MTU change logged as %v", r)
	}
	setMTU(t, p, 9000)
	if !waitUntil(5*time.Second, func() bool { return activeMTU(t, probe) == verbs.MTU4096 }) {
		t.Fatalf("active MTU %v after the link went to 9000", activeMTU(t, probe))
	}
	p.a.log.waitRecord(t, 0, "interface MTU changed; the port follows", time.Second)
	p.b.log.waitRecord(t, 0, "interface MTU changed; the port follows", time.Second)
	ca, cb := p.connect(t, rcPath{mtu: verbs.MTU4096, timeout: 14, retry: 1})
	if st := sendStream(t, ca, cb, 20, 16384, nil); st[len(st)-1] != verbs.WCSuccess {
		t.Fatalf("16 KiB SENDs at path MTU 4096 over MTU 9000: %v", st)
	}
	setMTU(t, p, 1500)
	if !waitUntil(5*time.Second, func() bool { return activeMTU(t, probe) == verbs.MTU1024 }) {
		t.Fatalf("active MTU %v after the link went back to 1500", activeMTU(t, probe))
	}
	from := p.a.log.Len()
	for i := range 2 {
		if err := ca.qp.PostSend(verbs.SendWR{ID: uint64(50 + i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{ca.mr.SGE(0, 8192)}}); err != nil {
			t.Fatal(err)
		}
	}
	if wc := poll1(t, ca.scq); wc.Status != verbs.WCRetryExcErr {
		t.Fatalf("a 4096-MTU SEND over MTU 1500: %v, want RETRY_EXC_ERR", wc.Status)
	}
	r, next := p.a.log.waitRecord(t, from, "QP's packets exceed the link's MTU and are dropped; use a path MTU up to the port's active MTU", time.Second)
	if r["link_mtu"] != 1500.0 || r["active_mtu"] != 1024.0 || r["qpn"] != float64(ca.qp.QPN()) {
		t.Errorf("too-big record %v", r)
	}
	if _, _, again := p.a.log.Wait(next, 300*time.Millisecond, func(l string) bool {
		return strings.Contains(l, "exceed the link's MTU")
	}); again {
		t.Error("the too-big warning was logged twice for one QP")
	}
	if ns, _ := p.a.counters(); ns["tx_too_big"] == 0 {
		t.Errorf("tx_too_big not counted: %v", ns)
	}
	ca2, cb2 := p.connect(t, rcPath{mtu: verbs.MTU1024, timeout: 14, retry: 7})
	pairRCTraffic(t, ca2, cb2)
}

// A persistent TAP an administrator made is attached to, said so in the
// log, and left in place with its address when vrnicd stops; the TAP
// vrnicd made itself is removed.
func TestTAPPersistentSurvives(t *testing.T) {
	linktest.RequireRoot(t)
	binaries(t)
	ns := linktest.NewNS(t, "vtp")
	tap := linktest.UniqueName("pt")
	ns.Exec(t, "ip", "tuntap", "add", tap, "mode", "tap")
	ns.Exec(t, "ip", "addr", "add", "203.0.113.9/24", "dev", tap)
	sock := filepath.Join(t.TempDir(), "tap.sock")
	d := startDaemon(t, ns, nil, "--iface", "tap:"+tap, "--ip", "203.0.113.10/24", "--socket", sock)
	d.log.waitRecord(t, 0, "attached to the persistent TAP "+tap+"; it stays, with its addresses, after vrnicd stops", time.Second)
	d.signal(syscall.SIGTERM)
	if code, ok := d.wait(5 * time.Second); !ok || code != 0 {
		t.Fatalf("exit %v %d", ok, code)
	}
	if out := ns.Exec(t, "ip", "-o", "addr", "show", "dev", tap); !strings.Contains(out, "203.0.113.9/24") {
		t.Fatalf("the administrator's TAP lost its address: %q", out)
	}
	made := linktest.UniqueName("mt")
	d = startDaemon(t, ns, nil, "--iface", "tap:"+made, "--ip", "203.0.113.11/24", "--socket", sock)
	d.signal(syscall.SIGTERM)
	if code, ok := d.wait(5 * time.Second); !ok || code != 0 {
		t.Fatalf("exit %v %d", ok, code)
	}
	if ifaceExists(ns, made) {
		t.Error("the TAP vrnicd made is still there")
	}
}

// udQP makes a UD QP on s's PD and CQs, in RTS with Q_Key qkey.
func udQP(t *testing.T, s *rcSide, qkey uint32) *verbs.QP {
	t.Helper()
	qp, err := s.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: s.scq, RecvCQ: s.rcq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		a    verbs.QPAttr
		mask verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.QPStateInit, Port: 1, QKey: qkey}, verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey},
		{verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState},
		{verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 1}, verbs.QPAttrState | verbs.QPAttrSQPSN},
	} {
		if err := qp.Modify(&m.a, m.mask); err != nil {
			t.Fatalf("UD QP to %v: %v", m.a.State, err)
		}
	}
	return qp
}

// UD while the link is down: the sends complete (UD is unreliable, as on
// kernel rxe) but nothing leaves, not even late: they are dropped and
// counted (tx_link_down); B receives only what was sent while up.
func TestLinkDownUD(t *testing.T) {
	p := newLinkPair(t, nil)
	ca, cb := openSide(t, p.sockA, "vrnicA", addrA), openSide(t, p.sockB, "vrnicB", addrB)
	ua, ub := udQP(t, ca, 0x1111), udQP(t, cb, 0x2222)
	ah, err := ca.pd.CreateAH(verbs.AHAttr{DGID: cb.gid, SGIDIndex: ca.gidx, HopLimit: 64, Port: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 16 {
		if err := ub.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{cb.mr.SGE(uint64(i)*2048, 2048)}}); err != nil {
			t.Fatal(err)
		}
	}
	send := func(id uint64) {
		t.Helper()
		if err := ua.PostSend(verbs.SendWR{ID: id, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, AH: ah,
			RemoteQPN: ub.QPN(), RemoteQKey: 0x2222, SGL: []verbs.SGE{ca.mr.SGE(0, 512)}}); err != nil {
			t.Fatal(err)
		}
		if wc := poll1(t, ca.scq); wc.Status != verbs.WCSuccess || wc.WRID != id {
			t.Fatalf("UD send %d: %+v", id, wc)
		}
	}
	send(1)
	if wc := poll1(t, cb.rcq); wc.Status != verbs.WCSuccess {
		t.Fatalf("UD receive while up: %+v", wc)
	}
	p.nsA.Exec(t, "ip", "link", "set", p.va, "down")
	waitPort(t, ca, 1, 3)
	before, _ := p.a.counters()
	for i := range 5 {
		send(uint64(10 + i))
	}
	after, _ := p.a.counters()
	if n := after["tx_link_down"] - before["tx_link_down"]; n < 5 {
		t.Fatalf("tx_link_down rose by %v for 5 UD sends while down: %v", n, after)
	}
	p.nsA.Exec(t, "ip", "link", "set", p.va, "up")
	waitPort(t, ca, 4, 5)
	time.Sleep(300 * time.Millisecond)
	wc := make([]verbs.WC, 8)
	if n := cb.rcq.Poll(wc); n != 0 {
		t.Fatalf("B received %d UD messages sent while A's link was down", n)
	}
	if !waitUntil(5*time.Second, func() bool {
		send(20)
		return cb.rcq.Poll(wc[:1]) == 1
	}) {
		t.Fatal("no UD message reached B after the link came back")
	}
}

// TAP mode: the TAP set down is port DOWN (DISABLED), up again ACTIVE,
// with the events; the daemon lives through it.
func TestLinkTAPDownUp(t *testing.T) {
	linktest.RequireRoot(t)
	binaries(t)
	ns := linktest.NewNS(t, "vtd")
	tap := linktest.UniqueName("td")
	sock := filepath.Join(t.TempDir(), "tap.sock")
	d := startDaemon(t, ns, nil, "--iface", "tap:"+tap, "--ip", "203.0.113.10/24", "--socket", sock)
	c := openSide(t, sock, "vrnic0", netip.MustParseAddr("203.0.113.10"))
	ns.Exec(t, "ip", "link", "set", tap, "down")
	waitPort(t, c, 1, 3)
	nextEvent(t, c, verbs.EventPortErr)
	ns.Exec(t, "ip", "link", "set", tap, "up")
	waitPort(t, c, 4, 5)
	nextEvent(t, c, verbs.EventPortActive)
	if code, exited := d.wait(0); exited {
		t.Fatalf("daemon exited (%d)", code)
	}
}
