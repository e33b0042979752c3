package main

import (
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link/linktest"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// vrnicd on a TAP in one namespace, bridged to a veth whose far end sits in
// a second namespace: sd_notify, the ready line, ping over IPv4 and IPv6,
// RoCEv2 frames reaching the receive path (counters and pcap), SIGHUP
// (log level, a new address), the pcap read back by vrnicctl decode, and
// SIGTERM (exit 0 within 2 s, TAP and socket gone, STOPPING=1). Each stage
// is a subtest, so that one failing does not hide the next ones; only the
// start and the exit, which the rest stands on, end the test.
func TestTAPDaemon(t *testing.T) {
	linktest.RequireRoot(t)
	_, vrnicctl := binaries(t)
	nsD := linktest.NewNS(t, "vdd")
	nsP := linktest.NewNS(t, "vdp")
	tap, br := linktest.UniqueName("vt"), linktest.UniqueName("vb")
	vd, vp := linktest.UniqueName("vd"), linktest.UniqueName("vp")
	linktest.BridgedVeth(t, nsD, br, vd, nsP, vp)
	nsP.Exec(t, "ip", "addr", "add", "192.0.2.20/24", "dev", vp)
	nsP.Exec(t, "ip", "addr", "add", "2001:db8::20/64", "dev", vp, "nodad")

	dir := t.TempDir()
	sock := filepath.Join(dir, "run", "vrnicd.sock")
	pcap := filepath.Join(dir, "roce.pcap")
	cfg := filepath.Join(dir, "vrnicd.toml")
	extra := ""
	writeConfig := func(t *testing.T, level string, ips ...string) {
		q := make([]string, len(ips))
		for i, ip := range ips {
			q[i] = `"` + ip + `"`
		}
		body := "iface = \"tap:" + tap + "\"\nlog_level = \"" + level + "\"\nip = [" + strings.Join(q, ", ") + "]\n" + extra
		if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeConfig(t, "info", "192.0.2.10/24", "2001:db8::10/64")
	notify := newNotifySocket(t)

	d := startDaemon(t, nsD, []string{"NOTIFY_SOCKET=" + notify.path}, "--config", cfg, "--socket", sock, "--pcap", pcap)

	if !t.Run("ready", func(t *testing.T) {
		tapReady(t, d, notify, nsD, tap, br, sock)
	}) {
		return
	}
	t.Run("ping", func(t *testing.T) {
		for _, a := range []string{"192.0.2.10", "2001:db8::10"} {
			if out, err := nsP.TryExec("ping", "-c", "1", "-W", "3", a); err != nil {
				t.Fatalf("ping %s: %v\n%s", a, err, out)
			}
		}
	})
	p := newPeer(t, nsP, vp)
	t.Run("roce", func(t *testing.T) { tapRoCE(t, d, p, pcap) })
	t.Run("sighup", func(t *testing.T) {
		// SIGHUP: the log level and a new address come from the file. A
		// client's failed request is logged at debug level.
		// (The client is gone before the reload: verbsock/server has a data
		// race between its hello and the GID-change event the reload sends.)
		badRequest := func() {
			client, err := verbs.Open(sock)
			if err != nil {
				t.Fatalf("client: %v", err)
			}
			defer client.Close()
			if _, err := client.AllocPD(); err != nil { // an object: its disconnect is logged at info
				t.Fatal(err)
			}
			if _, err := client.QueryGID(1, 5000); err == nil {
				t.Fatal("QueryGID of index 5000 succeeded")
			}
		}
		from := d.log.Len()
		badRequest()
		d.log.waitRecord(t, from, "verbsock client disconnected", 5*time.Second)
		d.counters() // records are written in order: any debug record is in by now
		if strings.Contains(d.log.String(), `"level":"DEBUG"`) {
			t.Fatal("debug records at log level info")
		}
		from = d.log.Len()
		// A bad file changes nothing.
		extra = "mtu = \"big\"\n"
		writeConfig(t, "debug", "192.0.2.10/24")
		d.signal(syscall.SIGHUP)
		if r, _ := d.log.waitRecord(t, from, "reload failed; the running configuration stays", 5*time.Second); !strings.Contains(recordString(r, "err"), "mtu (line 4)") {
			t.Fatalf("reload error %v", r)
		}
		for _, want := range []string{"RELOADING=1", "READY=1"} {
			if m := notify.next(t, 5*time.Second); m != want {
				t.Fatalf("reload notification %q, want %s", m, want)
			}
		}
		// The pcap is rotated away (logrotate's create mode) at the same time;
		// the MTU cannot change while running, and says so.
		from = d.log.Len()
		extra = "mtu = 9000\n"
		writeConfig(t, "debug", "192.0.2.10/24", "192.0.2.11/24", "2001:db8::10/64")
		if err := os.Rename(pcap, pcap+".1"); err != nil {
			t.Fatal(err)
		}
		d.signal(syscall.SIGHUP)
		tapReloaded(t, d, from, pcap)
		p.sendRC(t, netip.MustParseAddr("192.0.2.11"), 0x11, 2)
		for _, want := range []string{"RELOADING=1", "READY=1"} {
			if m := notify.next(t, 5*time.Second); m != want {
				t.Fatalf("reload notification %q, want %s", m, want)
			}
		}
		if out, err := nsP.TryExec("ping", "-c", "1", "-W", "3", "192.0.2.11"); err != nil {
			t.Fatalf("ping the address added by SIGHUP: %v\n%s", err, out)
		}
		from = d.log.Len()
		badRequest()
		if r, _ := d.log.waitRecord(t, from, "verbsock request failed", 5*time.Second); r["level"] != "DEBUG" {
			t.Fatalf("record %v", r)
		}
	})
	if !t.Run("sigterm", func(t *testing.T) { tapSIGTERM(t, d, notify, nsD, tap, sock) }) {
		return
	}
	t.Run("pcaps", func(t *testing.T) { tapPcaps(t, vrnicctl, pcap) })
}

// tapReady checks TestTAPDaemon's start: READY=1 once the socket is there,
// the ready line, the TAP (then put on the bridge).
func tapReady(t *testing.T, d *daemonProc, notify *notifySocket, nsD *linktest.NS, tap, br, sock string) {
	// READY=1 only once the socket is there.
	if m := notify.next(t, 5*time.Second); m != "READY=1" {
		t.Fatalf("first notification %q, want READY=1", m)
	}
	if !exists(sock) {
		t.Fatal("READY=1 arrived before the socket existed")
	}
	// The ready line tells what a user needs.
	r := d.ready
	if recordString(r, "iface") != tap || recordString(r, "mode") != "tap" || recordString(r, "socket") != sock ||
		r["mtu"] != 1500.0 || r["active_mtu"] != 1024.0 || recordString(r, "mac") != stableMAC(tap).String() {
		t.Fatalf("ready line %v", r)
	}
	for _, g := range []string{"1=::ffff:192.0.2.10", "2=2001:db8::10"} {
		if !hasField(recordString(r, "gids"), g) {
			t.Errorf("ready line GIDs %q lack %s", r["gids"], g)
		}
	}
	if !ifaceExists(nsD, tap) {
		t.Fatal("no TAP")
	}
	nsD.Exec(t, "ip", "link", "set", tap, "master", br)
}

// tapRoCE sends RoCEv2 to the daemon: no QP 0x11 exists, so each one
// reaches the device and is dropped there, counted; the pcap is flushed
// while the daemon runs.
func tapRoCE(t *testing.T, d *daemonProc, p *peer, pcap string) {
	p.sendRC(t, netip.MustParseAddr("192.0.2.10"), 0x11, 5)
	p.sendRC(t, netip.MustParseAddr("2001:db8::10"), 0x11, 3)
	var ns, dev map[string]float64
	if !waitUntil(5*time.Second, func() bool {
		ns, dev = d.counters()
		return ns["roce_in"] >= 8 && dev["rcvd_dropped"] >= 8
	}) {
		t.Fatalf("RoCEv2 frames did not reach the device: netstack %v device %v", ns, dev)
	}
	if ns["icrc_errors"] != 0 || ns["arp_requests_in"] == 0 || ns["echo_replies"] < 2 {
		t.Errorf("netstack counters %v", ns)
	}
	// The pcap is flushed while the daemon runs.
	var nFrames int
	if !waitUntil(3*time.Second, func() bool { nFrames, _ = countPcap(pcap); return nFrames >= 8 }) {
		t.Fatalf("pcap has %d frames while running, want ≥ 8", nFrames)
	}
}

// tapReloaded checks the second reload's summary, and the log record of
// the restart-only MTU change.
func tapReloaded(t *testing.T, d *daemonProc, from int, pcap string) {
	rr, _ := d.log.waitRecord(t, from, "reloaded", 5*time.Second)
	applied := recordString(rr, "applied")
	if !hasField(applied, "log_level=debug") || !hasField(applied, "ip") || !hasField(applied, "pcap="+pcap) {
		t.Fatalf("reload applied %q", applied)
	}
	if r, _ := d.log.waitRecord(t, from, "setting changed; it takes effect at restart", time.Second); r["key"] != "mtu" || r["running"] != 1500.0 || r["configured"] != 9000.0 {
		t.Fatalf("restart-only change logged as %v", r)
	}
	if rr["mtu"] != 1500.0 {
		t.Fatalf("after reload the summary says MTU %v", rr["mtu"])
	}
}

// tapSIGTERM: exit 0, TAP and socket gone, STOPPING=1.
func tapSIGTERM(t *testing.T, d *daemonProc, notify *notifySocket, nsD *linktest.NS, tap, sock string) {
	// SIGTERM.
	t0 := time.Now()
	d.signal(syscall.SIGTERM)
	code, ok := d.wait(5 * time.Second)
	took := time.Since(t0)
	if !ok || code != 0 {
		t.Fatalf("after SIGTERM: exited=%v status %d", ok, code)
	}
	if took > 2*time.Second {
		t.Errorf("SIGTERM to exit took %v; the limit is 2 s", took)
	}
	t.Logf("SIGTERM to exit: %v", took)
	if ifaceExists(nsD, tap) {
		t.Error("TAP still there after exit")
	}
	if exists(sock) {
		t.Error("socket still there after exit")
	}
	if m := notify.next(t, time.Second); m != "STOPPING=1" {
		t.Errorf("shutdown notification %q, want STOPPING=1", m)
	}
}

// tapPcaps: every frame of both pcaps decodes, with a good ICRC: 8 before
// the rotation, 2 (to the new address) after.
func tapPcaps(t *testing.T, vrnicctl, pcap string) {
	var recs []map[string]any
	for _, f := range []struct {
		path string
		min  int
	}{{pcap + ".1", 8}, {pcap, 2}} {
		out, err := exec.Command(vrnicctl, "decode", "--json", f.path).CombinedOutput()
		if err != nil {
			t.Fatalf("vrnicctl decode: %v\n%s", err, out)
		}
		var doc struct{ Packets []map[string]any }
		if err := json.Unmarshal(out, &doc); err != nil || len(doc.Packets) < f.min {
			t.Fatalf("vrnicctl decode %s: %v, %d packets, want ≥ %d:\n%s", f.path, err, len(doc.Packets), f.min, out)
		}
		recs = append(recs, doc.Packets...)
	}
	for _, rec := range recs {
		if rec["icrc"] != "ok" || rec["error"] != nil {
			t.Errorf("pcap packet %v", rec)
		}
	}
}
