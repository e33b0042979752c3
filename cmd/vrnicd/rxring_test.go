package main

import (
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link"
	"github.com/vrnic/vrnicd/nic/link/linktest"
	"github.com/vrnic/vrnicd/transport/wire"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/rocetest"
)

// TestRawRxRingDrops: a raw-mode daemon with --rx-ring-frames 64 is
// stopped (SIGSTOP) while a peer sends it 1000 RoCEv2 frames. Its ring
// holds what fits and the kernel drops the rest; once the daemon runs
// again, it reads what the ring held (frames_in) and link_rx_ring_drops
// counts the rest: together the 1000, most of them dropped (the ring has
// 64 slots rounded up to whole 256 KiB blocks: 330 of 1.6 KB at this
// veth's MTU 1500, as the ready line says).
func TestRawRxRingDrops(t *testing.T) {
	linktest.RequireRoot(t)
	binaries(t)
	nsA, nsB := linktest.NewNS(t, "vra"), linktest.NewNS(t, "vrb")
	va, vb := linktest.UniqueName("ra"), linktest.UniqueName("rb")
	linktest.VethPair(t, nsA, va, nsB, vb)
	nsA.Exec(t, "ip", "addr", "add", "198.51.100.1/24", "dev", va)
	nsB.Exec(t, "ip", "addr", "add", "198.51.100.2/24", "dev", vb)
	d := startDaemon(t, nsB, nil, "--iface", vb, "--rx-ring-frames", "64", "--socket", t.TempDir()+"/b.sock")
	var tx *link.Raw
	var dst net.HardwareAddr
	if err := nsA.Do(func() (err error) {
		tx, err = link.OpenRaw(link.RawConfig{Interface: va})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	if err := nsB.Do(func() error {
		ifi, err := net.InterfaceByName(vb)
		if err == nil {
			dst = ifi.HardwareAddr
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	slots, _ := d.ready["rx_ring_frames"].(float64)
	if slots < 64 || slots > 500 {
		t.Fatalf("ready line: rx_ring_frames %v, want 64 rounded up to two blocks", d.ready["rx_ring_frames"])
	}
	d.signal(syscall.SIGSTOP)
	const sent = 1000
	for i := 0; i < sent; i += 20 {
		fs := make([][]byte, 20)
		for j := range fs {
			fs[j] = rocetest.BuildFrame(&rocetest.FrameSpec{DstMAC: [6]byte(dst), SrcMAC: [6]byte(tx.HardwareAddr()),
				Src: netip.MustParseAddr("198.51.100.1"), Dst: netip.MustParseAddr("198.51.100.2"), Packet: wire.PacketFields{
					BTH:     wire.BTHFields{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x99, PSN: uint32(i + j)},
					Payload: make([]byte, 64)}})
		}
		if _, err := tx.Write(fs, 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // the per-CPU backlog drains into the ring
	}
	time.Sleep(50 * time.Millisecond)
	d.signal(syscall.SIGCONT)
	var drops, in float64
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		ns, _ := d.counters()
		if drops, in = ns["link_rx_ring_drops"], ns["frames_in"]; drops+in >= sent {
			break
		}
	}
	if drops+in != sent || drops < sent-2*slots {
		t.Errorf("link_rx_ring_drops %v and frames_in %v after %d frames into a ring of %v slots", drops, in, sent, slots)
	}
}
