package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/gopacket/pcapgo"

	"github.com/vrnic/vrnicd/header"
)

// goldenDir holds captures made by kernel rxe (Linux 6.1, real ICRCs),
// copied from the shared reference set.
const goldenDir = "../../testdata/roce"

// rocePacket is one RoCEv2 packet of a capture: frame is the 1-based index in
// the file, ip starts at the IP header, roce at the BTH.
type rocePacket struct {
	frame int
	ip    []byte
	roce  []byte
}

// readRoCE returns the RoCEv2 packets (UDP destination port 4791) of a pcap.
func readRoCE(t testing.TB, path string) []rocePacket {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []rocePacket
	for frame := 1; ; frame++ {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s frame %d: %v", path, frame, err)
		}
		if ip, roce, ok := splitFrame(data); ok {
			out = append(out, rocePacket{frame, ip, roce})
		}
	}
}

// splitFrame finds the IP packet and the UDP payload of an Ethernet frame
// carrying UDP to port 4791.
func splitFrame(f []byte) (ip, roce []byte, ok bool) {
	if len(f) < 14 {
		return nil, nil, false
	}
	et, off := binary.BigEndian.Uint16(f[12:]), 14
	if et == 0x8100 && len(f) >= 18 {
		et, off = binary.BigEndian.Uint16(f[16:]), 18
	}
	ip = f[off:]
	var udp []byte
	switch {
	case et == 0x0800 && len(ip) >= header.IPv4HeaderLen && ip[9] == 17:
		ip = ip[:binary.BigEndian.Uint16(ip[2:])]
		udp = ip[int(ip[0]&0xf)*4:]
	case et == 0x86dd && len(ip) >= header.IPv6HeaderLen && ip[6] == 17:
		ip = ip[:header.IPv6HeaderLen+int(binary.BigEndian.Uint16(ip[4:]))]
		udp = ip[header.IPv6HeaderLen:]
	default:
		return nil, nil, false
	}
	if len(udp) < header.UDPHeaderLen || binary.BigEndian.Uint16(udp[2:]) != RoCEv2Port {
		return nil, nil, false
	}
	return ip, udp[header.UDPHeaderLen:], true
}

func goldenFiles(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(goldenDir, "*.pcap"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden captures in %s: %v", goldenDir, err)
	}
	return files
}

// The counts are those the capture README lists for each file.
var goldenCounts = map[string]int{
	"atomic_cmp_swap.pcap": 10, "atomic_fetch_add.pcap": 10, "rc_send.pcap": 16,
	"rc_send_only.pcap": 8, "rdma_cm_rping.pcap": 29, "rdma_read.pcap": 20,
	"rdma_write.pcap": 20, "rdma_write_lat.pcap": 20, "send_bw.pcap": 20,
	"uc_send.pcap": 4, "ud_send.pcap": 4,
}

func TestGoldenCapturesDecodeVerifyAndReencode(t *testing.T) {
	for _, path := range goldenFiles(t) {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			pkts := readRoCE(t, path)
			if want, ok := goldenCounts[name]; ok && len(pkts) != want {
				t.Errorf("got %d RoCEv2 packets, want %d", len(pkts), want)
			}
			for _, pk := range pkts {
				if err := VerifyICRC(pk.ip); err != nil {
					t.Errorf("frame %d: %v", pk.frame, err)
				}
				var p Packet
				if err := p.Parse(pk.roce); err != nil {
					t.Errorf("frame %d: parse: %v", pk.frame, err)
					continue
				}
				if got := p.BTH.TVer(); got != 0 {
					t.Errorf("frame %d: TVer %d, want 0", pk.frame, got)
				}
				if got := p.BTH.PKey(); got != DefaultPKey {
					t.Errorf("frame %d: P_Key %#x, want 0xffff", pk.frame, got)
				}
				// Re-encode from the decoded fields into a copy of the IP
				// packet and recompute the ICRC: every byte must match.
				f := p.Fields()
				ip := bytes.Clone(pk.ip)
				roceOff := len(pk.ip) - len(pk.roce)
				if n := f.Encode(ip[roceOff:]); n != len(pk.roce) {
					t.Errorf("frame %d: Encode wrote %d bytes, want %d", pk.frame, n, len(pk.roce))
					continue
				}
				if err := PutICRC(ip); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(ip, pk.ip) {
					t.Errorf("frame %d (%s): re-encoded packet differs\n got %x\nwant %x", pk.frame, p.Op.Name, ip[roceOff:], pk.roce)
				}
			}
		})
	}
}

// The project carries copies of the shared captures; when the shared set is
// present, the copies must be identical to it.
func TestGoldenCopiesMatchShared(t *testing.T) {
	shared := filepath.Join("..", "..", "..", "shared", "testdata", "roce")
	if _, err := os.Stat(shared); err != nil {
		t.Skipf("shared captures not present at %s (%v): the project's copies are used alone", shared, err)
	}
	for _, path := range goldenFiles(t) {
		want, err := os.ReadFile(filepath.Join(shared, filepath.Base(path)))
		if err != nil {
			t.Errorf("%s: %v", filepath.Base(path), err)
			continue
		}
		got, _ := os.ReadFile(path)
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the shared capture", filepath.Base(path))
		}
	}
}

// masked reports whether bit i of ip's covered region is a variant field
// that the ICRC masks (so flipping it must not change the ICRC).
func masked(ip []byte, byteIdx int, bit uint) bool {
	ipLen := header.IPv4HeaderLen
	if ip[0]>>4 == 6 {
		ipLen = header.IPv6HeaderLen
	}
	switch {
	case ipLen == header.IPv4HeaderLen && (byteIdx == 1 || byteIdx == 8 || byteIdx == 10 || byteIdx == 11):
		return true
	case ipLen == header.IPv6HeaderLen && (byteIdx == 0 && bit < 4 || byteIdx >= 1 && byteIdx <= 3 || byteIdx == 7):
		return true
	case byteIdx == ipLen+6 || byteIdx == ipLen+7: // UDP checksum
		return true
	case byteIdx == ipLen+header.UDPHeaderLen+4: // BTH resv8a
		return true
	}
	return false
}

func TestICRCDetectsEverySingleBitFlip(t *testing.T) {
	for _, path := range goldenFiles(t) {
		for _, pk := range readRoCE(t, path) {
			ip := bytes.Clone(pk.ip)
			for i := range ip {
				if i == 0 {
					continue // flipping the IP version makes it not a RoCE packet at all
				}
				for bit := uint(0); bit < 8; bit++ {
					ip[i] ^= 1 << bit
					err := VerifyICRC(ip)
					ip[i] ^= 1 << bit
					if masked(ip, i, bit) {
						if err != nil {
							t.Fatalf("%s frame %d: flipping masked byte %d bit %d broke the ICRC", filepath.Base(path), pk.frame, i, bit)
						}
					} else if err == nil {
						t.Fatalf("%s frame %d: flipping byte %d bit %d went undetected", filepath.Base(path), pk.frame, i, bit)
					}
				}
			}
		}
	}
}
