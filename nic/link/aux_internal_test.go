package link

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vrnic/vrnicd/header"
)

// udpFrame builds an untagged Ethernet frame with UDP to port 4791 whose
// checksum field holds partial (what a CHECKSUM_PARTIAL sender leaves).
func udpFrame(v6 bool, payload []byte, partial uint16) []byte {
	ipLen, etype := header.IPv4HeaderLen, uint16(header.EtherTypeIPv4)
	if v6 {
		ipLen, etype = header.IPv6HeaderLen, header.EtherTypeIPv6
	}
	udpLen := header.UDPHeaderLen + len(payload)
	f := make([]byte, header.EthernetHeaderLen+ipLen+udpLen)
	header.Ethernet(f).Encode([6]byte{}, [6]byte{}, etype)
	ip := f[header.EthernetHeaderLen:]
	if v6 {
		header.IPv6(ip).Encode(&header.IPv6Fields{PayloadLen: uint16(udpLen), NextHeader: header.IPProtoUDP, HopLimit: 64,
			Src: netip.MustParseAddr("fe80::1").As16(), Dst: netip.MustParseAddr("fe80::2").As16()})
	} else {
		header.IPv4(ip).Encode(&header.IPv4Fields{TotalLen: uint16(ipLen + udpLen), TTL: 64, Protocol: header.IPProtoUDP,
			Src: [4]byte{192, 0, 2, 1}, Dst: [4]byte{192, 0, 2, 2}})
	}
	udp := header.UDP(ip[ipLen:])
	udp.Encode(49152, 4791, uint16(udpLen))
	udp.SetChecksum(partial)
	copy(udp[header.UDPHeaderLen:], payload)
	return f
}

// udpChecksumOK reports whether frame f (as built by udpFrame) carries a
// correct, non-zero UDP checksum.
func udpChecksumOK(t *testing.T, f []byte) bool {
	t.Helper()
	ip := f[header.EthernetHeaderLen:]
	var src, dst netip.Addr
	var udp header.UDP
	if header.Ethernet(f).Type() == header.EtherTypeIPv6 {
		h := header.IPv6(ip)
		src, dst, udp = h.Src(), h.Dst(), header.UDP(ip[header.IPv6HeaderLen:])
	} else {
		h := header.IPv4(ip)
		src, dst, udp = h.Src(), h.Dst(), header.UDP(ip[h.HeaderLen():])
	}
	return udp.Checksum() != 0 && header.L4Checksum(src, dst, header.IPProtoUDP, udp) == 0
}

func TestKeepFramesFinishesPartialChecksums(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, size := range []int{0, 1, 13, 1000} {
			f := udpFrame(v6, bytes.Repeat([]byte{0xa5}, size), 0x1234)
			if udpChecksumOK(t, f) {
				t.Fatalf("v6=%v size %d: the partial checksum already verifies", v6, size)
			}
			const off = 4
			bufs := [][]byte{append(make([]byte, off), f...)}
			sizes := []int{len(f)}
			if n := keepFrames(bufs, sizes, off, 1, func(int) uint32 { return unix.TP_STATUS_CSUMNOTREADY }); n != 1 {
				t.Fatalf("kept %d frames, want 1", n)
			}
			if got := bufs[0][off : off+sizes[0]]; !udpChecksumOK(t, got) {
				t.Errorf("v6=%v size %d: checksum not finished: %x", v6, size, got)
			}
		}
	}
}

func TestKeepFramesLeavesReadyChecksums(t *testing.T) {
	f := udpFrame(false, []byte("payload"), 0x1234)
	want := append([]byte(nil), f...)
	bufs, sizes := [][]byte{f}, []int{len(f)}
	if n := keepFrames(bufs, sizes, 0, 1, func(int) uint32 { return unix.TP_STATUS_USER | unix.TP_STATUS_CSUM_VALID }); n != 1 || !bytes.Equal(bufs[0], want) {
		t.Fatalf("a frame with a ready checksum was changed: n=%d %x", n, bufs[0])
	}
}

func TestKeepFramesDropsVLANTagged(t *testing.T) {
	mk := func(b byte) []byte { return udpFrame(false, []byte{b, b, b}, 0) }
	frames := [][]byte{mk(1), mk(2), mk(3), mk(4)}
	bufs, sizes := make([][]byte, len(frames)), make([]int, len(frames))
	for i, f := range frames {
		bufs[i] = make([]byte, 2048)
		sizes[i] = copy(bufs[i], f)
	}
	tagged := map[int]bool{0: true, 2: true}
	n := keepFrames(bufs, sizes, 0, 4, func(i int) uint32 {
		if tagged[i] {
			return unix.TP_STATUS_VLAN_VALID
		}
		return 0
	})
	if n != 2 {
		t.Fatalf("kept %d frames, want 2", n)
	}
	for i, want := range [][]byte{frames[1], frames[3]} {
		if got := bufs[i][:sizes[i]]; !bytes.Equal(got, want) {
			t.Errorf("frame %d = %x, want %x", i, got, want)
		}
	}
}

func TestFinishUDPChecksumIgnoresMalformed(t *testing.T) {
	good := udpFrame(true, []byte("x"), 0x1234)
	for name, f := range map[string][]byte{
		"runt":             good[:10],
		"short IPv6":       good[:14+39],
		"length too big":   func() []byte { g := bytes.Clone(good); g[14+4] = 0xff; return g }(),
		"not UDP":          func() []byte { g := bytes.Clone(good); g[14+6] = 6; return g }(),
		"ARP":              func() []byte { g := bytes.Clone(good); header.Ethernet(g).SetType(header.EtherTypeARP); return g }(),
		"IPv4 bad IHL":     func() []byte { g := udpFrame(false, nil, 1); g[14] = 0x41; return g }(),
		"IPv4 short UDP":   func() []byte { g := udpFrame(false, nil, 1); binary.BigEndian.PutUint16(g[16:], 24); return g }(),
		"IPv4 total > len": func() []byte { g := udpFrame(false, nil, 1); binary.BigEndian.PutUint16(g[16:], 900); return g }(),
	} {
		want := bytes.Clone(f)
		finishUDPChecksum(f)
		if !bytes.Equal(f, want) {
			t.Errorf("%s: frame changed", name)
		}
	}
}
