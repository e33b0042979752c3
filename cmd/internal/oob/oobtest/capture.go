// Package oobtest reads the out-of-band exchanges of kernel-tool captures
// for tests: the TCP 18515 conversation, each direction reassembled, cut
// into the runs of bytes each side sent before the other answered, and
// the RoCE packets beside it.
package oobtest

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/vrnic/vrnicd/transport/wire"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/rocetest"
)

// Port is the TCP port of the exchanges.
const Port = 18515

// Chunk is a run of bytes one side sent before the other sent anything,
// in the order the capture shows them.
type Chunk struct {
	FromClient bool
	Frame      int // the frame that carried its first byte
	Data       []byte
}

func (c Chunk) String() string {
	dir := "S>C"
	if c.FromClient {
		dir = "C>S"
	}
	return fmt.Sprintf("#%d %s %d %s", c.Frame, dir, len(c.Data), Quote(c.Data))
}

// RoCEPacket is a RoCEv2 packet of the capture.
type RoCEPacket struct {
	Frame    int
	Src, Dst netip.Addr
	Pkt      wire.Packet
}

// Capture is what a capture holds for these tests.
type Capture struct {
	Name     string
	Chunks   []Chunk
	ToServer []byte // the client's whole stream
	ToClient []byte // the server's whole stream
	Client   netip.Addr
	Server   netip.Addr
	RoCE     []RoCEPacket
}

// Golden is the path of a capture of testdata/roce.
func Golden(name string) (string, error) {
	dir, err := rocetest.Dir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, name), nil
}

type segment struct {
	frame int
	off   uint32
	data  []byte
}

// Read reassembles both directions of the TCP connection to Port (by
// sequence number from the SYN, dropping retransmitted bytes, holding
// out-of-order ones until the gap fills) and cuts the transcript into
// chunks at each change of direction.
func Read(path string) (*Capture, error) {
	name := filepath.Base(path)
	frames, err := rocetest.ReadFrames(path)
	if err != nil {
		return nil, err
	}
	c := &Capture{Name: name}
	type half struct {
		base    uint32
		haveSYN bool
		next    uint32
		pending []segment
		stream  *[]byte
	}
	halves := map[bool]*half{true: {stream: &c.ToServer}, false: {stream: &c.ToClient}}
	var order []segment
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
				return nil, fmt.Errorf("%s frame %d: RoCE packet: %w", name, f.N, err)
			}
			c.RoCE = append(c.RoCE, RoCEPacket{Frame: f.N, Src: src, Dst: dst, Pkt: p})
			continue
		}
		tcp, ok := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if !ok || (tcp.DstPort != Port && tcp.SrcPort != Port) {
			continue
		}
		fromClient := tcp.DstPort == Port
		if fromClient {
			c.Client, c.Server = src, dst
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
			return nil, fmt.Errorf("%s frame %d: data before the SYN", name, f.N)
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
			return nil, fmt.Errorf("%s: %d segments never became contiguous (client side %v)", name, len(h.pending), fromClient)
		}
	}
	for i, s := range order {
		if n := len(c.Chunks); n > 0 && c.Chunks[n-1].FromClient == dirOf[i] {
			c.Chunks[n-1].Data = append(c.Chunks[n-1].Data, s.data...)
			continue
		}
		c.Chunks = append(c.Chunks, Chunk{FromClient: dirOf[i], Frame: s.frame, Data: append([]byte(nil), s.data...)})
	}
	if len(c.Chunks) == 0 {
		return nil, errors.New(name + ": no TCP 18515 payload")
	}
	return c, nil
}

// Quote shows a message the way the capture listings do: printable bytes
// as is, the rest escaped, trailing NULs counted.
func Quote(b []byte) string {
	n := len(b)
	for n > 0 && b[n-1] == 0 {
		n--
	}
	s := strconv.Quote(string(b[:n]))
	if pad := len(b) - n; pad > 0 {
		s += fmt.Sprintf(" + %d NUL", pad)
	}
	return s
}
