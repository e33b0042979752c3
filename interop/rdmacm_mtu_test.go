package interop_test

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/interop/rxepeer"
)

// rdma_cm at both path MTUs and over the IPv6 link-local GID (issue 14):
// rping each way, validated, at 1024 (1500-byte link) and 4096 (9000).

// rpingBed boots the guest and one vrnicd on a bridge of linkMTU bytes and
// checks both ends' active MTU is pathMTU.
func rpingBed(t *testing.T, linkMTU, pathMTU int) (*rxepeer.Netns, *rxepeer.VM, *daemon) {
	t.Helper()
	n := rxepeer.NewBridgeNetns(t, "192.0.2.1/24")
	vm := rxepeer.Boot(t, rxepeer.Options{Netns: n, IP: "192.0.2.2/24", MTU: linkMTU})
	if vm.ActiveMTU != pathMTU {
		t.Fatalf("guest rxe0 active MTU %d on a %d-byte link, want %d", vm.ActiveMTU, linkMTU, pathMTU)
	}
	d := startDaemon(t, n, "vra", "192.0.2.10/24", linkMTU)
	if m, _ := d.ready["active_mtu"].(float64); int(m) != pathMTU {
		t.Fatalf("vrnicd active MTU %v on a %d-byte link, want %d", d.ready["active_mtu"], linkMTU, pathMTU)
	}
	if err := n.IP("link", "set", n.Bridge, "mtu", strconv.Itoa(linkMTU)); err != nil {
		t.Fatal(err)
	}
	return n, vm, d
}

// linkLocal returns the guest's and the daemon's fe80:: addresses (their
// GID 0), scoped as each side's rping takes them: the guest's eth0, and
// the daemon's TAP (vrnicd has one port; the zone only names it).
func linkLocal(t *testing.T, vm *rxepeer.VM, d *daemon) (guest, ours string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _, code, err := vm.Exec(ctx, "cat /sys/class/infiniband/rxe0/ports/1/gids/0")
	g, perr := netip.ParseAddr(strings.TrimSpace(out))
	if err != nil || code != 0 || perr != nil || !g.IsLinkLocalUnicast() {
		t.Fatalf("guest GID 0: %q exit %d %v %v", out, code, err, perr)
	}
	// The kernel's rping resolves -a with getaddrinfo, whose AI_ADDRCONFIG
	// refuses an IPv6 literal (EAI_ADDRFAMILY) until eth0 has an IPv6
	// address: right after boot it may not yet.
	for i := 0; ; i++ {
		out, _, _, err := vm.Exec(ctx, "ip -6 -o addr show dev eth0 scope link")
		if err == nil && strings.Contains(out, g.String()+"/") && !strings.Contains(out, "tentative") {
			if i > 0 {
				t.Logf("guest eth0's %v there after %d polls", g, i)
			}
			break
		}
		if i == 100 || ctx.Err() != nil {
			t.Fatalf("guest eth0 has no usable %v: %q %v", g, out, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	gids, _ := d.ready["gids"].(string)
	var o netip.Addr
	for _, e := range strings.Fields(gids) {
		if a, ok := strings.CutPrefix(e, "0="); ok {
			o, _ = netip.ParseAddr(a)
		}
	}
	if !o.IsLinkLocalUnicast() {
		t.Fatalf("vrnicd GID 0 in %q is not link-local", gids)
	}
	return g.WithZone("eth0").String(), o.WithZone(d.tap).String()
}

// rpingWire checks from the daemon's TAP that the pings went the way the
// case says: every RoCEv2 frame of the GID's family, and packets of the
// path MTU (no larger, and that large when the message is).
type rpingWire struct {
	c       *tapCapture
	v6      bool
	pathMTU int
}

// check looks at the frames since mark.
func (w rpingWire) check(t *testing.T, mark, size int) string {
	t.Helper()
	frames := w.c.since(mark)
	top, wrongFamily := 0, 0
	for _, f := range frames {
		if f.v6 != w.v6 {
			wrongFamily++
		}
		top = max(top, f.payload)
	}
	// payload: after the BTH, so RETH (16) or AETH (4) and the ICRC (4) too.
	if len(frames) == 0 || wrongFamily > 0 || top > w.pathMTU+20 || (size >= w.pathMTU && top < w.pathMTU) {
		t.Errorf("daemon's TAP: %d RoCEv2 frames, %d not IPv6=%v, largest payload %d (path MTU %d, %d-byte pings)",
			len(frames), wrongFamily, w.v6, top, w.pathMTU, size)
	}
	return fmt.Sprintf("%d RoCEv2 frames, largest payload %d", len(frames), top)
}

// rpingBoth runs rping each way: kernel `rping -s -a guest` with
// `vrnic-rping -c`, then `vrnic-rping -s -a ours` with kernel `rping -c`,
// count validated pings of size bytes, and checks both sides' data.
func rpingBoth(t *testing.T, n *rxepeer.Netns, vm *rxepeer.VM, d *daemon, w rpingWire, guest, ours string, count, size int) {
	limit := 60*time.Second + time.Duration(count*size/1024)*30*time.Millisecond
	t.Run(fmt.Sprintf("kernel-server/%d", size), func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), limit+10*time.Second)
		defer cancel()
		start, mark := time.Now(), w.c.mark()
		job := vm.StartTimeout(fmt.Sprintf("rping -s -a %s -v -S %d", guest, size), limit)
		defer job.Kill()
		so, se, exit, err := retryRejected(ctx, func() (string, string, int, error) {
			p := startTool(t, n, d.tools.rping, "--socket", d.socket, "-c", "-a", ours2guest(guest, d),
				"-C", strconv.Itoa(count), "-S", strconv.Itoa(size), "-v", "-V")
			return p.wait(ctx)
		})
		ko, ke, kexit, kerr := job.Wait(ctx)
		if err != nil || exit != 0 || kerr != nil || kexit != 0 {
			t.Fatalf("vrnic-rping -c: exit %d %v\n%s%s\nkernel rping -s: exit %d %v\n%s%s", exit, err, tail(so), se, kexit, kerr, tail(ko), ke)
		}
		checkRping(t, so, "ping data: ", count, size)
		checkRping(t, ko, "server ping data: ", count, size)
		checkCMDone(t, d)
		t.Logf("%d pings of %d bytes in %.1fs; %s", count, size, time.Since(start).Seconds(), w.check(t, mark, size))
	})
	t.Run(fmt.Sprintf("kernel-client/%d", size), func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), limit+10*time.Second)
		defer cancel()
		start, mark := time.Now(), w.c.mark()
		p := startTool(t, n, d.tools.rping, "--socket", d.socket, "-s", "-a", ours, "-v", "-S", strconv.Itoa(size))
		defer p.kill()
		ko, ke, kexit, kerr := retryRejected(ctx, func() (string, string, int, error) {
			return vm.Exec(ctx, fmt.Sprintf("rping -c -a %s -C %d -S %d -v -V", guest2ours(ours), count, size))
		})
		so, se, exit, err := p.wait(ctx)
		if kerr != nil || kexit != 0 || err != nil || exit != 0 {
			t.Fatalf("kernel rping -c: exit %d %v\n%s%s\nvrnic-rping -s: exit %d %v\n%s%s", kexit, kerr, tail(ko), ke, exit, err, tail(so), se)
		}
		checkRping(t, ko, "ping data: ", count, size)
		checkRping(t, so, "server ping data: ", count, size)
		checkCMDone(t, d)
		t.Logf("%d pings of %d bytes in %.1fs; %s", count, size, time.Since(start).Seconds(), w.check(t, mark, size))
	})
}

// ours2guest is the guest's address as the host side names it: a
// link-local one scoped to the daemon's TAP instead of the guest's eth0.
func ours2guest(guest string, d *daemon) string {
	if a, _, ok := strings.Cut(guest, "%"); ok {
		return a + "%" + d.tap
	}
	return guest
}

// guest2ours is the daemon's address as the guest names it (its eth0).
func guest2ours(ours string) string {
	if a, _, ok := strings.Cut(ours, "%"); ok {
		return a + "%eth0"
	}
	return ours
}

// tail keeps the end of a tool's output for a failure message (64 KiB
// ping lines would bury it).
func tail(s string) string {
	if len(s) > 4000 {
		return "..." + s[len(s)-4000:]
	}
	return s
}

// rpingSizes: a single packet, one 4096-byte packet, and rping's largest
// buffer (RPING_BUFSIZE - 1: both rpings refuse 65536), many packets at
// either path MTU.
var rpingSizes = []int{64, 4096, 65535}

// TestInteropRping9000: rping each way on a 9000-byte link (path MTU
// 4096), 100 validated pings of each of rpingSizes, over the IPv4 GID and
// the IPv6 link-local one.
func TestInteropRping9000(t *testing.T) {
	n, vm, d := rpingBed(t, 9000, 4096)
	c := startCapture(t, n, d.tap, true, time.Now())
	t.Run("ipv4", func(t *testing.T) {
		for _, size := range rpingSizes {
			rpingBoth(t, n, vm, d, rpingWire{c, false, 4096}, vm.IP.Addr().String(), d.addr.String(), 100, size)
		}
	})
	t.Run("ipv6ll", func(t *testing.T) {
		guest, ours := linkLocal(t, vm, d)
		for _, size := range rpingSizes {
			rpingBoth(t, n, vm, d, rpingWire{c, true, 4096}, guest, ours, 100, size)
		}
	})
}

// TestInteropRpingLinkLocal: rping each way over the IPv6 link-local GID
// on a 1500-byte link (path MTU 1024; IPv4 there is TestInteropRping).
func TestInteropRpingLinkLocal(t *testing.T) {
	n, vm, d := rpingBed(t, 1500, 1024)
	c := startCapture(t, n, d.tap, true, time.Now())
	guest, ours := linkLocal(t, vm, d)
	for _, size := range rpingSizes {
		rpingBoth(t, n, vm, d, rpingWire{c, true, 1024}, guest, ours, 100, size)
	}
}
