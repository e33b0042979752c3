package cabi

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link/linktest"
)

// mdbPorts lists the bridge ports `bridge mdb show` has for group in ns.
func mdbPorts(t *testing.T, sw *linktest.NS, group string) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", sw.Name, "bridge", "-j", "mdb", "show").Output()
	if err != nil {
		t.Fatalf("bridge mdb show: %v", err)
	}
	var mdb []struct {
		Mdb []struct {
			Port string `json:"port"`
			Grp  string `json:"grp"`
		} `json:"mdb"`
	}
	if err := json.Unmarshal(out, &mdb); err != nil {
		t.Fatalf("bridge -j mdb show: %v\n%s", err, out)
	}
	var ports []string
	for _, b := range mdb {
		for _, e := range b.Mdb {
			if e.Grp == group {
				ports = append(ports, e.Port)
			}
		}
	}
	return ports
}

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// roceCounter counts RoCEv2 frames arriving on iface in ns (an nftables
// netdev ingress rule), for a host that must not get the group's traffic.
func roceCounter(t *testing.T, ns *linktest.NS, iface string) func() int {
	t.Helper()
	ns.Exec(t, "nft", "add", "table", "netdev", "mcount")
	ns.Exec(t, "nft", "add", "chain", "netdev", "mcount", "in",
		fmt.Sprintf("{ type filter hook ingress device %s priority 0; }", iface))
	ns.Exec(t, "nft", "add", "rule", "netdev", "mcount", "in", "udp", "dport", "4791", "counter")
	re := regexp.MustCompile(`counter packets (\d+)`)
	return func() int {
		out, err := exec.Command("ip", "netns", "exec", ns.Name, "nft", "list", "table", "netdev", "mcount").Output()
		if err != nil {
			t.Fatalf("nft list: %v", err)
		}
		m := re.FindStringSubmatch(string(out))
		if m == nil {
			t.Fatalf("no counter in:\n%s", out)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
}

// UD multicast between vrnicd processes as users run them: four raw-mode
// daemons and a TAP-mode one on a bridge with IGMP snooping and a querier,
// as a switch does. Three receivers (two raw, one TAP) run rdma-core's
// mckey, unmodified on the drop-in librdmacm, with three QPs each (-c 3):
// the bridge learns their ports from the IGMPv3 reports (the kernel's for
// raw mode, vrnicd's own netstack's for TAP mode), the sender's 10 messages
// reach every QP of every receiver, the host that did not join gets none
// of them (an nftables counter), and after the receivers leave their ports
// are gone from the bridge's table.
func TestMckeyOverSnoopingBridge(t *testing.T) {
	linktest.RequireRoot(t)
	ourRdmacm(t)
	for _, p := range []string{"mckey", "bridge", "nft", "stdbuf"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s missing (make deps)", p)
		}
	}
	lib := filepath.Dir(ourLib(t))
	bin := buildGoTool(t, "vrnicd")
	sw := linktest.NewNS(t, "mcsw")
	// IGMPv3: no report suppression, so every member's leave is sent. A
	// new querier floods every group for its query response interval
	// (set before the querier, which takes the interval it sees then).
	sw.Exec(t, "ip", "link", "add", "br0", "type", "bridge", "mcast_snooping", "1", "mcast_igmp_version", "3",
		"mcast_query_response_interval", "100")
	sw.Exec(t, "ip", "addr", "add", "203.0.113.254/24", "dev", "br0")
	sw.Exec(t, "ip", "link", "set", "br0", "up")
	sw.Exec(t, "ip", "link", "set", "br0", "type", "bridge", "mcast_querier", "1")
	bridgeUp := time.Now()
	dir := t.TempDir()
	names := []string{"a", "b", "c", "d"}
	tl := map[string]tool{}
	ns := map[string]*linktest.NS{}
	for i, n := range names {
		host := linktest.NewNS(t, "mc"+n)
		ns[n] = host
		linktest.VethPair(t, host, "vmc"+n, sw, "bmc"+n)
		sw.Exec(t, "ip", "link", "set", "bmc"+n, "master", "br0")
		host.Exec(t, "ip", "addr", "add", fmt.Sprintf("203.0.113.%d/24", i+1), "dev", "vmc"+n)
		tl[n] = startVrnicd(t, bin, lib, dir, host, "vmc"+n)
	}
	// A fifth host runs vrnicd in TAP mode on the bridge: its own netstack
	// sends the IGMPv3 reports (RFC 3376) the bridge learns its port from.
	tl["e"] = startVrnicd(t, bin, lib, dir, sw, "tap:tmce", "--ip", "203.0.113.5/24")
	sw.Exec(t, "ip", "link", "set", "tmce", "master", "br0")
	const group = "239.6.6.6"
	outsider := roceCounter(t, ns["d"], "vmcd")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type rx struct {
		cmd *exec.Cmd
		out *output
	}
	var rxs []rx
	for _, n := range []string{"b", "c", "e"} {
		addr := "203.0.113." + map[string]string{"b": "2", "c": "3", "e": "5"}[n]
		cmd, out := tl[n].command(ctx, "stdbuf", "-oL", "mckey", "-m", group, "-b", addr, "-C", "10", "-c", "3")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		rxs = append(rxs, rx{cmd, out})
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				for _, r := range rxs {
					t.Logf("receiver:\n%s", r.out.String())
				}
				out, _ := exec.Command("ip", "netns", "exec", sw.Name, "bridge", "mdb", "show").CombinedOutput()
				t.Logf("bridge mdb show:\n%s", out)
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	for _, r := range rxs {
		waitFor("the receivers to join", func() bool {
			if strings.Contains(r.out.String(), "receiving data transfers") {
				return true
			}
			if r.cmd.ProcessState != nil || ctx.Err() != nil {
				t.Fatalf("receiver: %s", r.out.String())
			}
			return false
		})
	}
	waitFor("the bridge to learn both receivers' ports", func() bool {
		p := mdbPorts(t, sw, group)
		return has(p, "bmcb") && has(p, "bmcc") && has(p, "tmce")
	})
	time.Sleep(time.Until(bridgeUp.Add(2 * time.Second)))
	if p := mdbPorts(t, sw, group); has(p, "bmcd") {
		t.Errorf("the host that did not join is in the bridge's table: %v", p)
	}
	txOut, err := tl["a"].run(t, 30*time.Second, "mckey", "-m", group, "-b", "203.0.113.1", "-s", "-C", "10")
	if err != nil {
		t.Fatalf("sender: %v\n%s", err, txOut)
	}
	for i, r := range rxs {
		if err := r.cmd.Wait(); err != nil || !strings.Contains(r.out.String(), "data transfers complete") {
			t.Errorf("receiver %d: %v\n%s", i, err, r.out.String())
		}
	}
	if n := outsider(); n != 0 {
		t.Errorf("the host that did not join received %d RoCE frames", n)
	}
	waitFor("the receivers' ports to leave the bridge's table", func() bool {
		p := mdbPorts(t, sw, group)
		return !has(p, "bmcb") && !has(p, "bmcc") && !has(p, "tmce")
	})
	t.Logf("sender:\n%s", txOut)
}
