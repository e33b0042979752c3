package wire

import (
	"bytes"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/vrnic/vrnicd/header"
)

// The header.IPv4 and header.UDP headers of every RoCEv2 packet kernel rxe sent in the
// captures read back as rxe builds them (prepare_ipv4_hdr, prepare_udp_hdr:
// DF, protocol 17, header.UDP to 4791 without a checksum), and Encode rebuilds the
// header.IPv4 header byte for byte, its checksum included.
func TestIPv4UDPViewsOnKernelCaptures(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(goldenDir, "*.pcap"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no captures in %s: %v", goldenDir, err)
	}
	hosts := map[netip.Addr]bool{netip.MustParseAddr("192.0.2.11"): true, netip.MustParseAddr("192.0.2.12"): true}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			for _, p := range readRoCE(t, path) {
				h := header.IPv4(p.ip)
				if h.Version() != 4 || h.HeaderLen() != header.IPv4HeaderLen || int(h.TotalLen()) != len(p.ip) ||
					h.Protocol() != header.IPProtoUDP || h.Flags() != header.IPv4DontFragment || !h.ChecksumValid() {
					t.Fatalf("frame %d: header.IPv4 % x: version %d, IHL %d, length %d of %d, protocol %d, flags %#x, checksum ok %v",
						p.frame, p.ip[:header.IPv4HeaderLen], h.Version(), h.HeaderLen(), h.TotalLen(), len(p.ip), h.Protocol(), h.Flags(), h.ChecksumValid())
				}
				if !hosts[h.Src()] || !hosts[h.Dst()] || h.Src() == h.Dst() {
					t.Fatalf("frame %d: %v > %v, not the capture's hosts", p.frame, h.Src(), h.Dst())
				}
				var re [header.IPv4HeaderLen]byte
				header.IPv4(re[:]).Encode(&header.IPv4Fields{TOS: h.TOS(), TotalLen: h.TotalLen(), ID: h.ID(), Flags: h.Flags(),
					TTL: h.TTL(), Protocol: h.Protocol(), Src: h.Src().As4(), Dst: h.Dst().As4()})
				if !bytes.Equal(re[:], p.ip[:header.IPv4HeaderLen]) {
					t.Fatalf("frame %d: Encode gives % x, kernel sent % x", p.frame, re, p.ip[:header.IPv4HeaderLen])
				}
				u := header.UDP(p.ip[header.IPv4HeaderLen:])
				if u.DstPort() != RoCEv2Port || int(u.Length()) != len(p.ip)-header.IPv4HeaderLen || u.Checksum() != 0 {
					t.Fatalf("frame %d: header.UDP % x: port %d, length %d of %d, checksum %#04x",
						p.frame, u[:header.UDPHeaderLen], u.DstPort(), u.Length(), len(p.ip)-header.IPv4HeaderLen, u.Checksum())
				}
				var ru [header.UDPHeaderLen]byte
				header.UDP(ru[:]).Encode(u.SrcPort(), u.DstPort(), u.Length())
				if !bytes.Equal(ru[:], u[:header.UDPHeaderLen]) {
					t.Fatalf("frame %d: header.UDP Encode gives % x, kernel sent % x", p.frame, ru, u[:header.UDPHeaderLen])
				}
			}
		})
	}
}
