package netstack

import (
	"github.com/vrnic/vrnicd/transport/clock"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link"
)

const benchPayload = 4096

// drain reads and discards everything arriving at l.
func drain(l link.Link) {
	bufs := make([][]byte, l.BatchSize())
	sizes := make([]int, len(bufs))
	for i := range bufs {
		bufs[i] = make([]byte, 9100)
	}
	for {
		if _, err := l.Read(bufs, sizes, 0); err != nil {
			return
		}
	}
}

// BenchmarkSend compares the RoCE send path (UDP/IP/Ethernet headers + ICRC
// for a 4 KiB payload, then the pipe) with writing a prebuilt frame of the
// same size to the same pipe.
func BenchmarkSend(b *testing.B) {
	mk := func(b *testing.B) (*link.PipeEnd, *Stack) {
		a, peer := link.NewPipe(link.PipeConfig{MTU: 9000, MAC: [2]net.HardwareAddr{stackMAC, peerMAC}})
		go drain(peer)
		b.Cleanup(func() { a.Close(); peer.Close() })
		st, err := New(Config{Link: a, Clock: clock.NewManual(time.Unix(1_000_000, 0)), Addrs: []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24")}})
		if err != nil {
			b.Fatal(err)
		}
		st.neigh.confirm(peerV4, [6]byte(peerMAC), true)
		return a, st
	}
	b.Run("baseline-raw-frame-4KiB", func(b *testing.B) {
		a, _ := mk(b)
		f := peerFrame(b, false, benchPayload, false)
		bufs := [][]byte{f}
		b.SetBytes(int64(len(f)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := a.Write(bufs, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("roce-send-4KiB", func(b *testing.B) {
		_, st := mk(b)
		buf := transport(benchPayload)
		pkts := []TxPacket{{Buf: buf, Offset: Headroom, Dest: &Dest{Dst: peerV4, SrcPort: 0xc000}}}
		b.SetBytes(int64(len(buf) - Headroom + HeaderLenIPv4))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := st.Send(pkts); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("roce-send-4KiB-ipv6", func(b *testing.B) {
		_, st := mk(b)
		st.neigh.confirm(peerV6, [6]byte(peerMAC), true)
		st.setAddrs([]netip.Prefix{netip.MustParsePrefix("2001:db8::10/64")})
		buf := transport(benchPayload)
		pkts := []TxPacket{{Buf: buf, Offset: Headroom, Dest: &Dest{Dst: peerV6, SrcPort: 0xc000}}}
		b.SetBytes(int64(len(buf) - Headroom + HeaderLenIPv6))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := st.Send(pkts); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkReceive compares moving a 4 KiB RoCE frame through the pipe
// alone with moving it through the pipe and the receive checks (parse, IP
// checksum, ICRC).
func BenchmarkReceive(b *testing.B) {
	run := func(b *testing.B, f []byte, check bool) {
		a, peer := link.Pipe(9000)
		defer a.Close()
		defer peer.Close()
		st := rxStack(b)
		defer st.Close()
		if err := st.JoinGroup(group4); err != nil {
			b.Fatal(err)
		}
		in := [][]byte{f}
		bufs := [][]byte{make([]byte, 9100)}
		sizes := []int{0}
		b.SetBytes(int64(len(f)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := peer.Write(in, 0); err != nil {
				b.Fatal(err)
			}
			if _, err := a.Read(bufs, sizes, 0); err != nil {
				b.Fatal(err)
			}
			if check {
				if _, ok := st.input(bufs[0][:sizes[0]]); !ok {
					b.Fatal("dropped")
				}
			}
		}
	}
	f := peerFrame(b, false, benchPayload, false)
	b.Run("baseline-pipe-4KiB", func(b *testing.B) { run(b, f, false) })
	b.Run("pipe+roce-receive-4KiB", func(b *testing.B) { run(b, f, true) })
	// To a joined group: the group table's lookup besides.
	b.Run("pipe+roce-receive-4KiB-multicast", func(b *testing.B) { run(b, groupFrameSize(b, group4, benchPayload), true) })
}
