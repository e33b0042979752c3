package capture

import "encoding/binary"

// RoCEv2 framing as the netstack sends and receives it.
const (
	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86dd
	etherTypeVLAN = 0x8100
	udpPortRoCE   = 4791
	bthLen        = 12
)

// DestQP is the destination QP of a RoCEv2 frame's BTH, and whether frame
// is one (Ethernet, an optional 802.1Q tag, IPv4 without options or IPv6
// without extension headers, UDP port 4791).
func DestQP(frame []byte) (uint32, bool) {
	if len(frame) < 14 {
		return 0, false
	}
	et, off := binary.BigEndian.Uint16(frame[12:]), 14
	if et == etherTypeVLAN && len(frame) >= 18 {
		et, off = binary.BigEndian.Uint16(frame[16:]), 18
	}
	switch et {
	case etherTypeIPv4:
		if len(frame) < off+20 || frame[off]>>4 != 4 || frame[off+9] != 17 {
			return 0, false
		}
		off += int(frame[off]&0x0f) * 4
	case etherTypeIPv6:
		if len(frame) < off+40 || frame[off+6] != 17 {
			return 0, false
		}
		off += 40
	default:
		return 0, false
	}
	if len(frame) < off+8+bthLen || binary.BigEndian.Uint16(frame[off+2:]) != udpPortRoCE {
		return 0, false
	}
	bth := frame[off+8:]
	return uint32(bth[5])<<16 | uint32(bth[6])<<8 | uint32(bth[7]), true
}

// QPFilter picks the frames whose BTH names one of qpns as destination.
func QPFilter(qpns ...uint32) func([]byte) bool {
	return func(frame []byte) bool {
		q, ok := DestQP(frame)
		if !ok {
			return false
		}
		for _, n := range qpns {
			if q == n {
				return true
			}
		}
		return false
	}
}
