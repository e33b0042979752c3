package interop_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/interop/rxepeer"
)

// TestInteropRping: rdma_cm between vrnicd and the kernel (rdma_cm over
// rxe 6.1): kernel `rping -s` with `vrnic-rping -c`, `vrnic-rping -s` with
// kernel `rping -c`, 10 validated pings of 64 and 4096 bytes on a 1500-byte
// link (path MTU 1024), and a kernel `rping -c` to a port nobody listens
// on, which must end "rejected" (REJ reason 8) at once.
func TestInteropRping(t *testing.T) {
	n := rxepeer.NewBridgeNetns(t, "192.0.2.1/24")
	vm := rxepeer.Boot(t, rxepeer.Options{Netns: n, IP: "192.0.2.2/24", MTU: 1500})
	if vm.ActiveMTU != 1024 {
		t.Fatalf("guest rxe0 active MTU %d, want 1024", vm.ActiveMTU)
	}
	d := startDaemon(t, n, "vra", "192.0.2.10/24", 1500)
	if err := n.IP("link", "set", n.Bridge, "mtu", "1500"); err != nil {
		t.Fatal(err)
	}
	guest, ours := vm.IP.Addr().String(), d.addr.String()
	if dir := os.Getenv("VRNICD_RPING_PCAP"); dir != "" {
		// A whole-frame capture of the bridge, for looking at a failure
		// (dumpcap itself: a killed tshark leaves its dumpcap running).
		c := startHost(t, n, "dumpcap", "-q", "-n", "-i", n.Bridge, "-w", filepath.Join(dir, "rping.pcapng"))
		t.Cleanup(c.kill)
		time.Sleep(2 * time.Second)
	}
	for _, size := range []int{64, 4096} {
		t.Run(fmt.Sprintf("kernel-server/%d", size), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			job := vm.StartTimeout(fmt.Sprintf("rping -s -a %s -v -S %d", guest, size), 80*time.Second)
			defer job.Kill()
			so, se, exit, err := retryRejected(ctx, func() (string, string, int, error) {
				p := startTool(t, n, d.tools.rping, "--socket", d.socket, "-c", "-a", guest, "-C", "10", "-S", strconv.Itoa(size), "-v", "-V")
				return p.wait(ctx)
			})
			ko, ke, kexit, kerr := job.Wait(ctx)
			if err != nil || exit != 0 || kerr != nil || kexit != 0 {
				t.Fatalf("vrnic-rping -c: exit %d %v\n%s%s\nkernel rping -s: exit %d %v\n%s%s", exit, err, so, se, kexit, kerr, ko, ke)
			}
			checkRping(t, so, "ping data: ", 10, size)
			checkRping(t, ko, "server ping data: ", 10, size)
		})
		t.Run(fmt.Sprintf("kernel-client/%d", size), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			p := startTool(t, n, d.tools.rping, "--socket", d.socket, "-s", "-a", ours, "-v", "-S", strconv.Itoa(size))
			defer p.kill()
			ko, ke, kexit, kerr := retryRejected(ctx, func() (string, string, int, error) {
				return vm.Exec(ctx, fmt.Sprintf("rping -c -a %s -C 10 -S %d -v -V", ours, size))
			})
			so, se, exit, err := p.wait(ctx)
			if kerr != nil || kexit != 0 || err != nil || exit != 0 {
				t.Fatalf("kernel rping -c: exit %d %v\n%s%s\nvrnic-rping -s: exit %d %v\n%s%s", kexit, kerr, ko, ke, exit, err, so, se)
			}
			checkRping(t, ko, "ping data: ", 10, size)
			checkRping(t, so, "server ping data: ", 10, size)
		})
	}
	t.Run("rejected", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		start := time.Now()
		ko, ke, kexit, err := vm.Exec(ctx, fmt.Sprintf("rping -c -a %s -p 9999 -C 1", ours))
		took := time.Since(start)
		if err != nil || kexit == 0 || !strings.Contains(ke, "RDMA_CM_EVENT_REJECTED, error 8") {
			t.Fatalf("kernel rping -c to an unused port: exit %d %v\n%s%s", kexit, err, ko, ke)
		}
		t.Logf("rejected in %v: %s", took.Round(time.Millisecond), strings.TrimSpace(ke))
		if c, err := d.counters(ctx); err != nil || c["cm_rx_req"] == 0 || c["cm_tx_rej"] == 0 {
			t.Errorf("vrnicd counters cm_rx_req %d cm_tx_rej %d (%v)", c["cm_rx_req"], c["cm_tx_rej"], err)
		}
	})
}

// retryRejected runs a client until its server listens: rping has no
// other way to tell than a REJ "invalid service ID" (8) while it does not.
func retryRejected(ctx context.Context, run func() (string, string, int, error)) (string, string, int, error) {
	for i := 0; ; i++ {
		so, se, exit, err := run()
		if err != nil || exit == 0 || !strings.Contains(se, "REJECTED, error 8") || i == 30 || ctx.Err() != nil {
			return so, se, exit, err
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// checkRping checks rping's -v output: count lines "rdma-ping-N: " and
// size-1 bytes of 'A'..'z' from the N-th letter on, cycling.
func checkRping(t *testing.T, out, prefix string, count, size int) {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			lines = append(lines, l)
		}
	}
	if len(lines) != count {
		t.Fatalf("%d %q lines, want %d:\n%s", len(lines), prefix, count, out)
	}
	start := 65
	for ping := range count {
		s := []byte(fmt.Sprintf("rdma-ping-%d: ", ping))
		for c := start; len(s) < size-1; {
			s = append(s, byte(c))
			if c++; c > 122 {
				c = 65
			}
		}
		if start++; start > 122 {
			start = 65
		}
		if want := prefix + string(s[:size-1]); lines[ping] != want {
			t.Errorf("line %d:\n got %.90q\nwant %.90q", ping, lines[ping], want)
		}
	}
}

// rpingPort is rping's port unless -p says otherwise (rping.c: 7174).
const rpingPort = 7174

// TestInteropRpingLossyCM: the CM exchange with the kernel when MADs are
// lost between the guest and the bridge, each lost once: REQ, REP, RTU,
// DREQ and DREP with vrnicd the client; REQ, REP, RTU and DREP with the
// kernel the client. The retransmissions (ours and the kernel's) still
// connect and close. Not the kernel client's DREQ: rping destroys its ID
// right after rdma_disconnect, and the kernel's cm_destroy_id stops
// resending the DREQ (DREQ_SENT goes to timewait), so a lost one is never
// sent again and the server, the kernel's rping as well as ours, waits.
func TestInteropRpingLossyCM(t *testing.T) {
	n := rxepeer.NewBridgeNetns(t, "192.0.2.1/24")
	vm := rxepeer.Boot(t, rxepeer.Options{Netns: n, IP: "192.0.2.2/24", MTU: 1500, Impaired: true})
	d := startDaemon(t, n, "vra", "192.0.2.10/24", 1500)
	if err := n.IP("link", "set", n.Bridge, "mtu", "1500"); err != nil {
		t.Fatal(err)
	}
	guest, ours := vm.IP.Addr().String(), d.addr.String()
	lossy := func(fromGuest, toGuest []string) (from, to *cmDrops) {
		from, to = newCMDrops(fromGuest...), newCMDrops(toGuest...)
		vm.Impair.Set(rxepeer.FromGuest, rxepeer.Impairment{Match: isCMMAD, Decide: from.decide})
		vm.Impair.Set(rxepeer.ToGuest, rxepeer.Impairment{Match: isCMMAD, Decide: to.decide})
		return from, to
	}
	t.Run("kernel-server", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
		defer cancel()
		job := vm.StartTimeout(fmt.Sprintf("rping -s -a %s -v -S 64", guest), 140*time.Second)
		defer job.Kill()
		// Until the kernel listens (REJ 8), nothing is lost.
		so, se, exit, err := retryRejected(ctx, func() (string, string, int, error) {
			p := startTool(t, n, d.tools.rping, "--socket", d.socket, "-c", "-a", guest, "-p", strconv.Itoa(rpingPort), "-C", "1", "-S", "64")
			return p.wait(ctx)
		})
		if err != nil || exit != 0 {
			t.Fatalf("first vrnic-rping -c: exit %d %v\n%s%s", exit, err, so, se)
		}
		if _, _, kexit, kerr := job.Wait(ctx); kerr != nil || kexit != 0 {
			t.Fatalf("kernel rping -s: exit %d %v", kexit, kerr)
		}
		job = vm.StartTimeout(fmt.Sprintf("rping -s -a %s -v -S 64", guest), 140*time.Second)
		defer job.Kill()
		// The first REQ must not meet a REJ 8: nothing retries it here.
		waitKernelListen(ctx, t, vm, rpingPort, job)
		from, to := lossy([]string{"REP", "DREP"}, []string{"REQ", "RTU", "DREQ"})
		defer vm.Impair.Clear()
		start := time.Now()
		p := startTool(t, n, d.tools.rping, "--socket", d.socket, "-c", "-a", guest, "-C", "3", "-S", "64", "-v", "-V")
		so, se, exit, err = p.wait(ctx)
		ko, ke, kexit, kerr := job.Wait(ctx)
		t.Logf("%.1fs; lost to the guest %v, from it %v", time.Since(start).Seconds(), to.lost(), from.lost())
		if err != nil || exit != 0 || kerr != nil || kexit != 0 {
			t.Fatalf("vrnic-rping -c: exit %d %v\n%s%s\nkernel rping -s: exit %d %v\n%s%s", exit, err, so, se, kexit, kerr, ko, ke)
		}
		checkRping(t, so, "ping data: ", 3, 64)
		to.check(t, "REQ", "RTU", "DREQ")
		from.check(t, "REP", "DREP")
	})
	t.Run("kernel-client", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
		defer cancel()
		p := startTool(t, n, d.tools.rping, "--socket", d.socket, "-s", "-a", ours, "-v", "-S", "64")
		defer p.kill()
		waitOurListen(ctx, t, d, rpingPort, p)
		from, to := lossy([]string{"REQ", "RTU"}, []string{"REP", "DREP"})
		defer vm.Impair.Clear()
		start := time.Now()
		ko, ke, kexit, kerr := vm.Exec(ctx, fmt.Sprintf("rping -c -a %s -C 3 -S 64 -v -V", ours))
		so, se, exit, err := p.wait(ctx)
		t.Logf("%.1fs; lost to the guest %v, from it %v", time.Since(start).Seconds(), to.lost(), from.lost())
		if kerr != nil || kexit != 0 || err != nil || exit != 0 {
			t.Fatalf("kernel rping -c: exit %d %v\n%s%s\nvrnic-rping -s: exit %d %v\n%s%s", kexit, kerr, ko, ke, exit, err, so, se)
		}
		checkRping(t, ko, "ping data: ", 3, 64)
		from.check(t, "REQ", "RTU")
		to.check(t, "REP", "DREP")
	})
}

var cmAttrNames = map[uint16]string{0x10: "REQ", 0x11: "MRA", 0x12: "REJ", 0x13: "REP", 0x14: "RTU", 0x15: "DREQ", 0x16: "DREP",
	0x17: "SIDR_REQ", 0x18: "SIDR_REP"}

// cmMAD is the CM MAD of a RoCEv2 UD SEND to QP1 over IPv4 (no options)
// or IPv6 (no extension headers: rxe and vrnicd send none), or nil: the
// link-local GID's CM runs over IPv6.
func cmMAD(f []byte) []byte {
	if !rxepeer.IsRoCEv2(f) {
		return nil
	}
	var bth int
	switch {
	case f[12] == 0x08 && f[13] == 0 && f[14] == 0x45:
		bth = 14 + 20 + 8
	case f[12] == 0x86 && f[13] == 0xdd && f[14+6] == 17:
		bth = 14 + 40 + 8
	default:
		return nil
	}
	// BTH (12: opcode UD SEND only, DestQP 1), DETH (8), the 256-byte MAD.
	if len(f) < bth+12+8+256 || f[bth] != 0x64 || f[bth+5] != 0 || f[bth+6] != 0 || f[bth+7] != 1 {
		return nil
	}
	if mad := f[bth+12+8 : bth+12+8+256]; mad[1] == 0x07 {
		return mad
	}
	return nil
}

// isCMMAD matches a RoCEv2 UD SEND to QP1 carrying a CM MAD, IPv4 or IPv6.
func isCMMAD(f []byte) bool { return cmMAD(f) != nil }

// cmMADName is a CM MAD's attribute's name (f matched isCMMAD).
func cmMADName(f []byte) string {
	mad := cmMAD(f)
	return cmAttrNames[uint16(mad[16])<<8|uint16(mad[17])]
}

// cmDrops loses the first MAD of each of the named CM messages in one
// direction.
type cmDrops struct {
	mu      sync.Mutex
	lose    map[string]bool
	dropped map[string]int
}

func newCMDrops(names ...string) *cmDrops {
	c := &cmDrops{lose: map[string]bool{}, dropped: map[string]int{}}
	for _, n := range names {
		c.lose[n] = true
	}
	return c
}

func (c *cmDrops) decide(_ int, f []byte) rxepeer.Action {
	name := cmMADName(f)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.lose[name] || c.dropped[name] > 0 {
		return rxepeer.Pass
	}
	c.dropped[name]++
	return rxepeer.Drop
}

func (c *cmDrops) lost() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.dropped)
}

// check: each named MAD was sent (and lost once), so the exchange went
// through its retransmission.
func (c *cmDrops) check(t *testing.T, names ...string) {
	t.Helper()
	got := c.lost()
	for _, n := range names {
		if got[n] != 1 {
			t.Errorf("%s lost %d times, want 1 (lost: %v)", n, got[n], got)
		}
	}
}
