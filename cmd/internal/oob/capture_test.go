package oob

import (
	"bytes"
	"fmt"
	"net/netip"
	"path/filepath"
	"sort"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/vrnic/vrnicd/transport/wire"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/rocetest"
)

// chunk is a run of bytes one side sent before the other sent anything,
// in the order the capture shows them.
type chunk struct {
	fromClient bool
	frame      int // the frame that carried its first byte
	data       []byte
}

func (c chunk) String() string {
	dir := "S>C"
	if c.fromClient {
		dir = "C>S"
	}
	return fmt.Sprintf("#%d %s %d %s", c.frame, dir, len(c.data), quote(c.data))
}

// rocePkt is a RoCEv2 packet of the capture.
type rocePkt struct {
	frame    int
	src, dst netip.Addr
	pkt      wire.Packet
}

// capture is what a golden pcap holds for these tests: the TCP 18515
// transcript, each direction reassembled, and the RoCE packets.
type capture struct {
	name     string
	chunks   []chunk
	toServer []byte // the client's whole stream
	toClient []byte // the server's whole stream
	client   netip.Addr
	server   netip.Addr
	roce     []rocePkt
}

// segment is one TCP segment's payload at its stream offset.
type segment struct {
	frame int
	off   uint32
	data  []byte
}

// readCapture reassembles both directions of the TCP connection to port
// 18515 (by sequence number from the SYN, dropping retransmitted bytes,
// holding out-of-order ones until the gap fills) and cuts the transcript
// into chunks at each change of direction.
func readCapture(t *testing.T, name string) *capture {
	t.Helper()
	dir, err := rocetest.Dir()
	if err != nil {
		t.Fatal(err)
	}
	return readCaptureFile(t, filepath.Join(dir, name))
}

func readCaptureFile(t *testing.T, path string) *capture {
	t.Helper()
	name := filepath.Base(path)
	frames, err := rocetest.ReadFrames(path)
	if err != nil {
		t.Fatal(err)
	}
	c := &capture{name: name}
	type half struct {
		base    uint32
		haveSYN bool
		next    uint32
		pending []segment
		stream  *[]byte
	}
	halves := map[bool]*half{true: {stream: &c.toServer}, false: {stream: &c.toClient}}
	var order []segment // new bytes as they became contiguous, with direction in frame sign
	var dirOf []bool
	for _, f := range frames {
		pkt := gopacket.NewPacket(f.Data, layers.LayerTypeEthernet, gopacket.Default)
		ip4, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if ip4 == nil {
			continue
		}
		src, _ := netip.AddrFromSlice(ip4.SrcIP.To4())
		dst, _ := netip.AddrFromSlice(ip4.DstIP.To4())
		if udp, ok := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP); ok && udp.DstPort == 4791 {
			var p wire.Packet
			if err := p.Parse(udp.Payload); err != nil {
				t.Fatalf("%s frame %d: RoCE packet: %v", name, f.N, err)
			}
			c.roce = append(c.roce, rocePkt{frame: f.N, src: src, dst: dst, pkt: p})
			continue
		}
		tcp, ok := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if !ok || (tcp.DstPort != DefaultPort && tcp.SrcPort != DefaultPort) {
			continue
		}
		fromClient := tcp.DstPort == DefaultPort
		if fromClient {
			c.client, c.server = src, dst
		}
		h := halves[fromClient]
		if tcp.SYN {
			h.base, h.haveSYN, h.next = tcp.Seq+1, true, 0
			continue
		}
		if len(tcp.Payload) == 0 {
			continue
		}
		if !h.haveSYN {
			t.Fatalf("%s frame %d: data before the SYN", name, f.N)
		}
		h.pending = append(h.pending, segment{f.N, tcp.Seq - h.base, append([]byte(nil), tcp.Payload...)})
		sort.SliceStable(h.pending, func(i, j int) bool { return h.pending[i].off < h.pending[j].off })
		for len(h.pending) > 0 && h.pending[0].off <= h.next {
			s := h.pending[0]
			h.pending = h.pending[1:]
			end := s.off + uint32(len(s.data))
			if end <= h.next {
				continue // a retransmission of bytes we have
			}
			fresh := s.data[h.next-s.off:]
			*h.stream = append(*h.stream, fresh...)
			order = append(order, segment{s.frame, h.next, fresh})
			dirOf = append(dirOf, fromClient)
			h.next = end
		}
	}
	for fromClient, h := range halves {
		if len(h.pending) > 0 {
			t.Fatalf("%s: %d segments never became contiguous (client side %v)", name, len(h.pending), fromClient)
		}
	}
	for i, s := range order {
		if n := len(c.chunks); n > 0 && c.chunks[n-1].fromClient == dirOf[i] {
			c.chunks[n-1].data = append(c.chunks[n-1].data, s.data...)
			continue
		}
		c.chunks = append(c.chunks, chunk{fromClient: dirOf[i], frame: s.frame, data: append([]byte(nil), s.data...)})
	}
	if len(c.chunks) == 0 {
		t.Fatalf("%s: no TCP %d payload", name, DefaultPort)
	}
	return c
}

// messages cuts a stream into messages of the given sizes and checks that
// nothing is left over.
func messages(t *testing.T, what string, stream []byte, sizes ...int) [][]byte {
	t.Helper()
	var out [][]byte
	for _, n := range sizes {
		if len(stream) < n {
			t.Fatalf("%s: stream ends %d bytes into a %d-byte message", what, len(stream), n)
		}
		out = append(out, stream[:n])
		stream = stream[n:]
	}
	if len(stream) != 0 {
		t.Fatalf("%s: %d bytes after the expected messages: %s", what, len(stream), quote(stream))
	}
	return out
}

// gid4 is the IPv4-mapped GID of a.
func gid4(a netip.Addr) [16]byte { return netip.AddrFrom16(a.As16()).As16() }

func TestCaptureTranscripts(t *testing.T) {
	// The shape of every exchange: who writes first and how many bytes,
	// in the order the capture saw them.
	for _, name := range []string{"rc_send.pcap", "rc_send_only.pcap", "uc_send.pcap", "ud_send.pcap", "rdma_write.pcap", "rdma_read.pcap", "send_bw.pcap", "atomic_cmp_swap.pcap", "atomic_fetch_add.pcap", "rdma_write_lat.pcap"} {
		c := readCapture(t, name)
		for _, ch := range c.chunks {
			t.Logf("%s %v", name, ch)
		}
		if !c.chunks[0].fromClient {
			t.Errorf("%s: the server wrote first", name)
		}
		if g := gid4(c.client); !bytes.Equal(g[:12], []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}) {
			t.Errorf("%s: no IPv4 client", name)
		}
	}
}
