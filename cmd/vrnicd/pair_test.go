package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link"
	"github.com/vrnic/vrnicd/nic/link/linktest"
	"github.com/vrnic/vrnicd/nic/netstack"
	"github.com/vrnic/vrnicd/transport/wire"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// Two daemons, one on a TAP (namespace A, bridged to a veth) and one in raw
// mode on the veth's far end (namespace B), with verbs clients on each:
// raw mode receives RoCEv2 while the kernel sends no ICMP port unreachable
// for it (the control without the daemon does draw one), the two resolve
// each other (the TAP daemon by ARP, the raw one through the kernel), and
// an RC QP pair exchanges SEND, RDMA WRITE and RDMA READ. Every frame the
// raw daemon puts on the wire carries a correct ICRC, and its pcap decodes
// with every ICRC ok.
func TestTwoDaemonsRC(t *testing.T) {
	linktest.RequireRoot(t)
	_, vrnicctl := binaries(t)
	nsA := linktest.NewNS(t, "vpa")
	nsB := linktest.NewNS(t, "vpb")
	tap, br := linktest.UniqueName("vt"), linktest.UniqueName("vb")
	va, vb := linktest.UniqueName("va"), linktest.UniqueName("vr")
	linktest.BridgedVeth(t, nsA, br, va, nsB, vb)
	// The kernel of A is a third host on the segment, for the control.
	nsA.Exec(t, "ip", "addr", "add", "192.0.2.3/24", "dev", br)
	nsB.Exec(t, "ip", "addr", "add", "192.0.2.2/24", "dev", vb)
	nsB.Exec(t, "ip", "addr", "add", "2001:db8::2/64", "dev", vb, "nodad")
	macB := interfaceMAC(t, nsB, vb)

	wireB := captureFrom(t, nsA, va, macB)

	// Control: nothing listens on UDP 4791 in B, so its kernel answers
	// port unreachable.
	poke := udpPoker(t, nsA, "192.0.2.2:4791")
	poke()
	if !waitUntil(3*time.Second, func() bool { return wireB.unreach() > 0 }) {
		t.Fatal("control failed: no ICMP port unreachable from B without vrnicd (capture broken?)")
	}
	unreachBefore := wireB.unreach()

	dir := t.TempDir()
	sockA, sockB := filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")
	pcapB := filepath.Join(dir, "b.pcap")
	a := startDaemon(t, nsA, nil, "--iface", "tap:"+tap, "--ip", "192.0.2.1/24", "--ip", "2001:db8::1/64", "--socket", sockA, "--name", "vrnicA")
	nsA.Exec(t, "ip", "link", "set", tap, "master", br)
	b := startDaemon(t, nsB, nil, "--iface", vb, "--socket", sockB, "--pcap", pcapB, "--name", "vrnicB")
	if r := b.ready; recordString(r, "mode") != "raw" || recordString(r, "mac") != macB.String() ||
		!hasField(recordString(r, "gids"), "1=::ffff:192.0.2.2") || !strings.Contains(recordString(r, "addrs"), "192.0.2.2/24") {
		t.Fatalf("raw-mode ready line %v", r)
	}

	pairRawQuiet(t, b, poke, wireB, unreachBefore)

	// An RC connection between the two daemons.
	ca, cb := openSide(t, sockA, "vrnicA", netip.MustParseAddr("192.0.2.1")), openSide(t, sockB, "vrnicB", netip.MustParseAddr("192.0.2.2"))
	connectRC(t, ca, cb)
	pairRCTraffic(t, ca, cb)

	// Each resolved the other: A by its own ARP, B through the kernel.
	nsCtr, _ := a.counters()
	if nsCtr["arp_replies_in"] < 1 {
		t.Errorf("TAP daemon did not resolve B by ARP: %v", nsCtr)
	}
	if out := nsB.Exec(t, "ip", "neigh", "show", "192.0.2.1", "dev", vb); !strings.Contains(out, interfaceMACString(a.ready)) {
		t.Errorf("B's kernel has no entry for A's MAC %s: %q", interfaceMACString(a.ready), out)
	}

	// B's frames on the wire: RoCEv2 with correct ICRCs.
	sent := wireB.roce()
	if len(sent) < 3 {
		t.Fatalf("captured %d RoCEv2 frames from B, want ≥ 3 (ACKs, a WRITE, a READ request)", len(sent))
	}
	for i, f := range sent {
		if err := frameICRC(f); err != nil {
			t.Errorf("frame %d from B: %v", i, err)
		}
	}

	ca.close()
	cb.close()
	for _, d := range []*daemonProc{a, b} {
		d.signal(syscall.SIGTERM)
		if code, ok := d.wait(5 * time.Second); !ok || code != 0 {
			t.Fatalf("exit: %v %d", ok, code)
		}
	}
	if !ifaceExists(nsB, vb) {
		t.Error("raw mode removed the interface it ran on")
	}
	pairPcapICRCs(t, vrnicctl, pcapB)
}

// pairRawQuiet: in raw mode RoCEv2 reaches the daemon b, and the kernel
// of B sends no more port unreachables (than unreachBefore).
func pairRawQuiet(t *testing.T, b *daemonProc, poke func(), wireB *wireCapture, unreachBefore int) {
	t.Helper()
	for range 3 {
		poke()
	}
	var ns map[string]float64
	if !waitUntil(3*time.Second, func() bool { ns, _ = b.counters(); return ns["frames_in"] >= 3 }) {
		t.Fatalf("raw daemon did not receive the UDP 4791 frames: %v", ns)
	}
	time.Sleep(200 * time.Millisecond)
	if n := wireB.unreach() - unreachBefore; n != 0 {
		t.Fatalf("kernel of B sent %d ICMP port unreachable with vrnicd running", n)
	}
}

// pairRCTraffic: a 5000-byte SEND from A to B (five packets at path MTU
// 1024), then an RDMA WRITE from B into A that B reads back.
func pairRCTraffic(t *testing.T, ca, cb *rcSide) {
	t.Helper()
	src := ca.buf.Bytes()
	for i := range src[:64<<10] {
		src[i] = byte(i*7 + 3)
	}
	// SEND of 5000 bytes: five packets at path MTU 1024.
	if err := cb.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{cb.mr.SGE(0, 8192)}}); err != nil {
		t.Fatal(err)
	}
	if err := ca.qp.PostSend(verbs.SendWR{ID: 10, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{ca.mr.SGE(0, 5000)}}); err != nil {
		t.Fatal(err)
	}
	if wc := poll1(t, cb.rcq); wc.Status != verbs.WCSuccess || wc.ByteLen != 5000 || wc.WRID != 1 {
		t.Fatalf("receive on B %+v", wc)
	}
	if wc := poll1(t, ca.scq); wc.Status != verbs.WCSuccess || wc.WRID != 10 {
		t.Fatalf("send completion on A %+v", wc)
	}
	if !bytes.Equal(cb.buf.Bytes()[:5000], src[:5000]) {
		t.Fatal("SEND data differs")
	}
	// RDMA WRITE from B into A, then B reads it back.
	dst := cb.buf.Bytes()
	copy(dst[100000:], bytes.Repeat([]byte("vrnicd"), 3000))
	if err := cb.qp.PostSend(
		verbs.SendWR{ID: 20, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{cb.mr.SGE(100000, 18000)},
			RemoteAddr: ca.mr.Addr() + 200000, RKey: ca.mr.RKey()},
		verbs.SendWR{ID: 21, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{cb.mr.SGE(300000, 18000)},
			RemoteAddr: ca.mr.Addr() + 200000, RKey: ca.mr.RKey()},
	); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if wc := poll1(t, cb.scq); wc.Status != verbs.WCSuccess {
			t.Fatalf("completion on B %+v", wc)
		}
	}
	if !bytes.Equal(src[200000:218000], dst[100000:118000]) || !bytes.Equal(dst[300000:318000], dst[100000:118000]) {
		t.Fatal("WRITE/READ data differs")
	}
}

// pairPcapICRCs: vrnicctl decodes B's pcap with every ICRC ok (the
// control's datagrams aside), its received and sent packets both there.
func pairPcapICRCs(t *testing.T, vrnicctl, pcapB string) {
	t.Helper()
	out, err := exec.Command(vrnicctl, "decode", "--json", pcapB).CombinedOutput()
	if err != nil {
		t.Fatalf("vrnicctl decode: %v\n%s", err, out)
	}
	var doc struct{ Packets []map[string]any }
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("vrnicctl decode: %v:\n%s", err, out)
	}
	var toB, fromB int
	for _, rec := range doc.Packets {
		if rec["src"] == "192.0.2.3" {
			continue // the control's datagrams: no ICRC, dropped by B
		}
		if rec["icrc"] != "ok" {
			t.Errorf("pcap packet %v", rec)
		}
		switch {
		case rec["dst"] == "192.0.2.2":
			toB++
		case rec["src"] == "192.0.2.2":
			fromB++
		}
	}
	if toB < 5 || fromB < 3 {
		t.Fatalf("pcap of B: %d packets received, %d sent; want ≥ 5 and ≥ 3:\n%s", toB, fromB, out)
	}
}

func interfaceMAC(t *testing.T, ns *linktest.NS, name string) net.HardwareAddr {
	t.Helper()
	var mac net.HardwareAddr
	if err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(name)
		if err == nil {
			mac = ifi.HardwareAddr
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return mac
}

func interfaceMACString(r record) string { return recordString(r, "mac") }

// udpPoker returns a function that sends one datagram shaped like a RoCEv2
// packet (BTH to QP 0x11) from a kernel UDP socket in ns to addr.
func udpPoker(t *testing.T, ns *linktest.NS, addr string) func() {
	t.Helper()
	// Unconnected, so an ICMP error does not swallow the next datagram.
	var c *net.UDPConn
	if err := ns.Do(func() (err error) {
		c, err = net.ListenUDP("udp4", nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	to := net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr))
	pkt := rcSend(0x11, 1, 64)[netstack.Headroom:] // BTH..ICRC (its ICRC is not computed)
	return func() {
		if _, err := c.WriteToUDP(pkt, to); err != nil {
			t.Errorf("UDP to %v: %v", to, err)
		}
	}
}

// wireCapture records frames from one MAC arriving on an interface.
type wireCapture struct {
	mu       sync.Mutex
	frames   [][]byte // RoCEv2 frames
	icmpUnre int
}

func captureFrom(t *testing.T, ns *linktest.NS, iface string, from net.HardwareAddr) *wireCapture {
	t.Helper()
	var raw *link.Raw
	if err := ns.Do(func() (err error) {
		raw, err = link.OpenRaw(link.RawConfig{Interface: iface})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	c := &wireCapture{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		bufs, sizes := [][]byte{make([]byte, 9100)}, []int{0}
		for {
			if _, err := raw.Read(bufs, sizes, 0); err != nil {
				return
			}
			f := bufs[0][:sizes[0]]
			if len(f) < 14 || !bytes.Equal(f[6:12], from) {
				continue
			}
			c.mu.Lock()
			if isPortUnreach(f) {
				c.icmpUnre++
			} else if isRoCE(f) {
				c.frames = append(c.frames, append([]byte(nil), f...))
			}
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() { raw.Close(); <-done })
	return c
}

func (c *wireCapture) unreach() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.icmpUnre
}

func (c *wireCapture) roce() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]byte(nil), c.frames...)
}

// isRoCE: IPv4 or IPv6 UDP to port 4791.
func isRoCE(f []byte) bool {
	switch binary.BigEndian.Uint16(f[12:]) {
	case 0x0800:
		ihl := int(f[14]&0xf) * 4
		return len(f) >= 14+ihl+8 && f[23] == 17 && binary.BigEndian.Uint16(f[14+ihl+2:]) == 4791
	case 0x86dd:
		return len(f) >= 14+40+8 && f[20] == 17 && binary.BigEndian.Uint16(f[14+40+2:]) == 4791
	}
	return false
}

// frameICRC checks a captured frame's ICRC.
func frameICRC(f []byte) error {
	var ip []byte
	if binary.BigEndian.Uint16(f[12:]) == 0x0800 {
		ip = f[14 : 14+int(binary.BigEndian.Uint16(f[16:]))]
	} else {
		ip = f[14 : 14+40+int(binary.BigEndian.Uint16(f[18:]))]
	}
	return wire.VerifyICRC(append([]byte(nil), ip...))
}

// rcSide is a verbs client's end of an RC connection.
type rcSide struct {
	d        *verbs.Device
	pd       *verbs.PD
	scq, rcq *verbs.CQ
	buf      *verbs.Buffer
	mr       *verbs.MR
	qp       *verbs.QP
	gidx     uint8
	gid      verbs.GID
}

func openSide(t *testing.T, sock, name string, addr netip.Addr) *rcSide {
	t.Helper()
	d, err := verbs.Open(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if d.Name() != name {
		t.Fatalf("device name %q, want %q", d.Name(), name)
	}
	s := &rcSide{d: d, gidx: 255}
	want := verbs.GID(addr.As16())
	for i := range 8 {
		if g, err := d.QueryGID(1, i); err == nil && g == want {
			s.gidx, s.gid = uint8(i), g
			break
		}
	}
	if s.gidx == 255 {
		t.Fatalf("%s: no GID for %v", name, addr)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	s.pd, err = d.AllocPD()
	must(err)
	s.scq, err = d.CreateCQ(64, false)
	must(err)
	s.rcq, err = d.CreateCQ(64, false)
	must(err)
	s.buf, err = s.pd.AllocBuffer(1 << 20)
	must(err)
	s.mr, err = s.pd.RegMR(s.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	must(err)
	s.qp, err = s.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: s.scq, RecvCQ: s.rcq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2}})
	must(err)
	return s
}

func (s *rcSide) close() {
	s.qp.Destroy()
	s.d.Close()
}

// connectRC brings both QPs to RTS against each other, as rc_pingpong does.
func connectRC(t *testing.T, a, b *rcSide) {
	t.Helper()
	connectRCWith(t, a, b, rcPath{mtu: verbs.MTU1024, timeout: 14, retry: 7})
}

// rcPath is what connectRCWith gives both QPs: path MTU, and the local ACK
// timeout exponent and retry count that bound an outage.
type rcPath struct {
	mtu            verbs.MTU
	timeout, retry uint8
}

func connectRCWith(t *testing.T, a, b *rcSide, p rcPath) {
	t.Helper()
	modify := func(s *rcSide, attr verbs.QPAttr, m verbs.AttrMask) {
		t.Helper()
		if err := s.qp.Modify(&attr, m); err != nil {
			t.Fatalf("modify to %v: %v", attr.State, err)
		}
	}
	for _, so := range [][2]*rcSide{{a, b}, {b, a}} {
		s, o := so[0], so[1]
		modify(s, verbs.QPAttr{State: verbs.QPStateInit, Port: 1, AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
		modify(s, verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: p.mtu, DestQPN: o.qp.QPN(), RQPSN: 100,
			MaxDestRdAtomic: 4, MinRNRTimer: 1, AV: verbs.AHAttr{DGID: o.gid, SGIDIndex: s.gidx, HopLimit: 64, Port: 1}},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
				verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer)
	}
	for _, s := range []*rcSide{a, b} {
		modify(s, verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 100, Timeout: p.timeout, RetryCnt: p.retry, RNRRetry: 7, MaxRdAtomic: 4},
			verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic)
	}
}

// poll1 waits (10 s at most) for one completion.
func poll1(t *testing.T, cq *verbs.CQ) verbs.WC {
	t.Helper()
	wc := make([]verbs.WC, 1)
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
		if cq.Poll(wc) == 1 {
			return wc[0]
		}
		time.Sleep(200 * time.Microsecond)
	}
	t.Fatal("no completion within 10 s")
	return verbs.WC{}
}
