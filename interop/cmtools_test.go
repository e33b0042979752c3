package interop_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/interop/rxepeer"
)

// The librdmacm example programs against the kernel (rdmacm-utils of
// rdma-core v44 over rxe): ucmatose, rdma_server/rdma_client and cmtime,
// each with the kernel's tool as the server and vrnicd's as the client,
// and the reverse.

// cmBed boots the guest and one vrnicd on a 1500-byte bridge.
func cmBed(t *testing.T) (*rxepeer.Netns, *rxepeer.VM, *daemon) {
	t.Helper()
	n := rxepeer.NewBridgeNetns(t, "192.0.2.1/24")
	vm := rxepeer.Boot(t, rxepeer.Options{Netns: n, IP: "192.0.2.2/24", MTU: 1500})
	d := startDaemon(t, n, "vra", "192.0.2.10/24", 1500)
	if err := n.IP("link", "set", n.Bridge, "mtu", "1500"); err != nil {
		t.Fatal(err)
	}
	return n, vm, d
}

// checkCMDone: once the tools are done, the daemon's rdma_cm table
// (`vrnicctl cm --json`) holds listeners and connections in TIMEWAIT at
// most; the disconnects all completed and nothing leaked.
func checkCMDone(t *testing.T, d *daemon) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, d.tools.vrnicctl, "cm", "--json", "--socket", d.socket).Output()
	if err != nil {
		t.Fatalf("vrnicctl cm --json: %v", err)
	}
	var doc struct {
		CM []struct {
			State    string `json:"state"`
			Listener bool   `json:"listener"`
		} `json:"cm"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("vrnicctl cm --json: %v: %q", err, out)
	}
	left := map[string]int{}
	for _, e := range doc.CM {
		if !e.Listener && e.State != "TIMEWAIT" {
			left[e.State]++
		}
	}
	if len(left) > 0 {
		t.Errorf("connections left in the daemon's CM table: %v\n%s", left, out)
	}
}

// cmCount reads the daemon's counters (for cmCounted).
func cmCount(t *testing.T, d *daemon) map[string]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := d.counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// cmCounted: since before, QP1 carried at least n of each named CM MAD
// (the connections really went through the daemon's CM; a lost MAD's
// retransmission may add some).
func cmCounted(t *testing.T, d *daemon, before map[string]uint64, n uint64, names ...string) {
	t.Helper()
	after := cmCount(t, d)
	got := map[string]uint64{}
	for _, k := range names {
		// "a+b": either counter may carry it (which side sends a DREQ
		// first is a race when both disconnect).
		for _, part := range strings.Split(k, "+") {
			got[k] += after[part] - before[part]
		}
		if got[k] < n {
			t.Errorf("%s: %d CM MADs, want at least %d (all: %v)", k, got[k], n, got)
		}
	}
	t.Logf("CM MADs: %v", got)
}

// retryWhile runs a client again while its output says the server does
// not listen yet (a REJ "invalid service ID", in each tool's words).
func retryWhile(ctx context.Context, notYet string, run func() (string, string, int, error)) (string, string, int, error) {
	for i := 0; ; i++ {
		so, se, exit, err := run()
		if err != nil || exit == 0 || !strings.Contains(so+se, notYet) || i == 30 || ctx.Err() != nil {
			return so, se, exit, err
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// checkSequence: out holds want's lines in order (others may be between).
func checkSequence(t *testing.T, who, out string, want []string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	i := 0
	for _, l := range lines {
		if i < len(want) && strings.TrimSpace(l) == want[i] {
			i++
		}
	}
	if i < len(want) {
		t.Errorf("%s: output lacks %q (in order: %q):\n%s", who, want[i], want, out)
	}
}

var (
	ucmatoseServerLines = []string{"cmatose: starting server", "initiating data transfers", "completing sends",
		"receiving data transfers", "data transfers complete", "cmatose: disconnecting", "disconnected",
		"test complete", "return status 0"}
	ucmatoseClientLines = []string{"cmatose: starting client", "cmatose: connecting", "receiving data transfers",
		"sending replies", "data transfers complete", "test complete", "return status 0"}
)

// TestInteropUcmatose: kernel `ucmatose` (server) with `vrnic-ucmatose
// -s` (client) and the reverse: 4 connections, 10 messages of 100 bytes
// and 5 of 4096 each way on each, the server's disconnect.
func TestInteropUcmatose(t *testing.T) {
	n, vm, d := cmBed(t)
	guest, ours := vm.IP.Addr().String(), d.addr.String()
	for _, tc := range []struct{ conns, count, size int }{{4, 10, 100}, {4, 5, 4096}} {
		args := fmt.Sprintf("-c %d -C %d -S %d", tc.conns, tc.count, tc.size)
		t.Run(fmt.Sprintf("kernel-server/%d", tc.size), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			before := cmCount(t, d)
			job := vm.StartTimeout(fmt.Sprintf("ucmatose -b %s %s", guest, args), 110*time.Second)
			defer job.Kill()
			so, se, exit, err := retryWhile(ctx, "REJECTED, error: 8", func() (string, string, int, error) {
				p := startTool(t, n, append([]string{d.tools.ucmatose, "--socket", d.socket, "-s", guest}, strings.Fields(args)...)...)
				return p.wait(ctx)
			})
			ko, ke, kexit, kerr := job.Wait(ctx)
			if err != nil || exit != 0 || kerr != nil || kexit != 0 {
				t.Fatalf("vrnic-ucmatose -s: exit %d %v\n%s%s\nkernel ucmatose: exit %d %v\n%s%s", exit, err, so, se, kexit, kerr, ko, ke)
			}
			checkSequence(t, "vrnic-ucmatose (client)", so, ucmatoseClientLines)
			checkSequence(t, "kernel ucmatose (server)", ko, ucmatoseServerLines)
			checkCMDone(t, d)
			cmCounted(t, d, before, uint64(tc.conns), "cm_tx_req", "cm_rx_rep", "cm_tx_rtu", "cm_rx_dreq", "cm_tx_drep")
		})
		t.Run(fmt.Sprintf("kernel-client/%d", tc.size), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			before := cmCount(t, d)
			p := startTool(t, n, append([]string{d.tools.ucmatose, "--socket", d.socket, "-b", ours}, strings.Fields(args)...)...)
			defer p.kill()
			ko, ke, kexit, kerr := retryWhile(ctx, "REJECTED, error: 8", func() (string, string, int, error) {
				return vm.Exec(ctx, fmt.Sprintf("ucmatose -s %s %s", ours, args))
			})
			so, se, exit, err := p.wait(ctx)
			if kerr != nil || kexit != 0 || err != nil || exit != 0 {
				t.Fatalf("kernel ucmatose -s: exit %d %v\n%s%s\nvrnic-ucmatose: exit %d %v\n%s%s", kexit, kerr, ko, ke, exit, err, so, se)
			}
			checkSequence(t, "kernel ucmatose (client)", ko, ucmatoseClientLines)
			checkSequence(t, "vrnic-ucmatose (server)", so, ucmatoseServerLines)
			checkCMDone(t, d)
			cmCounted(t, d, before, uint64(tc.conns), "cm_rx_req", "cm_tx_rep", "cm_rx_rtu", "cm_tx_dreq", "cm_rx_drep")
		})
	}
}

// examplesPort is the port of librdmacm's examples (rdma_server,
// rdma_client, cmtime) and of their vrnic- counterparts unless -p says
// otherwise.
const examplesPort = 7471

// TestInteropRdmaServerClient: kernel `rdma_server` with
// `vrnic-rdma-client`, `vrnic-rdma-server` with kernel `rdma_client`: one
// 16-byte message each way, both "end 0".
func TestInteropRdmaServerClient(t *testing.T) {
	n, vm, d := cmBed(t)
	guest, ours := vm.IP.Addr().String(), d.addr.String()
	t.Run("kernel-server", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		job := vm.StartTimeout("rdma_server -s "+guest, 80*time.Second)
		defer job.Kill()
		so, se, exit, err := retryWhile(ctx, "REJECTED, error 8", func() (string, string, int, error) {
			p := startTool(t, n, d.tools.rdmaClient, "--socket", d.socket, "-s", guest)
			return p.wait(ctx)
		})
		ko, ke, kexit, kerr := job.Wait(ctx)
		if err != nil || exit != 0 || kerr != nil || kexit != 0 {
			t.Fatalf("vrnic-rdma-client: exit %d %v\n%s%s\nkernel rdma_server: exit %d %v\n%s%s", exit, err, so, se, kexit, kerr, ko, ke)
		}
		checkSequence(t, "vrnic-rdma-client", so, []string{"rdma_client: start", "rdma_client: end 0"})
		checkSequence(t, "kernel rdma_server", ko, []string{"rdma_server: start", "rdma_server: end 0"})
		checkCMDone(t, d)
	})
	t.Run("kernel-client", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		p := startTool(t, n, d.tools.rdmaServer, "--socket", d.socket, "-s", ours)
		defer p.kill()
		waitOurListen(ctx, t, d, examplesPort, p)
		// The kernel's rdma_connect fails "rdma_connect: ..." on a REJ.
		ko, ke, kexit, kerr := retryWhile(ctx, "rdma_connect", func() (string, string, int, error) {
			return vm.Exec(ctx, "rdma_client -s "+ours)
		})
		so, se, exit, err := p.wait(ctx)
		if kerr != nil || kexit != 0 || err != nil || exit != 0 {
			t.Fatalf("kernel rdma_client: exit %d %v\n%s%s\nvrnic-rdma-server: exit %d %v\n%s%s", kexit, kerr, ko, ke, exit, err, so, se)
		}
		checkSequence(t, "kernel rdma_client", ko, []string{"rdma_client: start", "rdma_client: end 0"})
		checkSequence(t, "vrnic-rdma-server", so, []string{"rdma_server: start", "rdma_server: end 0"})
		checkCMDone(t, d)
	})
}

// cmtimeRow is a row of cmtime's table: step, total ms, max ms, min us,
// us per connection.
var cmtimeRow = regexp.MustCompile(`(?m)^([a-z ]+?) *: +([0-9.]+) +([0-9.]+) +([0-9.]+) +([0-9.]+)$`)

// logCmtime logs cmtime's per-step figures and fails if there are none.
func logCmtime(t *testing.T, who, out string) {
	t.Helper()
	rows := cmtimeRow.FindAllStringSubmatch(out, -1)
	if len(rows) == 0 {
		t.Errorf("%s: no cmtime table in:\n%s", who, out)
		return
	}
	for _, r := range rows {
		t.Logf("%s %-13s total %9s ms  max %8s ms  min %9s us  %9s us/conn", who, r[1], r[2], r[3], r[4], r[5])
	}
}

// TestInteropCmtime: kernel `cmtime` (server) with `vrnic-cmtime -s`, and
// `vrnic-cmtime` (server) with kernel `cmtime -s`: 3 rounds of 100
// connections connected at once and disconnected, 300 cycles each way.
// Only success is asserted; the figures are logged.
func TestInteropCmtime(t *testing.T) {
	const rounds, conns = 3, 100
	n, vm, d := cmBed(t)
	guest, ours := vm.IP.Addr().String(), d.addr.String()
	t.Run("kernel-server", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		before := cmCount(t, d)
		job := vm.StartTimeout("cmtime -b "+guest, 290*time.Second)
		defer job.Kill()
		for round := range rounds {
			so, se, exit, err := retryWhile(ctx, "REJECTED, error: 8", func() (string, string, int, error) {
				p := startTool(t, n, d.tools.cmtime, "--socket", d.socket, "-s", guest, "-c", fmt.Sprint(conns))
				return p.wait(ctx)
			})
			if err != nil || exit != 0 {
				ko, ke := job.Output()
				t.Fatalf("round %d: vrnic-cmtime -s: exit %d %v\n%s%s\nkernel cmtime:\n%s%s", round, exit, err, so, se, ko, ke)
			}
			logCmtime(t, fmt.Sprintf("vrnic-cmtime round %d:", round), so)
		}
		if job.Done() {
			ko, ke := job.Output()
			t.Fatalf("kernel cmtime server ended:\n%s%s", ko, ke)
		}
		checkCMDone(t, d)
		cmCounted(t, d, before, rounds*conns, "cm_tx_req", "cm_rx_rep", "cm_tx_rtu", "cm_tx_dreq", "cm_rx_drep")
	})
	t.Run("kernel-client", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		before := cmCount(t, d)
		p := startTool(t, n, d.tools.cmtime, "--socket", d.socket, "-b", ours)
		defer p.kill()
		waitOurListen(ctx, t, d, examplesPort, p)
		for round := range rounds {
			ko, ke, kexit, kerr := retryWhile(ctx, "REJECTED, error: 8", func() (string, string, int, error) {
				return vm.Exec(ctx, fmt.Sprintf("cmtime -s %s -c %d", ours, conns))
			})
			// cmtime reports a failed connection ("event: ...",
			// "failure ...") and still exits 0.
			if kerr != nil || kexit != 0 || strings.Contains(ko, "event: ") || strings.Contains(ko+ke, "failure") {
				t.Fatalf("round %d: kernel cmtime -s: exit %d %v\n%s%s\nvrnic-cmtime:\n%s%s", round, kexit, kerr, ko, ke,
					p.stdout.String(), p.stderr.String())
			}
			logCmtime(t, fmt.Sprintf("kernel cmtime round %d:", round), ko)
		}
		if p.exited() || p.stdout.String() != "" {
			t.Fatalf("vrnic-cmtime server: exited %v, output:\n%s%s", p.exited(), p.stdout.String(), p.stderr.String())
		}
		checkCMDone(t, d)
		cmCounted(t, d, before, rounds*conns, "cm_rx_req", "cm_tx_rep", "cm_rx_rtu", "cm_rx_dreq", "cm_tx_drep")
	})
}
