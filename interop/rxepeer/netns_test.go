package rxepeer

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestNetnsDoAndBridge(t *testing.T) {
	n := NewBridgeNetns(t, "192.0.2.1/24")
	if n.Bridge != "br0" || n.HostAddr != netip.MustParsePrefix("192.0.2.1/24") {
		t.Fatalf("bridge %q addr %v", n.Bridge, n.HostAddr)
	}
	// A socket made in Do lives in the namespace: it can bind the bridge's
	// address, which the test's own namespace does not have.
	var l net.Listener
	if err := n.Do(func() (err error) {
		l, err = net.Listen("tcp4", "192.0.2.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := net.Listen("tcp4", "192.0.2.1:0"); err == nil {
		t.Error("192.0.2.1 is bindable outside the namespace: Do did not isolate")
	}
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	var got []byte
	if err := n.Do(func() error {
		c, err := net.DialTimeout("tcp4", l.Addr().String(), 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		got = make([]byte, 2)
		_, err = c.Read(got)
		return err
	}); err != nil || string(got) != "hi" {
		t.Errorf("dial inside the namespace: %q, %v", got, err)
	}

	if _, err := n.Ping(context.Background(), netip.MustParseAddr("192.0.2.1")); err != nil {
		t.Errorf("ping of the bridge's own address: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if _, err := n.Ping(ctx, netip.MustParseAddr("192.0.2.77")); err == nil {
		t.Error("ping of an absent address succeeded")
	}
}

func TestNetnsVethPacketSocket(t *testing.T) {
	n := NewBridgeNetns(t, "")
	if err := n.AddVeth("vx0", "vx0p", 1500); err != nil {
		t.Fatal(err)
	}
	if err := n.AddTAP("vxtap", 1500); err != nil {
		t.Fatal(err)
	}
	out, err := n.Exec(context.Background(), "ip", "-o", "link", "show", "master", "br0")
	if err != nil || !strings.Contains(string(out), "vx0p") || !strings.Contains(string(out), "vxtap") || strings.Contains(string(out), ": vx0@") {
		t.Errorf("bridge ports: %v\n%s", err, out)
	}
	tx, err := n.PacketSocket("vx0")
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	rx, err := n.PacketSocket("br0")
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	frame := append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, tx.MAC...)
	frame = append(frame, 0x88, 0xb5) // IEEE local experimental EtherType
	frame = append(frame, []byte("vrnicd rxepeer packet socket test, padded to 60 bytes...")...)
	if err := tx.Send(frame); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	deadline := time.Now().Add(5 * time.Second)
	for {
		m, outgoing, err := rx.Recv(buf, time.Until(deadline))
		if err != nil {
			t.Fatalf("frame not seen on br0: %v", err)
		}
		if !outgoing && bytes.Equal(buf[:m], frame) {
			break
		}
	}
}

func TestNetem(t *testing.T) {
	n := NewBridgeNetns(t, "")
	if err := n.AddTAP("vxtap", 0); err != nil {
		t.Fatal(err)
	}
	err := n.SetNetem("vxtap", Netem{Loss: 5, Reorder: 10, Delay: time.Millisecond})
	if errors.Is(err, ErrNoNetem) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	out, _ := n.Exec(context.Background(), "tc", "qdisc", "show", "dev", "vxtap")
	if !strings.Contains(string(out), "netem") || !strings.Contains(string(out), "loss 5%") {
		t.Errorf("qdisc after SetNetem:\n%s", out)
	}
	if err := n.ClearNetem("vxtap"); err != nil {
		t.Fatal(err)
	}
	if err := n.ClearNetem("vxtap"); err != nil {
		t.Errorf("second ClearNetem: %v", err)
	}
	out, _ = n.Exec(context.Background(), "tc", "qdisc", "show", "dev", "vxtap")
	if strings.Contains(string(out), "netem") {
		t.Errorf("netem still there after ClearNetem:\n%s", out)
	}
}
