package netstack

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link/linktest"
	"github.com/vrnic/vrnicd/transport/clock"
)

// TestRawModeMulticastInNetns: in raw mode the kernel holds the
// memberships. After JoinGroup `ip maddr` lists the group and the kernel
// reports it on the wire; RoCE to the group from the peer namespace is
// delivered; after LeaveGroup the group is gone; 30 IPv4 groups (past
// the 20 memberships a socket may hold) are all joined, and Close leaves
// them all.
func TestRawModeMulticastInNetns(t *testing.T) {
	linktest.RequireRoot(t)
	r1, r2 := linktest.NewNS(t, "nm1"), linktest.NewNS(t, "nm2")
	v1, v2 := linktest.UniqueName("m1"), linktest.UniqueName("m2")
	linktest.VethPair(t, r1, v1, r2, v2)
	r1.Exec(t, "ip", "addr", "add", "203.0.113.1/24", "dev", v1)
	r2.Exec(t, "ip", "addr", "add", "203.0.113.2/24", "dev", v2)
	ip1 := netip.MustParseAddr("203.0.113.1")
	l1, err := r1.Netlink(t).LinkByName(v1)
	if err != nil {
		t.Fatal(err)
	}
	capt, frames := rawCapture(t, r2, v2)
	st, rx, _ := rawStack(t, r1, v1, l1.Attrs().HardwareAddr, ip1)
	maddr := func() string { return r1.Exec(t, "ip", "maddr", "show", "dev", v1) }

	for _, g := range []netip.Addr{group4, group6} {
		if err := st.JoinGroup(g); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(maddr(), " "+g.String()+"\n") {
			t.Fatalf("%v not in ip maddr:\n%s", g, maddr())
		}
	}
	waitReport(t, frames)

	// RoCE from R2 to each group reaches the stack.
	for _, g := range []netip.Addr{group4, group6} {
		f := peerGroupFrame(t, capt.HardwareAddr(), g)
		if _, err := capt.Write([][]byte{f}, 0); err != nil {
			t.Fatal(err)
		}
		select {
		case p := <-rx:
			if p.Dst != g || p.SrcPort != 0xc002 {
				t.Fatalf("delivered %+v", p)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("RoCE to %v not delivered; counters %v", g, st.Counters().Map())
		}
	}

	for _, g := range []netip.Addr{group4, group6} {
		if err := st.LeaveGroup(g); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(maddr(), " "+g.String()+"\n") {
			t.Fatalf("%v still in ip maddr after LeaveGroup:\n%s", g, maddr())
		}
	}

	var gs []string
	for i := range 30 {
		g := netip.AddrFrom4([4]byte{239, 0, 1, byte(i + 1)})
		if err := st.JoinGroup(g); err != nil {
			t.Fatalf("group %d: %v", i+1, err)
		}
		gs = append(gs, g.String())
	}
	out := maddr()
	for _, g := range gs {
		if !strings.Contains(out, " "+g+"\n") {
			t.Fatalf("%s not in ip maddr:\n%s", g, out)
		}
	}
	if n := len(st.kern.mship.socks); n < 2 {
		t.Errorf("30 groups on %d socket(s): the 20-per-socket limit was not met?", n)
	}
	st.Close()
	out = maddr()
	for _, g := range gs {
		if strings.Contains(out, " "+g+"\n") {
			t.Fatalf("%s still in ip maddr after Close:\n%s", g, out)
		}
	}
}

// waitReport waits for the kernel's IGMP report on R2's wire.
func waitReport(t *testing.T, frames chan []byte) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case f := <-frames:
			if len(f) > 34 && f[12] == 0x08 && f[13] == 0 && f[23] == ipProtoIGMP {
				return
			}
		case <-deadline:
			t.Fatal("no IGMP report from the kernel on the wire")
		}
	}
}

// peerGroupFrame is a RoCE frame from R2 (srcMAC) to group g, built by a
// scratch stack.
func peerGroupFrame(t *testing.T, srcMAC []byte, g netip.Addr) []byte {
	t.Helper()
	cl := newCaptureLink(srcMAC)
	b, err := New(Config{Link: cl, Clock: clock.NewManual(time.Unix(1_000_000, 0)),
		Addrs: []netip.Prefix{netip.MustParsePrefix("203.0.113.2/24"), netip.MustParsePrefix("2001:db8::2/64")}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Send([]TxPacket{{Buf: transport(24), Offset: Headroom, Dest: &Dest{Dst: g, SrcPort: 0xc002}}}); err != nil {
		t.Fatal(fmt.Errorf("send to %v: %w", g, err))
	}
	return cl.frames[0]
}

// TestTAPModeMulticastInNetns: the stack's own IGMPv3 and MLDv2 reports
// satisfy the Linux bridge's multicast snooping (which checks checksums,
// Router Alert, hop limit and the MLD source): after JoinGroup the bridge
// lists the groups on the TAP's port, and RoCE from the peer namespace to
// a group, forwarded by the bridge, is delivered.
func TestTAPModeMulticastInNetns(t *testing.T) {
	linktest.RequireRoot(t)
	nsA, nsB, tap, tapName, br, vb := tapBridged(t, "m")
	rx := make(chan RxPacket, 16)
	st, err := New(Config{Link: tap, Addrs: []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24")}, Deliver: deliverTo(rx)})
	if err != nil {
		t.Fatal(err)
	}
	runStack(t, st)
	for _, g := range []netip.Addr{group4, group6} {
		if err := st.JoinGroup(g); err != nil {
			t.Fatal(err)
		}
	}
	var mdb string
	linktest.WaitFor(t, "the bridge to learn both groups on the TAP's port", waitLimit, waitPoll, func() bool {
		mdb = nsA.Exec(t, "bridge", "mdb", "show", "dev", br)
		return strings.Contains(mdb, "port "+tapName+" grp "+group4.String()) &&
			strings.Contains(mdb, "port "+tapName+" grp "+group6.String())
	})

	capt, _ := rawCapture(t, nsB, vb)
	for _, g := range []netip.Addr{group4, group6} {
		if _, err := capt.Write([][]byte{peerGroupFrame(t, capt.HardwareAddr(), g)}, 0); err != nil {
			t.Fatal(err)
		}
		select {
		case p := <-rx:
			if p.Dst != g {
				t.Fatalf("delivered %+v", p)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("RoCE to %v not delivered; counters %v; mdb:\n%s", g, st.Counters().Map(), mdb)
		}
	}
}
