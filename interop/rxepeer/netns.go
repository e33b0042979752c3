package rxepeer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/header"
	"github.com/vrnic/vrnicd/nic/link/linktest"
)

// Netns is a network namespace made for one test by linktest.NewNS (name,
// Do, deleted by t.Cleanup), with the bridge, TAP and veth plumbing the
// guests need. Everything the interop tests send stays inside it.
type Netns struct {
	*linktest.NS
	Bridge   string       // the first bridge AddBridge made; "" if none
	HostAddr netip.Prefix // that bridge's address; invalid if it has none
}

// NewNetns creates an empty namespace with loopback up. Its name holds the
// test binary's PID, so parallel binaries do not collide.
func NewNetns(t testing.TB) *Netns {
	t.Helper()
	requireRoot(t)
	n := &Netns{NS: linktest.NewNS(t, "vrn")}
	// No IPv6 DAD delays on the links made here later.
	if err := n.Sysctl("net/ipv6/conf/default/accept_dad", "0"); err != nil {
		t.Fatal(err)
	}
	return n
}

// NewBridgeNetns is NewNetns with bridge br0 up, carrying hostCIDR (e.g.
// "192.0.2.1/24"; "" for no address), so the host side of the namespace
// can talk to the guests (ping, the tools' TCP out-of-band exchange).
func NewBridgeNetns(t testing.TB, hostCIDR string) *Netns {
	t.Helper()
	n := NewNetns(t)
	if err := n.AddBridge("br0", hostCIDR); err != nil {
		t.Fatal(err)
	}
	return n
}

// AddBridge creates bridge name (up, no STP, IPv6 off so that it sends no
// router solicitations or MLD reports into captures), with address cidr
// unless it is "".
func (n *Netns) AddBridge(name, cidr string) error {
	var pfx netip.Prefix
	if cidr != "" {
		var err error
		if pfx, err = netip.ParsePrefix(cidr); err != nil {
			return fmt.Errorf("rxepeer: AddBridge %s: %v", name, err)
		}
	}
	if err := n.IP("link", "add", name, "type", "bridge", "stp_state", "0", "forward_delay", "0"); err != nil {
		return err
	}
	if err := n.Sysctl("net/ipv6/conf/"+name+"/disable_ipv6", "1"); err != nil {
		return err
	}
	if pfx.IsValid() {
		if err := n.IP("addr", "add", pfx.String(), "dev", name); err != nil {
			return err
		}
	}
	if err := n.IP("link", "set", name, "up"); err != nil {
		return err
	}
	if n.Bridge == "" {
		n.Bridge, n.HostAddr = name, pfx
	}
	return nil
}

// AddTAP creates a persistent TAP device, enslaved to the namespace's
// bridge if it has one, IPv6 off, up. mtu 0 keeps the default (1500). A
// program then attaches to it by name from inside the namespace (Do).
func (n *Netns) AddTAP(name string, mtu int) error {
	if err := n.IP("tuntap", "add", "dev", name, "mode", "tap"); err != nil {
		return err
	}
	return n.prepare(name, mtu, true)
}

// AddVeth creates a veth pair: peer is enslaved to the bridge, name is left
// free (e.g. for a raw AF_PACKET link). Both have IPv6 off and are up.
func (n *Netns) AddVeth(name, peer string, mtu int) error {
	if err := n.IP("link", "add", name, "type", "veth", "peer", "name", peer); err != nil {
		return err
	}
	if err := n.prepare(peer, mtu, true); err != nil {
		return err
	}
	return n.prepare(name, mtu, false)
}

func (n *Netns) prepare(dev string, mtu int, bridged bool) error {
	if mtu > 0 {
		if err := n.IP("link", "set", dev, "mtu", fmt.Sprint(mtu)); err != nil {
			return err
		}
	}
	if bridged && n.Bridge != "" {
		if err := n.IP("link", "set", dev, "master", n.Bridge); err != nil {
			return err
		}
	}
	if err := n.Sysctl("net/ipv6/conf/"+dev+"/disable_ipv6", "1"); err != nil {
		return err
	}
	return n.IP("link", "set", dev, "up")
}

// IP runs ip(8) in the namespace (ip -n NAME ARGS...).
func (n *Netns) IP(args ...string) error {
	out, err := command(context.Background(), "ip", append([]string{"-n", n.Name}, args...)...)
	if err != nil {
		return fmt.Errorf("rxepeer: ip -n %s %s: %v: %s", n.Name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Exec runs a program in the namespace (ip netns exec) and returns its
// combined output.
func (n *Netns) Exec(ctx context.Context, argv ...string) ([]byte, error) {
	return command(ctx, "ip", append([]string{"netns", "exec", n.Name}, argv...)...)
}

// Sysctl writes a sysctl of the namespace; key is relative to /proc/sys
// (net/ipv6/conf/br0/disable_ipv6).
func (n *Netns) Sysctl(key, value string) error {
	return n.Do(func() error {
		// /proc/sys/net resolves to the namespace of the opening thread.
		return os.WriteFile("/proc/sys/"+key, []byte(value), 0o644)
	})
}

// Netem is a tc netem setting for one device's egress (for a bridge port:
// what the bridge sends into it, e.g. towards a guest).
type Netem struct {
	Loss      float64       // percent of packets dropped
	Duplicate float64       // percent sent twice
	Corrupt   float64       // percent with a flipped bit
	Delay     time.Duration // added to every packet ...
	Jitter    time.Duration // ... give or take this
	// Reorder: percent of packets sent at once while the rest wait Delay,
	// which overtakes them. netem needs a delay for that: 10 ms if Delay is 0.
	Reorder float64
	Limit   int // queue length in packets (netem's default 1000 if 0)
}

// ErrNoNetem: the kernel has no netem qdisc (sch_netem). Tests that need
// loss or reordering should skip on it.
var ErrNoNetem = errors.New("rxepeer: the kernel has no netem qdisc (sch_netem)")

func (e Netem) args() []string {
	var a []string
	if e.Limit > 0 {
		a = append(a, "limit", fmt.Sprint(e.Limit))
	}
	delay := e.Delay
	if e.Reorder > 0 && delay == 0 {
		delay = 10 * time.Millisecond
	}
	if delay > 0 {
		a = append(a, "delay", fmt.Sprintf("%dus", delay.Microseconds()))
		if e.Jitter > 0 {
			a = append(a, fmt.Sprintf("%dus", e.Jitter.Microseconds()))
		}
	}
	pct := func(name string, v float64) {
		if v > 0 {
			a = append(a, name, fmt.Sprintf("%g%%", v))
		}
	}
	pct("loss", e.Loss)
	pct("duplicate", e.Duplicate)
	pct("corrupt", e.Corrupt)
	pct("reorder", e.Reorder)
	return a
}

// SetNetem replaces dev's root qdisc with netem e (ErrNoNetem if the kernel
// lacks it).
func (n *Netns) SetNetem(dev string, e Netem) error {
	args := append([]string{"tc", "qdisc", "replace", "dev", dev, "root", "netem"}, e.args()...)
	out, err := n.Exec(context.Background(), args...)
	if err != nil {
		if strings.Contains(string(out), "qdisc kind is unknown") {
			return fmt.Errorf("%w: %s", ErrNoNetem, strings.TrimSpace(string(out)))
		}
		return fmt.Errorf("rxepeer: %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// ClearNetem puts dev's default qdisc back (no error if none was set).
func (n *Netns) ClearNetem(dev string) error {
	out, err := n.Exec(context.Background(), "tc", "qdisc", "del", "dev", dev, "root")
	if err != nil && !strings.Contains(string(out), "Cannot delete qdisc with handle of zero") &&
		!strings.Contains(string(out), "No such file or directory") {
		return fmt.Errorf("rxepeer: tc qdisc del dev %s root: %v: %s", dev, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Ping sends ICMP echo requests from the namespace to dst (one a second,
// up to ctx's end or 5 s) and returns the round-trip time of the first
// reply.
func (n *Netns) Ping(ctx context.Context, dst netip.Addr) (time.Duration, error) {
	if !dst.Is4() {
		return 0, fmt.Errorf("rxepeer: Ping %v: IPv4 only", dst)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	var c net.PacketConn
	if err := n.Do(func() (err error) {
		c, err = net.ListenPacket("ip4:icmp", "0.0.0.0")
		return err
	}); err != nil {
		return 0, err
	}
	defer c.Close()
	id := uint16(os.Getpid())
	buf := make([]byte, 1500)
	to := &net.IPAddr{IP: dst.AsSlice()}
	for seqNo := uint16(1); ; seqNo++ {
		req := header.ICMPv4(append(make([]byte, header.ICMPHeaderLen), "vrnicd"...))
		req.SetType(header.ICMPv4EchoRequest)
		req.SetIdent(id)
		req.SetSeq(seqNo)
		req.UpdateChecksum()
		sent := time.Now()
		if _, err := c.WriteTo(req, to); err != nil {
			return 0, fmt.Errorf("rxepeer: ping %v: %w", dst, err)
		}
		wait := sent.Add(time.Second)
		if dl, _ := ctx.Deadline(); dl.Before(wait) {
			wait = dl
		}
		_ = c.SetReadDeadline(wait)
		for {
			m, from, err := c.ReadFrom(buf)
			if err != nil {
				break // this round timed out
			}
			b := header.ICMPv4(buf[:m])
			if ip, ok := from.(*net.IPAddr); ok && ip.IP.Equal(to.IP) && len(b) >= header.ICMPHeaderLen &&
				b.Type() == header.ICMPv4EchoReply && b.Ident() == id && b.Seq() == seqNo {
				return time.Since(sent), nil
			}
		}
		if ctx.Err() != nil {
			return 0, fmt.Errorf("rxepeer: no echo reply from %v in namespace %s: %w", dst, n.Name, ctx.Err())
		}
	}
}

// command runs a program with a 60 s limit and returns its combined output.
func command(ctx context.Context, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}
