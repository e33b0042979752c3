package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link/linktest"
)

// TestQuietStop: a raw-mode daemon stopped with SIGTERM exits 0 and logs
// no WARN or ERROR record on the way down (the netlink subscriptions'
// ends are part of the stop, not faults).
func TestQuietStop(t *testing.T) {
	linktest.RequireRoot(t)
	ns, other := linktest.NewNS(t, "vqa"), linktest.NewNS(t, "vqb")
	veth, peer := linktest.UniqueName("qa"), linktest.UniqueName("qb")
	linktest.VethPair(t, ns, veth, other, peer)
	ns.Exec(t, "ip", "addr", "add", "192.0.2.1/24", "dev", veth)
	sock := filepath.Join(t.TempDir(), "q.sock")
	d := startDaemon(t, ns, nil, "--iface", veth, "--socket", sock)
	d.signal(syscall.SIGTERM)
	if code, ok := d.wait(5 * time.Second); !ok || code != exitOK {
		t.Fatalf("after SIGTERM: exited=%v status %d", ok, code)
	}
	d.log.waitRecord(t, 0, "stopped", time.Second)
	for _, line := range strings.Split(d.log.String(), "\n") {
		var r record
		if json.Unmarshal([]byte(line), &r) != nil {
			continue
		}
		if lv := r["level"]; lv == "WARN" || lv == "ERROR" {
			t.Errorf("a clean stop logged %s: %s", lv, line)
		}
	}
}
