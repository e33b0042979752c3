package main

import (
	"io"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link"
	"github.com/vrnic/vrnicd/nic/link/linktest"
)

// TestRunOverVeth runs bw (ring, recvmmsg, fanout) and lat briefly between
// two namespaces and checks frames went through: counts, not speeds.
func TestRunOverVeth(t *testing.T) {
	linktest.RequireRoot(t)
	nsA := linktest.NewNS(t, "lba")
	nsB := linktest.NewNS(t, "lbb")
	va, vb := linktest.UniqueName("va"), linktest.UniqueName("vb")
	linktest.VethPair(t, nsA, va, nsB, vb)
	nsA.Exec(t, "ip", "link", "set", va, "mtu", "9000")
	nsB.Exec(t, "ip", "link", "set", vb, "mtu", "9000")
	a, b := endpoint{nsA.Name, va}, endpoint{nsB.Name, vb}
	for _, c := range []struct {
		name    string
		ring    bool
		version int
		workers int
		spin    bool
	}{{"ring v3", true, 3, 1, false}, {"ring v2", true, 2, 1, false}, {"ring v2 polled", true, 2, 1, true},
		{"recvmmsg", false, 0, 1, false}, {"fanout", true, 3, 2, false}} {
		res, err := runBW(bwOpts{tx: a, rx: b, shape: shapes["write_middle"], payload: 4096,
			dur: 200 * time.Millisecond, warm: 50 * time.Millisecond, samples: 2, batch: 32, qps: 4,
			rxRing: c.ring, ring: link.RingConfig{Version: c.version}, workers: c.workers, spin: c.spin, progress: io.Discard})
		if err != nil {
			t.Fatalf("bw %s: %v", c.name, err)
		}
		if len(res) != 2 || best(res).rxFrames == 0 || best(res).rxB != best(res).rxFrames*4154 {
			t.Errorf("bw %s: samples %+v", c.name, res)
		}
	}
	res, err := runLat(latOpts{a: a, b: b, shape: shapes["write_only"], payload: 8, iters: 50, samples: 1,
		timeout: time.Second, progress: io.Discard})
	if err != nil {
		t.Fatalf("lat: %v", err)
	}
	if len(res) != 1 || res[0].lost == res[0].iters || res[0].mean <= 0 || res[0].min > res[0].p99 {
		t.Errorf("lat: %+v", res)
	}
	// Frames too big for the MTU are refused before anything is sent.
	if _, err := runBW(bwOpts{tx: a, rx: b, shape: shapes["write_middle"], payload: 9000, dur: time.Millisecond,
		samples: 1, batch: 1, qps: 1, progress: io.Discard}); err == nil {
		t.Error("bw with 9000-byte payloads on a 9000-byte MTU: no error")
	}
}
