package main

import (
	"encoding/binary"
	"net"
	"testing"
)

// TestFrameLenMatchesKernelCaptures: the sizes are those of frames kernel
// rxe put on the wire at a 1024-byte path MTU (the captures in
// /work/shared/testdata/roce: rdma_write.pcap, send_bw.pcap), so the link
// is measured with the frames vrnicd, speaking rxe's wire format, sends.
func TestFrameLenMatchesKernelCaptures(t *testing.T) {
	for _, c := range []struct {
		op      string
		payload int
		want    int
	}{
		{"write_first", 1024, 1098}, // rdma_write.pcap, opcode 0x06
		{"write_middle", 1024, 1082},
		{"read_middle", 1024, 1082}, // rdma_read.pcap, opcode 0x0e
		{"send_only", 64, 122},      // send_bw.pcap, opcode 0x04
	} {
		if got := frameLen(shapes[c.op], c.payload, false); got != c.want {
			t.Errorf("%s %d B: frame %d B, want %d", c.op, c.payload, got, c.want)
		}
	}
}

func TestBuildFrame(t *testing.T) {
	dst, src := net.HardwareAddr{2, 0, 0, 0, 0, 2}, net.HardwareAddr{2, 0, 0, 0, 0, 1}
	for _, v6 := range []bool{false, true} {
		f := buildFrame(shapes["write_middle"], 4096, v6, dst, src, 0x123456, 77)
		if len(f) != frameLen(shapes["write_middle"], 4096, v6) {
			t.Fatalf("v6=%v: length %d", v6, len(f))
		}
		ipl := ipv4Len
		if v6 {
			ipl = ipv6Len
		} else if ipSum(f[ethLen:ethLen+ipv4Len]) != 0 {
			t.Errorf("IPv4 header checksum does not verify")
		}
		udp := f[ethLen+ipl:]
		if binary.BigEndian.Uint16(udp[2:]) != 4791 || int(binary.BigEndian.Uint16(udp[4:])) != len(udp) {
			t.Errorf("v6=%v: UDP port %d length %d of %d", v6, binary.BigEndian.Uint16(udp[2:]), binary.BigEndian.Uint16(udp[4:]), len(udp))
		}
		if qp := binary.BigEndian.Uint32(udp[8+4:]) & 0xffffff; qp != 0x123456 {
			t.Errorf("DestQP %#x", qp)
		}
		setPSN(f, 0xabcdef)
		if psn, ok := framePSN(f); !ok || psn != 0xabcdef {
			t.Errorf("v6=%v: PSN %#x, %v", v6, psn, ok)
		}
	}
}
