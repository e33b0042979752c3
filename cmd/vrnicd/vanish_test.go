package main

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link/linktest"
)

// The interface going away under a running daemon (ip link del) stops it
// with a logged error, exit status 1 and its socket removed.
func TestLinkVanishes(t *testing.T) {
	linktest.RequireRoot(t)
	ns := linktest.NewNS(t, "vdx")
	other := linktest.NewNS(t, "vdy")
	veth, peer := linktest.UniqueName("vx"), linktest.UniqueName("vy")
	linktest.VethPair(t, ns, veth, other, peer)
	dir := t.TempDir()
	tap := linktest.UniqueName("vt")
	for _, tt := range []struct{ name, iface, del string }{
		{"raw", veth, veth},
		{"tap", "tap:" + tap, tap},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sock := filepath.Join(dir, tt.name+".sock")
			d := startDaemon(t, ns, nil, "--iface", tt.iface, "--socket", sock)
			ns.Exec(t, "ip", "link", "del", tt.del)
			code, ok := d.wait(5 * time.Second)
			if !ok || code != exitFail {
				t.Fatalf("after the link went: exited=%v status %d", ok, code)
			}
			if r, _ := d.log.waitRecord(t, 0, "the interface is gone; the device is lost and vrnicd stops", time.Second); r["level"] != "ERROR" {
				t.Fatalf("record %v", r)
			}
			if exists(sock) {
				t.Error("socket left behind")
			}
		})
	}
}
