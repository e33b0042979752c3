package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link/linktest"
)

// unitCaps reads CapabilityBoundingSet= of a unit file.
func unitCaps(t *testing.T, unit string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join("../../systemd", unit))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapabilityBoundingSet="); ok {
			return strings.Fields(v)
		}
	}
	t.Fatalf("%s has no CapabilityBoundingSet", unit)
	return nil
}

// The capabilities each unit grants are enough for its mode: the daemon
// starts, serves and stops cleanly with exactly those (as root, so file
// modes are not the question), and the two sets are the least: the TAP
// unit has one capability, and raw mode without either of its two fails
// (TestBinaryStartErrors).
func TestUnitCapabilitiesSuffice(t *testing.T) {
	linktest.RequireRoot(t)
	ns := linktest.NewNS(t, "vdu")
	other := linktest.NewNS(t, "vdv")
	veth, peer := linktest.UniqueName("vu"), linktest.UniqueName("vv")
	linktest.VethPair(t, ns, veth, other, peer)
	ns.Exec(t, "ip", "addr", "add", "203.0.113.1/24", "dev", veth)
	dir := t.TempDir()
	for _, tt := range []struct {
		unit string
		args []string
	}{
		{"vrnicd.service", []string{"--iface", "tap:" + linktest.UniqueName("vt"), "--ip", "203.0.113.9/24"}},
		{"vrnicd@.service", []string{"--iface", veth}},
	} {
		t.Run(tt.unit, func(t *testing.T) {
			caps := unitCaps(t, tt.unit)
			if tt.unit == "vrnicd.service" && len(caps) != 1 {
				t.Errorf("TAP unit grants %v; CAP_NET_ADMIN is all it needs", caps)
			}
			set := "-all"
			for _, c := range caps {
				set += ",+" + strings.ToLower(strings.TrimPrefix(c, "CAP_"))
			}
			sock := filepath.Join(dir, tt.unit+".sock")
			d := startWrapped(t, ns, []string{"setpriv", "--bounding-set", set, "--inh-caps", "-all"}, nil,
				append([]string{"--socket", sock}, tt.args...)...)
			c, err := dialSeq(sock)
			if err != nil {
				t.Fatalf("socket: %v", err)
			}
			c.Close()
			d.signal(syscall.SIGTERM)
			if code, ok := d.wait(5 * time.Second); !ok || code != 0 {
				t.Fatalf("with %v: exited=%v status %d", caps, ok, code)
			}
			if exists(sock) {
				t.Error("socket left behind")
			}
		})
	}
}
