package interop_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestInteropLinkFlap: the link between vrnicd and the kernel rxe peer goes
// down and up while Debian's ib_write_bw runs on each side (the host's
// under the drop-in libibverbs), each way: vrnicd's TAP is set down for
// flapOutage once traffic flows, well within both requesters' retry budgets
// (perftest's -u 14 and retry count 7: 8 tries of 67 ms), and both
// programs finish the whole run. vrnicd's port went DOWN and ACTIVE again
// (its log), and it did not exit.
func TestInteropLinkFlap(t *testing.T) {
	libDir := dropinLib(t)
	progs := dropinPrograms(t)
	b := newBed(t, bedConfig{name: "linkflap", linkMTU: 1500, pathMTU: 1024, gids: []gidKind{gidIPv4}, impaired: true})
	b.vm.Impair.Clear() // the impairment link forwards everything
	b.cfg.impaired = false
	d := &dropin{bed: b, libDir: libDir, progs: progs}
	c := dropinCase{prog: "ib_write_bw", args: []string{"-s", "65536", "-n", strconv.Itoa(flapIters), "-F"}, iters: flapIters}
	for _, ks := range []bool{true, false} {
		t.Run(direction(ks), func(t *testing.T) { d.flap(t, c, ks) })
	}
}

const (
	flapIters   = 1000 // 65 MB: seconds for the guest under TCG
	flapTraffic = 2000 // packets through vrnicd before the outage, and after it
	flapOutage  = 200 * time.Millisecond
)

func (d *dropin) flap(t *testing.T, c dropinCase, kernelServer bool) {
	timeout := d.caseTimeout()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	kcmd := fmt.Sprintf("%s -d rxe0 -x %d %s", c.prog, d.vm.GIDIndex(), strings.Join(c.args, " "))
	hargv := append([]string{"env", "LD_LIBRARY_PATH=" + d.libDir, "VRNICD_SOCKET=" + d.a.socket, "LC_ALL=C",
		d.progs[c.prog], "-x", strconv.Itoa(d.a.gidIPv4)}, c.args...)
	logFrom := d.a.proc.stderr.Len()
	// The outage starts once RoCE traffic flows through vrnicd (its QP's
	// packets counted), so it falls in the transfer, not the setup; pkts
	// is the count when the link was up again.
	type flapDone struct {
		at   time.Time
		pkts uint64
		err  error
	}
	flapped := make(chan flapDone, 1)
	pkts := func() uint64 {
		cs, err := d.a.counters(ctx)
		if err != nil {
			return 0
		}
		return cs["sent_pkts"] + cs["rcvd_pkts"]
	}
	flap := func() {
		start := pkts()
		for pkts() < start+flapTraffic {
			select {
			case <-ctx.Done():
				flapped <- flapDone{err: fmt.Errorf("no RoCE traffic to flap the link under: %w", ctx.Err())}
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
		err := d.n.IP("link", "set", d.a.tap, "down")
		if err == nil {
			time.Sleep(flapOutage)
			err = d.n.IP("link", "set", d.a.tap, "up")
		}
		flapped <- flapDone{at: time.Now(), pkts: pkts(), err: err}
	}
	kern, ours, err := d.runSides(ctx, t, kcmd, hargv, kernelServer, func() { go flap() })
	if err != nil {
		t.Fatal(err)
	}
	ended := time.Now()
	kern.who, ours.who = "guest (kernel rxe) "+kcmd, "host (drop-in on vrnicd) "+strings.Join(hargv[4:], " ")
	f := <-flapped
	if f.err != nil {
		t.Fatalf("%v\n%s\n%s", f.err, kern, ours)
	}
	if !kern.ok() || !ours.ok() {
		t.Fatalf("a side failed across the outage\n%s\n%s", kern, ours)
	}
	figs, err := checkDropin(c, kern, ours, kernelServer)
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, kern, ours)
	}
	for _, msg := range []string{"port DOWN: the interface is admin down; QPs wait for it (RC retransmits on its timer and retry count)",
		"port ACTIVE: the interface is up"} {
		if _, _, ok := d.a.proc.stderr.Wait(logFrom, time.Second, func(l string) bool {
			var r map[string]any
			return json.Unmarshal([]byte(l), &r) == nil && r["msg"] == msg
		}); !ok {
			t.Fatalf("no %q in vrnicd's log:\n%s", msg, tailLines(d.a.proc.stderr.String(), 30))
		}
	}
	if d.a.proc.exited() {
		t.Fatal("vrnicd exited")
	}
	cs, err := d.a.counters(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The transfer went on after the outage: it was in the middle.
	if after := cs["sent_pkts"] + cs["rcvd_pkts"]; !f.at.Before(ended) || after < f.pkts+flapTraffic {
		t.Fatalf("the outage was not in the middle of the run: up again %v before the end, %d packets after it", ended.Sub(f.at), after-f.pkts)
	}
	t.Logf("%s; vrnicd: retransmit_timeouts %d, retransmitted_pkts %d; %d packets after the outage", figs,
		cs["retransmit_timeouts"], cs["retransmitted_pkts"], cs["sent_pkts"]+cs["rcvd_pkts"]-f.pkts)
}
