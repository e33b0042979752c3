package main

import (
	"encoding/binary"
	"fmt"
	"net"
)

// Header sizes of a RoCEv2 packet on Ethernet, as vrnicd builds it.
const (
	ethLen  = 14
	ipv4Len = 20
	ipv6Len = 40
	udpLen  = 8
	bthLen  = 12
	rethLen = 16
	icrcLen = 4
)

// shape is one kind of RoCEv2 packet: its BTH opcode and extended headers.
type shape struct {
	name   string
	opcode byte // RC opcode (IBA 9.2, table 38)
	ext    int  // bytes of extended transport headers after the BTH
}

var shapes = map[string]shape{
	"write_middle": {"write_middle", 0x07, 0},      // RDMA WRITE MIDDLE
	"write_first":  {"write_first", 0x06, rethLen}, // RDMA WRITE FIRST: RETH
	"write_only":   {"write_only", 0x0a, rethLen},  // RDMA WRITE ONLY: RETH
	"send_only":    {"send_only", 0x04, 0},         // SEND ONLY
	"read_middle":  {"read_middle", 0x0e, 0},       // RDMA READ RESPONSE MIDDLE
}

// frameLen is the Ethernet frame (no FCS) of a payload-byte packet.
func frameLen(s shape, payload int, v6 bool) int {
	ip := ipv4Len
	if v6 {
		ip = ipv6Len
	}
	return ethLen + ip + udpLen + bthLen + s.ext + payload + icrcLen
}

// buildFrame lays out a RoCEv2 packet from src to dst (MACs and IPs) for
// destination QP qp with PSN psn. The ICRC is left zero: nothing on the
// path checks it, and a receiver counts frames, not verbs.
func buildFrame(s shape, payload int, v6 bool, dstMAC, srcMAC net.HardwareAddr, qp, psn uint32) []byte {
	f := make([]byte, frameLen(s, payload, v6))
	copy(f, dstMAC)
	copy(f[6:], srcMAC)
	ip := f[ethLen:]
	var udp []byte
	if v6 {
		binary.BigEndian.PutUint16(f[12:], 0x86dd)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(len(ip)-ipv6Len))
		ip[6], ip[7] = 17, 64
		copy(ip[8:], net.ParseIP("2001:db8::1"))
		copy(ip[24:], net.ParseIP("2001:db8::2"))
		udp = ip[ipv6Len:]
	} else {
		binary.BigEndian.PutUint16(f[12:], 0x0800)
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
		binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF, as rxe sends
		ip[8], ip[9] = 64, 17
		copy(ip[12:], []byte{192, 0, 2, 1, 192, 0, 2, 2})
		binary.BigEndian.PutUint16(ip[10:], ipSum(ip[:ipv4Len]))
		udp = ip[ipv4Len:]
	}
	binary.BigEndian.PutUint16(udp[0:], 0xc000)
	binary.BigEndian.PutUint16(udp[2:], 4791)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	bth := udp[udpLen:]
	bth[0] = s.opcode
	binary.BigEndian.PutUint16(bth[2:], 0xffff)
	binary.BigEndian.PutUint32(bth[4:], qp&0xffffff)
	binary.BigEndian.PutUint32(bth[8:], psn&0xffffff)
	return f
}

func ipSum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}

// framePSN reads the BTH PSN of a frame buildFrame made, ok false if f is
// not RoCEv2 over untagged IPv4/IPv6.
func framePSN(f []byte) (uint32, bool) {
	if len(f) < ethLen+ipv4Len {
		return 0, false
	}
	off := ethLen + ipv6Len
	if binary.BigEndian.Uint16(f[12:]) == 0x0800 {
		off = ethLen + int(f[ethLen]&0xf)*4
	}
	if len(f) < off+udpLen+bthLen || binary.BigEndian.Uint16(f[off+2:]) != 4791 {
		return 0, false
	}
	return binary.BigEndian.Uint32(f[off+udpLen+8:]) & 0xffffff, true
}

func describe(s shape, payload int, v6 bool) string {
	ipn := "IPv4"
	if v6 {
		ipn = "IPv6"
	}
	return fmt.Sprintf("%s %d B payload over %s: %d B frames", s.name, payload, ipn, frameLen(s, payload, v6))
}
