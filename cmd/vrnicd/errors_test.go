package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link/linktest"
)

// The binary itself, as a user meets it: a bad config gives one line on
// stderr and exit status 2 (no stack trace, nothing on stdout).
func TestBinaryBadConfig(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	for _, tt := range []struct {
		name, body string
		want       []string
	}{
		{"unknown key", "iface = \"tap:v0\"\nsocket_mode = \"0666\"\n", []string{`unknown key "socket_mode" (line 2)`}},
		{"bad value", "iface = \"tap:v0\"\nmtu = 70000\n", []string{"config FILE: mtu: ", "70000 is out of range"}},
		{"bad ip", "iface = \"tap:v0\"\nip = [\"192.0.2.1/33\"]\n", []string{"config FILE: ip: ", `"192.0.2.1/33"`}},
		{"bad mac", "iface = \"tap:v0\"\nmac = \"02:00:00:00:00\"\n", []string{"config FILE: mac: ", `"02:00:00:00:00" is not an Ethernet MAC`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := writeFile(t, tt.body)
			code, stderr := runFail(t, nil, "--config", p, "--socket", sock)
			if code != exitConfig {
				t.Errorf("exit status %d, want %d", code, exitConfig)
			}
			for i, w := range tt.want {
				tt.want[i] = strings.ReplaceAll(w, "FILE", p)
			}
			oneLine(t, stderr, append(tt.want, "config "+p)...)
		})
	}
	if exists(sock) {
		t.Error("a daemon with a bad config left a socket")
	}
}

// A socket a live server answers on is refused before anything else is
// touched; the server's socket stays.
func TestBinarySocketInUse(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "vrnicd.sock")
	liveSocket(t, sock)
	code, stderr := runFail(t, nil, "--iface", "tap:vrnicdtest0", "--socket", sock)
	if code != exitFail {
		t.Errorf("exit status %d, want %d", code, exitFail)
	}
	oneLine(t, stderr, "socket "+sock+" is in use by a running vrnicd")
	if !exists(sock) {
		t.Error("the live server's socket was removed")
	}
}

// Root: a real second vrnicd on a live one's socket, a stale socket
// replaced, a missing interface, a raw-mode MTU that is not the
// interface's, and no privileges (TAP and raw) as nobody.
func TestBinaryStartErrors(t *testing.T) {
	linktest.RequireRoot(t)
	ns := linktest.NewNS(t, "vde")
	other := linktest.NewNS(t, "vdo")
	veth, peer := linktest.UniqueName("ve"), linktest.UniqueName("vo")
	linktest.VethPair(t, ns, veth, other, peer)
	exec := []string{"ip", "netns", "exec", ns.Name}
	dir := mkWorldDir(t)
	sock := filepath.Join(dir, "vrnicd.sock")

	// A stale socket is replaced (and said so).
	staleSocket(t, sock)
	tap := linktest.UniqueName("vt")
	d := startDaemon(t, ns, nil, "--iface", "tap:"+tap, "--socket", sock)
	d.log.waitRecord(t, 0, "replaced a stale socket left by a daemon that is gone", time.Second)
	if c, err := dialSeq(sock); err != nil {
		t.Fatalf("the replaced socket does not answer: %v", err)
	} else {
		c.Close()
	}

	// A second daemon on the live one's socket.
	code, stderr := runFail(t, exec, "--iface", "tap:"+linktest.UniqueName("vt"), "--socket", sock)
	if code != exitFail {
		t.Errorf("socket in use: exit status %d", code)
	}
	oneLine(t, stderr, "socket "+sock+" is in use by a running vrnicd")

	// A second daemon on the first one's TAP.
	code, stderr = runFail(t, exec, "--iface", "tap:"+tap, "--socket", filepath.Join(dir, "b.sock"))
	if code != exitFail {
		t.Errorf("TAP in use: exit status %d", code)
	}
	oneLine(t, stderr, "TAP "+tap+" exists and is in use")
	if exists(filepath.Join(dir, "b.sock")) {
		t.Error("failed start left its socket behind")
	}
	d.signal(syscall.SIGTERM)
	if code, ok := d.wait(5 * time.Second); !ok || code != 0 {
		t.Fatalf("first daemon: exited=%v status %d", ok, code)
	}

	// An unprivileged user meets /dev/net/tun's mode first when it is not
	// world-writable (as in some containers), else TUNSETIFF's EPERM.
	nobodyTAP := []string{"needs CAP_NET_ADMIN", "operation not permitted"}
	if fi, err := os.Stat("/dev/net/tun"); err == nil && fi.Mode().Perm()&0o006 != 0o006 {
		nobodyTAP = []string{"cannot open /dev/net/tun: permission denied"}
	}
	nobody := append(exec, "setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups")
	rootWith := func(caps string) []string {
		return append(exec, "setpriv", "--bounding-set", "-all"+caps, "--inh-caps", "-all")
	}
	sock2 := filepath.Join(dir, "c.sock")
	for _, tt := range []struct {
		name   string
		prefix []string
		args   []string
		code   int
		want   []string
	}{
		{"missing interface", exec, []string{"--iface", "nosuch0"}, exitFail, []string{"interface nosuch0 not found"}},
		{"not a TAP", exec, []string{"--iface", "tap:" + veth}, exitFail, []string{"interface " + veth + " exists and is not a TAP"}},
		{"raw mtu", exec, []string{"--iface", veth, "--mtu", "9000"}, exitConfig, []string{"--mtu 9000 does not match " + veth + "'s MTU 1500"}},
		{"tap as nobody", nobody, []string{"--iface", "tap:" + linktest.UniqueName("vt")}, exitFail, nobodyTAP},
		{"tap without CAP_NET_ADMIN", rootWith(",+net_raw"), []string{"--iface", "tap:" + linktest.UniqueName("vt")}, exitFail,
			[]string{"needs CAP_NET_ADMIN", "operation not permitted"}},
		{"raw as nobody", nobody, []string{"--iface", veth}, exitFail, []string{"raw mode on " + veth + " needs CAP_NET_RAW"}},
		{"raw without CAP_NET_ADMIN", rootWith(",+net_raw"), []string{"--iface", veth}, exitFail,
			[]string{"raw mode on " + veth + " needs CAP_NET_ADMIN as well as CAP_NET_RAW"}},
		{"socket dir not writable", nobody, []string{"--iface", veth, "--socket", "/run/vrnicd-test-" + linktest.UniqueName("x") + "/vrnicd.sock"},
			exitFail, []string{"socket directory /run/vrnicd-test-", "permission denied"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if indexOf(args, "--socket") < 0 {
				args = append(args, "--socket", sock2)
			}
			code, stderr := runFail(t, tt.prefix, args...)
			if code != tt.code {
				t.Errorf("exit status %d, want %d", code, tt.code)
			}
			oneLine(t, stderr, tt.want...)
			if exists(sock2) {
				t.Error("failed start left its socket behind")
				os.Remove(sock2)
			}
		})
	}
	// Kernel rxe (or anything) on UDP 4791 keeps raw mode from guarding it;
	// the error comes after the link is open, which is closed again.
	var busy *net.UDPConn
	if err := ns.Do(func() (err error) {
		busy, err = net.ListenUDP("udp4", &net.UDPAddr{Port: 4791})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	code, stderr = runFail(t, exec, "--iface", veth, "--socket", sock2)
	busy.Close()
	if code != exitFail {
		t.Errorf("UDP 4791 in use: exit status %d", code)
	}
	oneLine(t, stderr, "raw mode on "+veth, "address already in use", "rdma_rxe")
	if exists(sock2) {
		t.Error("failed start left its socket behind")
	}

	if out, _ := ns.TryExec("ip", "-o", "link"); strings.Contains(out, "vt") {
		t.Errorf("a failed start left a TAP behind:\n%s", out)
	}
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}
