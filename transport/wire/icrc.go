package wire

import (
	"encoding/binary"
	"errors"
	"hash/crc32"

	"github.com/vrnic/vrnicd/header"
)

// Errors of the ICRC functions.
var (
	ErrShortPacket = errors.New("wire: packet too short for IP/UDP/BTH/ICRC")
	ErrIPVersion   = errors.New("wire: not an IPv4 or IPv6 packet")
	ErrIPOptions   = errors.New("wire: IPv4 header with options (RoCEv2 ICRC does not cover them)")
	ErrBadICRC     = errors.New("wire: ICRC mismatch")
)

// lrhCRC is the CRC state after the 8 bytes of 1s that stand in for the IB
// LRH (kernel rxe seeds crc32_le with the same state).
var lrhCRC = crc32.Update(0, crc32.IEEETable, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})

// ICRC computes the invariant CRC of a RoCEv2 packet. ip starts at the IP
// header and runs to the end of the ICRC field; the last four bytes are not
// covered. The variant fields count as all 1s: IPv4 TOS, TTL and header
// checksum, or IPv6 traffic class, flow label and hop limit; the UDP checksum;
// BTH byte 4 (FECN, BECN, reserved). The result is the plain CRC-32/IEEE of
// 8 bytes of 0xFF and the masked packet, and goes on the wire little-endian.
//
// To stay allocation-free and make one pass over the bytes, ICRC writes the
// masks into ip itself and restores the original bytes before it returns, so
// ip must not be read by another goroutine meanwhile.
func ICRC(ip []byte) (uint32, error) {
	if len(ip) < 1 {
		return 0, ErrShortPacket
	}
	var ipLen int
	switch ip[0] >> 4 {
	case 4:
		if ip[0]&0x0f != 5 {
			return 0, ErrIPOptions
		}
		ipLen = header.IPv4HeaderLen
	case 6:
		ipLen = header.IPv6HeaderLen
	default:
		return 0, ErrIPVersion
	}
	if len(ip) < ipLen+header.UDPHeaderLen+BTHLen+ICRCLen {
		return 0, ErrShortPacket
	}
	udp := ipLen
	bth := ipLen + header.UDPHeaderLen
	var saved [8]byte
	if ipLen == header.IPv4HeaderLen {
		saved[0], saved[1], saved[2], saved[3] = ip[1], ip[8], ip[10], ip[11]
		ip[1], ip[8], ip[10], ip[11] = 0xff, 0xff, 0xff, 0xff
	} else {
		saved[0], saved[1], saved[2], saved[3], saved[4] = ip[0], ip[1], ip[2], ip[3], ip[7]
		ip[0] |= 0x0f // traffic class high nibble sits in the low nibble of byte 0
		ip[1], ip[2], ip[3], ip[7] = 0xff, 0xff, 0xff, 0xff
	}
	saved[5], saved[6], saved[7] = ip[udp+6], ip[udp+7], ip[bth+bthResv8a]
	ip[udp+6], ip[udp+7], ip[bth+bthResv8a] = 0xff, 0xff, 0xff

	crc := crc32.Update(lrhCRC, crc32.IEEETable, ip[:len(ip)-ICRCLen])

	if ipLen == header.IPv4HeaderLen {
		ip[1], ip[8], ip[10], ip[11] = saved[0], saved[1], saved[2], saved[3]
	} else {
		ip[0], ip[1], ip[2], ip[3], ip[7] = saved[0], saved[1], saved[2], saved[3], saved[4]
	}
	ip[udp+6], ip[udp+7], ip[bth+bthResv8a] = saved[5], saved[6], saved[7]
	return crc, nil
}

// PutICRC computes the ICRC of ip (as for ICRC) and writes it into the last
// four bytes, little-endian.
func PutICRC(ip []byte) error {
	crc, err := ICRC(ip)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(ip[len(ip)-ICRCLen:], crc)
	return nil
}

// VerifyICRC checks the ICRC in the last four bytes of ip.
func VerifyICRC(ip []byte) error {
	crc, err := ICRC(ip)
	if err != nil {
		return err
	}
	if binary.LittleEndian.Uint32(ip[len(ip)-ICRCLen:]) != crc {
		return ErrBadICRC
	}
	return nil
}
