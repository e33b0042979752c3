package cabi

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link/linktest"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// realDaemons runs two vrnicd processes in raw mode on the two ends of a
// veth pair, each in its own network namespace (198.51.100.1 and .2), as
// users run it, and returns a tool for each side.
func realDaemons(t *testing.T) [2]tool {
	t.Helper()
	linktest.RequireRoot(t)
	lib := filepath.Dir(ourLib(t))
	bin := buildGoTool(t, "vrnicd")
	nsA, nsB := linktest.NewNS(t, "cabA"), linktest.NewNS(t, "cabB")
	linktest.VethPair(t, nsA, "vcab0", nsB, "vcab1")
	nsA.Exec(t, "ip", "addr", "add", "198.51.100.1/24", "dev", "vcab0")
	nsB.Exec(t, "ip", "addr", "add", "198.51.100.2/24", "dev", "vcab1")
	dir := t.TempDir()
	var tl [2]tool
	for i, x := range []struct {
		ns    *linktest.NS
		iface string
	}{{nsA, "vcab0"}, {nsB, "vcab1"}} {
		tl[i] = startVrnicd(t, bin, lib, dir, x.ns, x.iface)
	}
	return tl
}

// startVrnicd runs the vrnicd binary bin on iface in ns (raw mode, or TAP
// mode for "tap:NAME"), with more flags extra, its socket and log in dir,
// until the test ends (killed by PID), and returns a tool for it.
func startVrnicd(t *testing.T, bin, lib, dir string, ns *linktest.NS, iface string, extra ...string) tool {
	t.Helper()
	name := strings.TrimPrefix(iface, "tap:")
	sock := filepath.Join(dir, name+".sock")
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns.Name, bin, "--iface", iface, "--socket", sock}, extra...)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("vrnicd %s's counters: %s", iface, daemonCounters(sock))
			// The goroutines of a daemon that may be stuck, in its log.
			_ = cmd.Process.Signal(syscall.SIGQUIT)
			time.Sleep(time.Second)
		}
		_ = cmd.Process.Kill() // by PID: ours
		_ = cmd.Wait()
		log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("vrnicd %s:\n%s", iface, b)
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(log.Name())
			t.Fatalf("vrnicd on %s made no socket in 15 s:\n%s", iface, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return tool{lib, sock, ns.Name}
}

// Debian's programs on vrnicd processes over a real link: what a user runs.
func TestProgramsOnRealDaemons(t *testing.T) {
	needProgram(t, "ibv_rc_pingpong", "ibverbs-utils")
	needProgram(t, "ib_write_bw", "perftest")
	tl := realDaemons(t)
	out, err := tl[0].run(t, 10*time.Second, "ibv_devinfo")
	if err != nil || !strings.Contains(out, "PORT_ACTIVE") {
		t.Fatalf("ibv_devinfo: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		prog string
		args []string
	}{
		{"ibv_rc_pingpong", []string{"-n", "500", "-s", "4096", "-c"}},
		{"ibv_ud_pingpong", []string{"-n", "500", "-s", "1000", "-c", "-e"}},
		{"ibv_srq_pingpong", []string{"-n", "500", "-q", "4", "-s", "4096", "-c"}},
		{"ib_write_bw", []string{"-s", "65536", "-n", "1000"}},
		{"ib_read_bw", []string{"-s", "65536", "-n", "500", "--use_old_post_send"}},
		{"ib_send_bw", []string{"-s", "64", "-n", "5000"}},
		{"ib_write_lat", []string{"-s", "8", "-n", "1000"}},
		{"ib_send_lat", []string{"-s", "8", "-n", "1000"}},
	} {
		t.Run(tc.prog+strings.Join(tc.args, ""), func(t *testing.T) {
			gid := "-g"
			if strings.HasPrefix(tc.prog, "ib_") {
				gid = "-x"
			}
			srv := append([]string{tc.prog, gid, "1"}, tc.args...)
			srvOut, cliOut := runPair(t, tl[0], tl[1], 90*time.Second, srv, func(port string) []string {
				return append(append([]string{tc.prog, "-p", port, gid, "1"}, tc.args...), "198.51.100.1")
			})
			if strings.HasPrefix(tc.prog, "ibv_") {
				checkPingpong(t, srvOut, cliOut, 500)
				t.Logf("%s", ppIters.FindString(cliOut))
				return
			}
			checkPerftest(t, tc.prog, tc.args, srvOut, cliOut)
			t.Logf("%s%s", bwLine.FindString(cliOut), latLine.FindString(cliOut))
		})
	}
}

// linkLocalGID is a device's GID 0, its IPv6 link-local address (vrnicd's
// GID table is laid out as kernel rxe's).
func linkLocalGID(t *testing.T, tl tool) string {
	t.Helper()
	out, err := tl.run(t, 10*time.Second, "ibv_devinfo", "-v")
	if err != nil {
		t.Fatalf("ibv_devinfo: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`GID\[\s*0\]:\s+(fe80:[0-9a-f:]+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no link-local GID 0:\n%s", out)
	}
	return m[1]
}

// waitLinkLocal waits until iface in ns has addr as a link-local address
// that has finished duplicate address detection (getaddrinfo and the
// kernel's neighbour discovery need it).
func waitLinkLocal(t *testing.T, ns, iface, addr string) {
	t.Helper()
	want := net.ParseIP(addr)
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := exec.Command("ip", "netns", "exec", ns, "ip", "-6", "-o", "addr", "show", "dev", iface, "scope", "link").CombinedOutput()
		for _, l := range strings.Split(string(out), "\n") {
			f := strings.Fields(l)
			for i := range f {
				if f[i] == "inet6" && i+1 < len(f) {
					if ip, _, err := net.ParseCIDR(f[i+1]); err == nil && ip.Equal(want) && !strings.Contains(l, "tentative") {
						return
					}
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s in %s has no usable %s:\n%s", iface, ns, addr, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Debian's rping under the drop-in librdmacm between two vrnicd processes
// on a real link (raw mode on a veth pair, each end in its namespace): over
// IPv4, and over the IPv6 link-local GID (the daemon's GID 0, the
// interface's own fe80:: address), written scoped as users write it,
// fe80::…%vcab0 for the server in its namespace and %vcab1 for the client
// in the other. 64, 4096 and 65535 bytes, validated, every ping checked.
func TestRdmacmOnRealDaemons(t *testing.T) {
	needProgram(t, "rping", "rdmacm-utils")
	tl := realDaemons(t)
	ourRdmacm(t)
	ctl := buildGoTool(t, "vrnicctl")
	ll := linkLocalGID(t, tl[0])
	waitLinkLocal(t, tl[0].ns, "vcab0", ll)
	waitLinkLocal(t, tl[1].ns, "vcab1", linkLocalGID(t, tl[1]))
	for _, fam := range []struct{ name, srv, cli string }{
		{"ipv4", "198.51.100.1", "198.51.100.1"},
		{"ipv6 link-local", ll + "%vcab0", ll + "%vcab1"},
	} {
		for _, r := range []struct{ count, size int }{{20, 64}, {20, 4096}, {5, 65535}} {
			t.Run(fmt.Sprintf("%s/%d", fam.name, r.size), func(t *testing.T) {
				c, s := strconv.Itoa(r.count), strconv.Itoa(r.size)
				srv := []string{"rping", "-s", "-a", fam.srv, "-C", c, "-S", s, "-v", "-V"}
				srvOut, cliOut := runPair(t, tl[0], tl[1], 60*time.Second, srv, func(port string) []string {
					return []string{"rping", "-c", "-p", port, "-a", fam.cli, "-C", c, "-S", s, "-v", "-V"}
				})
				rpingBoth(r.count, r.size)(t, srvOut, cliOut)
				// The server's daemon keeps the connection in timewait:
				// its addresses say which GID carried it.
				out, err := exec.Command(ctl, "cm", "--json", "--socket", tl[0].socket).Output()
				var doc struct {
					CM []struct {
						State string `json:"state"`
						Local string `json:"local_addr"`
						Peer  string `json:"peer_addr"`
					} `json:"cm"`
				}
				if err != nil || json.Unmarshal(out, &doc) != nil {
					t.Fatalf("vrnicctl cm --json: %v\n%s", err, out)
				}
				ok := false
				for _, c := range doc.CM {
					ipv6 := strings.Contains(c.Local, "fe80:") && strings.Contains(c.Peer, "fe80:")
					ok = ok || ipv6 == strings.HasPrefix(fam.name, "ipv6")
				}
				if !ok {
					t.Fatalf("no %s connection in the daemon's CM table:\n%s", fam.name, out)
				}
			})
		}
	}
}

// Debian's programs through a link outage: A's interface goes down for
// 200 ms while ibv_rc_pingpong (buffers checked, -c) and ib_write_bw run
// between the two daemons, within their retry budgets (timeout 14, retry
// count 7: 8 tries of 67 ms); both finish every iteration. The outage
// comes once the programs' traffic flows (A has taken a thousand frames
// more than before the run: far more than the TCP exchange), and it must
// have ended before the client did, or it proved nothing. Timed by
// traffic, not by the clock, the case holds on a loaded machine, where
// starting the programs may take longer than the whole run takes here
// (about 1.5 s and 2 s).
func TestProgramsAcrossLinkFlap(t *testing.T) {
	needProgram(t, "ibv_rc_pingpong", "ibverbs-utils")
	needProgram(t, "ib_write_bw", "perftest")
	tl := realDaemons(t)
	for _, tc := range []struct {
		prog  string
		args  []string
		iters int
	}{
		{"ibv_rc_pingpong", []string{"-n", "30000", "-s", "4096", "-c"}, 30000},
		{"ib_write_bw", []string{"-s", "65536", "-n", "10000"}, 10000},
	} {
		t.Run(tc.prog, func(t *testing.T) {
			gid := "-g"
			if strings.HasPrefix(tc.prog, "ib_") {
				gid = "-x"
			}
			flapped := make(chan time.Time, 1)
			base := rxPackets(t, tl[0].ns, "vcab0")
			go func() {
				for deadline := time.Now().Add(60 * time.Second); rxPackets(t, tl[0].ns, "vcab0") < base+1000; time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Errorf("no traffic on vcab0 in 60 s")
						flapped <- time.Now()
						return
					}
				}
				err := exec.Command("ip", "-n", tl[0].ns, "link", "set", "vcab0", "down").Run()
				time.Sleep(200 * time.Millisecond)
				if err2 := exec.Command("ip", "-n", tl[0].ns, "link", "set", "vcab0", "up").Run(); err == nil {
					err = err2
				}
				if err != nil {
					t.Errorf("flapping vcab0: %v", err)
				}
				flapped <- time.Now()
			}()
			srv := append([]string{tc.prog, gid, "1"}, tc.args...)
			srvOut, cliOut := runPair(t, tl[0], tl[1], 90*time.Second, srv, func(port string) []string {
				return append(append([]string{tc.prog, "-p", port, gid, "1"}, tc.args...), "198.51.100.1")
			})
			done := time.Now()
			if up := <-flapped; up.After(done) {
				t.Fatalf("the run ended before the link was up again (%v early): raise the iterations", up.Sub(done))
			}
			if strings.HasPrefix(tc.prog, "ibv_") {
				checkPingpong(t, srvOut, cliOut, tc.iters)
				t.Logf("%s", ppIters.FindString(cliOut))
				return
			}
			checkPerftest(t, tc.prog, tc.args, srvOut, cliOut)
			t.Logf("%s", bwLine.FindString(cliOut))
		})
	}
}

// rxPackets is the frames dev in namespace ns has received (ip -s link's
// stats64), 0 if ip cannot say.
func rxPackets(t *testing.T, ns, dev string) uint64 {
	out, err := exec.Command("ip", "-n", ns, "-j", "-s", "link", "show", dev).Output()
	if err != nil {
		return 0
	}
	var links []struct {
		Stats64 struct {
			RX struct {
				Packets uint64 `json:"packets"`
			} `json:"rx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		t.Errorf("ip -s link show %s: %v\n%s", dev, err, out)
		return 0
	}
	return links[0].Stats64.RX.Packets
}

// fiRow is a row of fi_pingpong's table: size, iterations sent and acked.
var fiRow = regexp.MustCompile(`(?m)^(\S+)\s+(\d+)\s+=(\d+)\s+\S+\s+[0-9.]+s\s+[0-9.]+`)

// libfabric's verbs provider (Debian's libfabric 1.17) over the drop-in
// libraries: fi_pingpong, data checked (-c), both ends on vrnicd processes.
// Its MSG endpoint connects through rdma_cm (a passive endpoint bound to
// "localhost" that must take the device's address, RDMA_MAX_RESP_RES and
// RDMA_MAX_INIT_DEPTH in rdma_conn_param); DGRAM is UD; RDM is ofi_rxm
// over MSG, whose CQ of 256 × FI_UNIVERSE_SIZE entries must fit max_cqe
// (the default universe of 1024 fails on kernel rxe as here: 262144 CQEs).
func TestLibfabricPingpong(t *testing.T) {
	needProgram(t, "fi_pingpong", "libfabric-bin")
	tl := realDaemons(t)
	ourRdmacm(t)
	for _, tc := range []struct {
		ep      string
		maxSize string // the largest size of its table
	}{{"msg", "1m"}, {"rdm", "1m"}, {"dgram", "1k"}} {
		t.Run(tc.ep, func(t *testing.T) {
			t.Setenv("FI_UNIVERSE_SIZE", "256")
			args := []string{"fi_pingpong", "-p", "verbs", "-e", tc.ep, "-I", "100", "-c"}
			srvOut, cliOut := runPair(t, tl[1], tl[0], 60*time.Second, args, func(port string) []string {
				return append(slices.Clone(args), "-P", port, "198.51.100.2")
			})
			for who, out := range map[string]string{"server": srvOut, "client": cliOut} {
				rows := fiRow.FindAllStringSubmatch(out, -1)
				if len(rows) < 3 || rows[len(rows)-1][1] != tc.maxSize {
					t.Fatalf("%s: %d rows, want sizes up to %s:\n%s", who, len(rows), tc.maxSize, out)
				}
				for _, r := range rows {
					if r[2] != "100" || r[3] != "100" {
						t.Fatalf("%s: size %s: %s sent, %s acked, want 100:\n%s", who, r[1], r[2], r[3], out)
					}
				}
			}
			t.Logf("client:\n%s", cliOut)
		})
	}
}

// daemonCounters is the device counters of the daemon at sock that are not
// zero (vrnicctl stat's), or why it could not say.
func daemonCounters(sock string) string {
	d, err := verbs.Open(sock)
	if err != nil {
		return err.Error()
	}
	defer d.Close()
	st, err := d.Stats()
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, c := range st.Device {
		if c.Value != 0 {
			fmt.Fprintf(&b, " %s=%d", c.Name, c.Value)
		}
	}
	return b.String()
}
