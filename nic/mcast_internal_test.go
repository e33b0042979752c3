package nic

import (
	"net/netip"
	"testing"

	"github.com/vrnic/vrnicd/nic/gid"
)

// The datapath's byte test agrees with IsMulticastGID.
func TestIsMcastBytes(t *testing.T) {
	for _, s := range []string{"239.1.2.3", "224.0.0.1", "223.255.255.255", "240.0.0.1", "192.0.2.1",
		"ff02::1", "ff0e::db8:7", "fe80::1", "2001:db8::1", "::", "::e000:1"} {
		g := gid.FromAddr(netip.MustParseAddr(s))
		b := [16]byte(g)
		if got, want := isMcastBytes(&b), IsMulticastGID(g); got != want {
			t.Errorf("%s: %v, IsMulticastGID %v", s, got, want)
		}
	}
}
