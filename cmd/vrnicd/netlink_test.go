package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link/linktest"
)

// A second vrnicd starting in a namespace where one runs makes the first
// log no netlink warning (vishvananda/netlink's neighbour subscription
// with ListExisting made every running daemon log two "Wrong sender
// portid" warnings for the newcomer's dump).
func TestTwoDaemonsOneNamespaceNoNetlinkWarning(t *testing.T) {
	linktest.RequireRoot(t)
	ns, peer := linktest.NewNS(t, "vnl"), linktest.NewNS(t, "vnp")
	a1, b1 := linktest.UniqueName("na"), linktest.UniqueName("nb")
	a2, b2 := linktest.UniqueName("na"), linktest.UniqueName("nb")
	linktest.VethPair(t, ns, a1, peer, b1)
	linktest.VethPair(t, ns, a2, peer, b2)
	ns.Exec(t, "ip", "addr", "add", "198.51.100.1/24", "dev", a1)
	ns.Exec(t, "ip", "addr", "add", "203.0.113.1/24", "dev", a2)
	dir := t.TempDir()
	first := startDaemon(t, ns, nil, "--iface", a1, "--socket", filepath.Join(dir, "1.sock"), "--name", "nl1")
	from := first.log.Len()
	second := startDaemon(t, ns, nil, "--iface", a2, "--socket", filepath.Join(dir, "2.sock"), "--name", "nl2")
	time.Sleep(500 * time.Millisecond)
	for _, d := range []*daemonProc{first, second} {
		log := d.log.String()
		if d == first {
			log = log[from:]
		}
		if strings.Contains(log, "netlink") || strings.Contains(log, `"level":"WARN"`) {
			t.Errorf("a daemon warned when the other started:\n%s", log)
		}
	}
}
