package wire

import (
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/vrnic/vrnicd/header"
)

// packet4K builds an IPv4 RC_RDMA_WRITE_MIDDLE packet with 4096 bytes of payload.
func packet4K() []byte {
	const payload = 4096
	n := header.IPv4HeaderLen + header.UDPHeaderLen + BTHLen + payload + ICRCLen
	ip := make([]byte, n)
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(n))
	ip[8], ip[9] = 64, 17
	copy(ip[12:], []byte{192, 0, 2, 1, 192, 0, 2, 2})
	binary.BigEndian.PutUint16(ip[22:], RoCEv2Port)
	binary.BigEndian.PutUint16(ip[24:], uint16(n-header.IPv4HeaderLen))
	BTH(ip[28:]).Encode(&BTHFields{Opcode: RCRDMAWriteMiddle, PKey: DefaultPKey, DestQP: 0x11, PSN: 7})
	for i := range payload {
		ip[40+i] = byte(i)
	}
	return ip
}

// BenchmarkICRC4K is the ICRC of a packet with 4 KiB of payload; its
// baseline, BenchmarkCRC32Baseline4K, is crc32.ChecksumIEEE over the same
// bytes. The difference is the cost of the masking.
func BenchmarkICRC4K(b *testing.B) {
	ip := packet4K()
	b.SetBytes(int64(len(ip) - ICRCLen))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ICRC(ip); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCRC32Baseline4K(b *testing.B) {
	ip := packet4K()
	b.SetBytes(int64(len(ip) - ICRCLen))
	b.ReportAllocs()
	var sink uint32
	for b.Loop() {
		sink += crc32.ChecksumIEEE(ip[:len(ip)-ICRCLen])
	}
	_ = sink
}

// BenchmarkParse is the header-view parse of a RETH+ImmDt packet.
func BenchmarkParse(b *testing.B) {
	buf := make([]byte, 64)
	f := PacketFields{BTH: BTHFields{Opcode: RCRDMAWriteOnlyWithImm, PKey: DefaultPKey, DestQP: 0x11, AckReq: true, PSN: 9},
		RETH: RETHFields{VA: 0x1000, RKey: 0x1234, Length: 8}, Imm: 5, Payload: []byte("12345678")}
	buf = buf[:f.Encode(buf)]
	b.ReportAllocs()
	var p Packet
	var sink uint32
	for b.Loop() {
		if err := p.Parse(buf); err != nil {
			b.Fatal(err)
		}
		sink += p.BTH.PSN() + p.RETH.RKey() + p.ImmDt.Imm() + uint32(len(p.Payload))
	}
	_ = sink
}
