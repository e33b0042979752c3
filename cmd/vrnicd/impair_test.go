package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// writeStream sends n RDMA WRITEs of size bytes from a to b, each with a
// fresh pattern, and checks every byte landed (the impairment may drop,
// duplicate, reorder and corrupt frames; RC must deliver each WRITE
// exactly once, intact).
func writeStream(t *testing.T, a, b *e2eEnd, n, size int) {
	t.Helper()
	src, dst := a.buf.Bytes()[:size], b.buf.Bytes()[:size]
	for i := range n {
		for j := range src {
			src[j] = byte(i*31 + j)
		}
		if err := a.qp.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{a.mr.SGE(0, uint64(size))}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		ok(t, a.scq, uint64(i), verbs.WCRDMAWrite)
		if !bytes.Equal(src, dst) {
			t.Fatalf("WRITE %d: the destination differs", i)
		}
	}
}

// TestImpair: `vrnicctl impair` injects loss, duplication, reordering and
// corruption into a daemon's RoCEv2 frames; an RC stream still completes
// every WRITE intact, the port counters show each fault, the peer counts
// the corrupted frames as ICRC errors, devinfo and the log say the port is
// impaired; another user may look but not impair; off ends it (the
// counters stop). A daemon starts with none.
func TestImpair(t *testing.T) {
	n := newE2ENet(t)
	ca, cb := e2eOpen(t, n.sockA, e2eA4, e2eA6), e2eOpen(t, n.sockB, e2eB4, e2eB6)
	a, b := ca.end(verbs.QPTypeRC, nil, 1<<16), cb.end(verbs.QPTypeRC, nil, 1<<16)
	e2eConnect(t, a, b, e2eLink{})
	if out := n.ctl(t, "impair", "--socket", n.sockA); !strings.Contains(out, "impairment: off") {
		t.Fatalf("a new daemon: %q", out)
	}
	out := n.ctl(t, "impair", "--loss", "3", "--dup", "2%", "--reorder", "2", "--corrupt", "1", "--socket", n.sockA)
	if !strings.Contains(out, "impairment: ON, loss 3%, dup 2%, reorder 2%, corrupt 1%, frames both, every QP") {
		t.Fatalf("impair: %q", out)
	}
	n.a.log.waitRecord(t, 0, "port impaired", 5*time.Second)
	if out := n.ctl(t, "devinfo", "--socket", n.sockA); !strings.Contains(out, "impairment: ON") {
		t.Errorf("devinfo does not say the port is impaired:\n%s", out)
	}

	writeStream(t, a, b, 1500, 8192)
	dev, _ := n.e2eStat(t, n.sockA)
	peer, _ := n.e2eStat(t, n.sockB)
	for _, c := range []string{"impair_dropped", "impair_duplicated", "impair_reordered", "impair_corrupted", "retransmitted_pkts"} {
		if dev[c] == 0 {
			t.Errorf("%s 0 after 1500 impaired WRITEs", c)
		}
	}
	if peer["icrc_errors"] == 0 && dev["icrc_errors"] == 0 {
		t.Error("no ICRC error counted for the corrupted frames")
	}
	if dev["local_op_replays"] != 0 || dev["retry_exceeded_err"] != 0 {
		t.Errorf("local_op_replays %d, retry_exceeded_err %d", dev["local_op_replays"], dev["retry_exceeded_err"])
	}
	t.Logf("A: dropped %d duplicated %d reordered %d corrupted %d, retransmitted %d, tlp_probes %d, timeouts %d; B: icrc_errors %d",
		dev["impair_dropped"], dev["impair_duplicated"], dev["impair_reordered"], dev["impair_corrupted"],
		dev["retransmitted_pkts"], dev["tlp_probes"], dev["retransmit_timeouts"], peer["icrc_errors"])

	// Another user who can reach the socket may look, not impair.
	for _, p := range []string{filepath.Dir(filepath.Dir(n.sockA)), filepath.Dir(n.sockA)} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(n.sockA, 0o666); err != nil {
		t.Fatal(err)
	}
	nobody := []string{"setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", n.vrnicctl, "--socket", n.sockA}
	if o, err := exec.Command(nobody[0], append(nobody[1:], "impair", "off")...).CombinedOutput(); err == nil ||
		!strings.Contains(string(o), "neither root nor the daemon's user") {
		t.Errorf("impair off as nobody: %v, %q", err, o)
	}
	if o, err := exec.Command(nobody[0], append(nobody[1:], "impair")...).CombinedOutput(); err != nil ||
		!strings.Contains(string(o), "impairment: ON") {
		t.Errorf("impair (show) as nobody: %v, %q", err, o)
	}

	if out := n.ctl(t, "impair", "off", "--socket", n.sockA); !strings.Contains(out, "impairment: off") {
		t.Fatalf("impair off: %q", out)
	}
	writeStream(t, a, b, 200, 8192)
	after, _ := n.e2eStat(t, n.sockA)
	for _, c := range []string{"impair_dropped", "impair_duplicated", "impair_reordered", "impair_corrupted"} {
		if after[c] != dev[c] {
			t.Errorf("%s went on after off: %d, then %d", c, dev[c], after[c])
		}
	}
	if out := n.ctl(t, "devinfo", "--socket", n.sockA); strings.Contains(out, "impairment") {
		t.Error("devinfo still says impaired after off")
	}

	// Never saved: impaired, then restarted, the daemon has none.
	n.ctl(t, "impair", "--loss", "50", "--socket", n.sockA)
	n.a.signal(syscall.SIGTERM)
	if _, ok := n.a.wait(10 * time.Second); !ok {
		t.Fatal("vrnicd did not stop on SIGTERM")
	}
	n.a = startDaemon(t, n.nsA, nil, n.argsA...)
	if out := n.ctl(t, "impair", "--socket", n.sockA); !strings.Contains(out, "impairment: off") {
		t.Errorf("after a restart: %q", out)
	}
}
