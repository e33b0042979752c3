package interop_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// udaddy (rdmacm-utils): UD over rdma_cm's RDMA_PS_UDP port space, SIDR
// against the kernel's CM, datagrams both ways through address handles.

var (
	udaddyServerLines = []string{"udaddy: starting server", "receiving data transfers", "sending replies",
		"data transfers complete", "test complete", "return status 0"}
	udaddyClientLines = []string{"udaddy: starting client", "udaddy: connecting", "initiating data transfers",
		"receiving data transfers", "data transfers complete", "test complete", "return status 0"}
)

// TestInteropUdaddy: kernel `udaddy` (server) with `vrnic-udaddy -s`
// (client) and `vrnic-udaddy` (server) with kernel `udaddy -s`: 2 peers
// resolved by SIDR, 10 messages of 100 bytes and 5 of 1024 each way on
// each; and either client to a port nobody listens on.
func TestInteropUdaddy(t *testing.T) {
	n, vm, d := cmBed(t)
	guest, ours := vm.IP.Addr().String(), d.addr.String()
	// A client that comes before the server listens gets SIDR status 1.
	const notYet = "UNREACHABLE, error: 1"
	for _, tc := range []struct{ conns, count, size int }{{2, 10, 100}, {2, 5, 1024}} {
		args := fmt.Sprintf("-c %d -C %d -S %d", tc.conns, tc.count, tc.size)
		t.Run(fmt.Sprintf("kernel-server/%d", tc.size), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			before := cmCount(t, d)
			job := vm.StartTimeout(fmt.Sprintf("udaddy -b %s %s", guest, args), 110*time.Second)
			defer job.Kill()
			so, se, exit, err := retryWhile(ctx, notYet, func() (string, string, int, error) {
				p := startTool(t, n, append([]string{d.tools.udaddy, "--socket", d.socket, "-s", guest}, strings.Fields(args)...)...)
				return p.wait(ctx)
			})
			ko, ke, kexit, kerr := job.Wait(ctx)
			if err != nil || exit != 0 || kerr != nil || kexit != 0 {
				t.Fatalf("vrnic-udaddy -s: exit %d %v\n%s%s\nkernel udaddy: exit %d %v\n%s%s", exit, err, so, se, kexit, kerr, ko, ke)
			}
			checkSequence(t, "vrnic-udaddy (client)", so, udaddyClientLines)
			checkSequence(t, "kernel udaddy (server)", ko, udaddyServerLines)
			checkCMDone(t, d)
			cmCounted(t, d, before, uint64(tc.conns), "cm_tx_sidr", "cm_rx_sidr")
		})
		t.Run(fmt.Sprintf("kernel-client/%d", tc.size), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			before := cmCount(t, d)
			p := startTool(t, n, append([]string{d.tools.udaddy, "--socket", d.socket, "-b", ours}, strings.Fields(args)...)...)
			defer p.kill()
			ko, ke, kexit, kerr := retryWhile(ctx, notYet, func() (string, string, int, error) {
				return vm.Exec(ctx, fmt.Sprintf("udaddy -s %s %s", ours, args))
			})
			so, se, exit, err := p.wait(ctx)
			if kerr != nil || kexit != 0 || err != nil || exit != 0 {
				t.Fatalf("kernel udaddy -s: exit %d %v\n%s%s\nvrnic-udaddy: exit %d %v\n%s%s", kexit, kerr, ko, ke, exit, err, so, se)
			}
			checkSequence(t, "kernel udaddy (client)", ko, udaddyClientLines)
			checkSequence(t, "vrnic-udaddy (server)", so, udaddyServerLines)
			checkCMDone(t, d)
			cmCounted(t, d, before, uint64(tc.conns), "cm_rx_sidr", "cm_tx_sidr")
		})
	}
	// Nobody listens on the port: the CM on either side answers SIDR
	// status 1 ("service ID not supported"), which udaddy reports as
	// UNREACHABLE and returns.
	t.Run("no-listener", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		want := "udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 1"
		ko, ke, kexit, kerr := vm.Exec(ctx, "udaddy -s "+ours)
		if kerr != nil || kexit == 0 || !strings.Contains(ko, want) {
			t.Errorf("kernel udaddy -s to vrnicd: exit %d %v\n%s%s", kexit, kerr, ko, ke)
		}
		p := startTool(t, n, d.tools.udaddy, "--socket", d.socket, "-s", guest)
		so, se, exit, err := p.wait(ctx)
		if err != nil || exit == 0 || !strings.Contains(so, want) || !strings.Contains(so, "return status 1") {
			t.Errorf("vrnic-udaddy -s to the guest: exit %d %v\n%s%s", exit, err, so, se)
		}
		checkCMDone(t, d)
	})
}
