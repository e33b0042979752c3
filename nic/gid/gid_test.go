package gid

import (
	"net"
	"net/netip"
	"testing"
)

var mac = net.HardwareAddr{0x52, 0x54, 0x00, 0xe5, 0xd8, 0x03}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, x := range s {
		out = append(out, netip.MustParseAddr(x))
	}
	return out
}

func TestLinkLocalEUI64(t *testing.T) {
	// The MAC of the golden captures' server; kernel rxe's GID 0 for it.
	if got, want := LinkLocal(mac), netip.MustParseAddr("fe80::5054:ff:fee5:d803"); got != want {
		t.Fatalf("LinkLocal = %v, want %v", got, want)
	}
}

func TestConversions(t *testing.T) {
	g := FromAddr(netip.MustParseAddr("192.0.2.11"))
	want := GID{10: 0xff, 11: 0xff, 12: 192, 13: 0, 14: 2, 15: 11}
	if g != want || !g.IsIPv4() {
		t.Fatalf("FromAddr(192.0.2.11) = %x", g)
	}
	if a := g.Addr(); a != netip.MustParseAddr("192.0.2.11") || !a.Is4() {
		t.Fatalf("Addr() = %v", a)
	}
	if s := g.String(); s != "0000:0000:0000:0000:0000:ffff:c000:020b" {
		t.Fatalf("String = %s", s)
	}
	v6 := netip.MustParseAddr("2001:db8::1")
	if FromAddr(v6).Addr() != v6 || FromAddr(v6).IsIPv4() {
		t.Fatal("IPv6 round trip")
	}
	zoned := netip.MustParseAddr("fe80::1%eth0")
	if FromAddr(zoned).Addr() != netip.MustParseAddr("fe80::1") {
		t.Fatal("zone not dropped")
	}
}

func indexOf(t *testing.T, tb *Table, s string) int {
	t.Helper()
	i, ok := tb.IndexOf(netip.MustParseAddr(s))
	if !ok {
		t.Fatalf("%s not in table: %v", s, tb.Entries())
	}
	return i
}

func TestKernelLayoutAndStableIndices(t *testing.T) {
	tb := New(mac, 0)
	if tb.Size() != DefaultSize {
		t.Fatalf("Size = %d", tb.Size())
	}
	var calls int
	tb.OnChange(func([]Entry) { calls++ })
	// IPv6 listed first, and the link-local equal to GID 0: still IPv4 at 1.
	err := tb.Sync(addrs("2001:db8::10", "fe80::5054:ff:fee5:d803", "192.0.2.11", "198.51.100.1", "192.0.2.11"))
	if err != nil {
		t.Fatal(err)
	}
	if i := indexOf(t, tb, "fe80::5054:ff:fee5:d803"); i != 0 {
		t.Errorf("link-local at %d", i)
	}
	for s, want := range map[string]int{"192.0.2.11": 1, "198.51.100.1": 2, "2001:db8::10": 3} {
		if i := indexOf(t, tb, s); i != want {
			t.Errorf("%s at index %d, want %d", s, i, want)
		}
	}
	if n := len(tb.Entries()); n != 4 {
		t.Errorf("%d entries, want 4", n)
	}
	if e, ok := tb.Lookup(1); !ok || e.Type != RoCEv2 || e.GID.Addr() != netip.MustParseAddr("192.0.2.11") {
		t.Errorf("Lookup(1) = %+v %v", e, ok)
	}
	// Remove the first IPv4: index 1 frees, others keep theirs.
	if err := tb.Sync(addrs("198.51.100.1", "2001:db8::10")); err != nil {
		t.Fatal(err)
	}
	if _, ok := tb.Lookup(1); ok || !tb.GIDAt(1).IsZero() {
		t.Error("index 1 still valid after removal")
	}
	if indexOf(t, tb, "198.51.100.1") != 2 || indexOf(t, tb, "2001:db8::10") != 3 {
		t.Error("surviving entries moved")
	}
	// A new address reuses the lowest free slot.
	if err := tb.Sync(addrs("198.51.100.1", "2001:db8::10", "203.0.113.7")); err != nil {
		t.Fatal(err)
	}
	if i := indexOf(t, tb, "203.0.113.7"); i != 1 {
		t.Errorf("new address at %d, want reused slot 1", i)
	}
	// Removing the last entry shrinks; the next add takes index 3 again.
	if !tb.Remove(netip.MustParseAddr("2001:db8::10")) {
		t.Fatal("Remove failed")
	}
	if i, err := tb.Add(netip.MustParseAddr("2001:db8::20")); err != nil || i != 3 {
		t.Errorf("Add = %d, %v; want 3", i, err)
	}
	if tb.Remove(LinkLocal(mac)) {
		t.Error("default GID removed")
	}
	if _, ok := tb.Lookup(-1); ok {
		t.Error("Lookup(-1) valid")
	}
	if _, ok := tb.Lookup(DefaultSize + 5); ok {
		t.Error("Lookup(out of range) valid")
	}
	if calls != 5 {
		t.Errorf("OnChange called %d times, want 5", calls)
	}
	// An unchanged Sync does not notify.
	_ = tb.Sync(addrs("198.51.100.1", "203.0.113.7", "2001:db8::20"))
	if calls != 5 {
		t.Errorf("unchanged Sync notified")
	}
}

func TestFull(t *testing.T) {
	tb := New(mac, 3)
	err := tb.Sync(addrs("192.0.2.1", "192.0.2.2", "192.0.2.3"))
	if err == nil {
		t.Fatal("no ErrFull")
	}
	if len(tb.Entries()) != 3 {
		t.Fatalf("entries %v", tb.Entries())
	}
	if _, err := tb.Add(netip.MustParseAddr("192.0.2.9")); err == nil {
		t.Fatal("Add into a full table succeeded")
	}
}
