package main

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link"
	"github.com/vrnic/vrnicd/nic/link/linktest"
	"github.com/vrnic/vrnicd/nic/netstack"
	"github.com/vrnic/vrnicd/transport/wire"
)

// peer is the far end of a test network: a raw-mode netstack on an
// interface of another namespace, sending hand-built RoCEv2 packets with
// real ICRCs (the kernel there resolves neighbours) and receiving what
// comes back.
type peer struct {
	st *netstack.Stack
	rx chan netstack.RxPacket
}

func newPeer(t *testing.T, ns *linktest.NS, iface string) *peer {
	t.Helper()
	var raw *link.Raw
	if err := ns.Do(func() (err error) {
		raw, err = link.OpenRaw(link.RawConfig{Interface: iface, Filter: link.RoCEFilter()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	p := &peer{rx: make(chan netstack.RxPacket, 256)}
	st, err := netstack.New(netstack.Config{Link: raw, Mode: netstack.ModeRaw, NetNS: ns.Handle,
		Deliver: func(pkts []netstack.RxPacket) {
			for _, x := range pkts {
				x.Frame = append([]byte(nil), x.Frame...)
				x.Transport = append([]byte(nil), x.Transport...)
				select {
				case p.rx <- x:
				default:
				}
			}
		}})
	if err != nil {
		raw.Close()
		t.Fatal(err)
	}
	p.st = st
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { st.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; st.Close(); raw.Close() })
	return p
}

// rcSend builds an RC SEND ONLY to qpn (BTH..ICRC, headroom in front).
func rcSend(qpn, psn uint32, payload int) []byte {
	f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PKey: 0xffff, DestQP: qpn, AckReq: true, PSN: psn},
		Payload: make([]byte, payload)}
	for i := range f.Payload {
		f.Payload[i] = byte(i)
	}
	b := make([]byte, netstack.Headroom+f.EncodedLen())
	f.Encode(b[netstack.Headroom:])
	return b
}

// sendRC sends n RC SENDs to dst's QP qpn.
func (p *peer) sendRC(t *testing.T, dst netip.Addr, qpn uint32, n int) {
	t.Helper()
	for i := range n {
		pkt := rcSend(qpn, uint32(0x100+i), 64)
		if k, err := p.st.Send([]netstack.TxPacket{{Buf: pkt, Offset: netstack.Headroom,
			Dest: &netstack.Dest{Dst: dst, SrcPort: 0xc123}}}); k != 1 || err != nil {
			t.Fatalf("send to %v: %d, %v", dst, k, err)
		}
	}
}

func isPortUnreach(f []byte) bool {
	if len(f) < 14+20+8 {
		return false
	}
	switch binary.BigEndian.Uint16(f[12:]) {
	case 0x0800:
		ihl := int(f[14]&0xf) * 4
		return f[23] == 1 && len(f) >= 14+ihl+2 && f[14+ihl] == 3 && f[14+ihl+1] == 3
	case 0x86dd:
		return len(f) >= 14+40+2 && f[20] == 58 && f[54] == 1 && f[55] == 4
	}
	return false
}

// waitUntil polls cond every 50 ms for up to d.
func waitUntil(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); ; {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// notifySocket is a stand-in for systemd's notification socket.
type notifySocket struct {
	path string
	c    *net.UnixConn
	msgs chan string
}

func newNotifySocket(t *testing.T) *notifySocket {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	n := &notifySocket{path: path, c: c, msgs: make(chan string, 16)}
	go func() {
		b := make([]byte, 4096)
		for {
			k, err := c.Read(b)
			if err != nil {
				close(n.msgs)
				return
			}
			n.msgs <- string(b[:k])
		}
	}()
	t.Cleanup(func() { c.Close() })
	return n
}

// next waits for the next notification.
func (n *notifySocket) next(t *testing.T, d time.Duration) string {
	t.Helper()
	select {
	case m := <-n.msgs:
		return m
	case <-time.After(d):
		t.Fatalf("no sd_notify message within %v", d)
	}
	return ""
}

// ifaceExists reports whether ns has the interface.
func ifaceExists(ns *linktest.NS, name string) bool {
	_, err := ns.TryExec("ip", "link", "show", "dev", name)
	return err == nil
}

// mkWorldDir makes a directory anyone can write (for the daemon run as
// nobody), removed at test end.
func mkWorldDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "vrnicd-test")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o1777)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// recordString reads a string field of a log record.
func recordString(r record, k string) string {
	s, _ := r[k].(string)
	return s
}

func hasField(list, want string) bool {
	for _, f := range strings.FieldsFunc(list, func(r rune) bool { return r == ' ' || r == ',' }) {
		if f == want {
			return true
		}
	}
	return false
}

// dialSeq connects to a daemon socket as a client would.
func dialSeq(path string) (net.Conn, error) {
	return net.DialTimeout("unixpacket", path, 2*time.Second)
}
