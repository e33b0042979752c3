// Package linktest helps root tests build small networks out of network
// namespaces, veth pairs and bridges, and run code inside them. It is the
// tree's one namespace harness: interop/rxepeer builds its bridged guest
// networks on NS.
//
// Go runs goroutines on many OS threads and a network namespace belongs to
// a thread, so NS.Do runs a function on a fresh goroutine locked to a thread
// that has joined the namespace, and lets that thread die afterwards rather
// than return it to the scheduler. Sockets and TAP devices created there stay
// in the namespace for their whole life.
package linktest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// RequireRoot skips the test unless it runs as root with ip(8) available.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root (creates network namespaces, TAP devices and AF_PACKET sockets)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("skipped: needs ip(8) from iproute2")
	}
}

var seq atomic.Uint32

// UniqueName returns a short name (≤ 15 bytes, fits IFNAMSIZ) from prefix,
// the process ID and a counter, so parallel test binaries do not collide.
// The counter is in base 36 after a letter: it does not wrap within a
// binary's life (a single letter did after 26 names).
func UniqueName(prefix string) string {
	n := fmt.Sprintf("%s%dn%s", prefix, os.Getpid()%1000000, strconv.FormatUint(uint64(seq.Add(1)), 36))
	if len(n) > 15 {
		n = n[len(n)-15:]
	}
	return n
}

// NS is a named network namespace made for one test.
type NS struct {
	Name   string
	Handle netns.NsHandle
}

// NewNS creates a named namespace (ip netns add) with loopback up, and
// deletes it when the test ends.
func NewNS(t testing.TB, prefix string) *NS {
	t.Helper()
	name := UniqueName(prefix)
	Run(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "del", name).Run()
	})
	h, err := netns.GetFromName(name)
	if err != nil {
		t.Fatalf("netns %s: %v", name, err)
	}
	t.Cleanup(func() { h.Close() })
	ns := &NS{Name: name, Handle: h}
	ns.Exec(t, "ip", "link", "set", "lo", "up")
	return ns
}

// Do runs fn on a thread inside ns and returns its error.
func (ns *NS) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread exits with the goroutine instead of
		// going back to the scheduler in the wrong namespace.
		runtime.LockOSThread()
		if err := unix.Setns(int(ns.Handle), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns.Name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Netlink returns a netlink handle working in ns, closed at test end.
func (ns *NS) Netlink(t testing.TB) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(ns.Handle)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// Exec runs a command inside ns (ip netns exec) and fails the test if it
// fails; it returns the combined output.
func (ns *NS) Exec(t testing.TB, args ...string) string {
	t.Helper()
	return Run(t, append([]string{"ip", "netns", "exec", ns.Name}, args...)...)
}

// TryExec is Exec that returns the error instead of failing.
func (ns *NS) TryExec(args ...string) (string, error) {
	return try(append([]string{"ip", "netns", "exec", ns.Name}, args...)...)
}

// Run runs a command with a 30 s limit and fails the test if it fails.
func Run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := try(args...)
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func try(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	return string(out), err
}

// VethPair creates a veth pair with ends a (in nsA) and b (in nsB), both up,
// with IPv6 duplicate address detection off so link-local addresses are
// usable at once.
func VethPair(t testing.TB, nsA *NS, a string, nsB *NS, b string) {
	t.Helper()
	nsA.Exec(t, "ip", "link", "add", a, "type", "veth", "peer", "name", b, "netns", nsB.Name)
	for _, x := range []struct {
		ns   *NS
		name string
	}{{nsA, a}, {nsB, b}} {
		x.ns.Exec(t, "sysctl", "-qw", "net.ipv6.conf."+x.name+".accept_dad=0")
		x.ns.Exec(t, "ip", "link", "set", x.name, "up")
	}
}

// BridgedVeth makes the segment the TAP tests share: bridge br in nsA, up,
// and a veth pair whose end a (in nsA) is enslaved to it and whose end b
// sits in nsB (VethPair). A test enslaves its TAP to br once it exists.
func BridgedVeth(t testing.TB, nsA *NS, br, a string, nsB *NS, b string) {
	t.Helper()
	nsA.Exec(t, "ip", "link", "add", br, "type", "bridge")
	nsA.Exec(t, "ip", "link", "set", br, "up")
	VethPair(t, nsA, a, nsB, b)
	nsA.Exec(t, "ip", "link", "set", a, "master", br)
}

// WaitFor polls cond, sleeping poll between looks, until it holds or d
// passes (then the test fails, naming what it waited for).
func WaitFor(t testing.TB, what string, d, poll time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(poll) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
	}
}
