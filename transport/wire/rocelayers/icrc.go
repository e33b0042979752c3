package rocelayers

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/vrnic/vrnicd/header"
	"github.com/vrnic/vrnicd/transport/wire"
)

// ErrNotRoCE reports a packet or frame without IPv4/IPv6, UDP and BTH layers.
var ErrNotRoCE = errors.New("rocelayers: not a RoCEv2 packet")

// VerifyPacketICRC checks the ICRC of a decoded Ethernet/IPv4|IPv6/UDP/RoCE
// packet with wire.VerifyICRC: nil, wire.ErrBadICRC, or why it could not be
// checked.
func VerifyPacketICRC(pkt gopacket.Packet) error {
	if pkt.Layer(layers.LayerTypeUDP) == nil || pkt.Layer(LayerTypeBTH) == nil {
		return ErrNotRoCE
	}
	nl := pkt.NetworkLayer()
	if nl == nil {
		return ErrNotRoCE
	}
	return VerifyNetworkICRC(nl)
}

// VerifyNetworkICRC checks the ICRC of the RoCEv2 packet inside a decoded
// IPv4 or IPv6 layer (its header and payload). It works on a copy, since
// wire.ICRC masks the variant fields in place while it runs.
func VerifyNetworkICRC(ip gopacket.Layer) error {
	switch ip.LayerType() {
	case layers.LayerTypeIPv4, layers.LayerTypeIPv6:
	default:
		return fmt.Errorf("%w: %v is not IPv4 or IPv6", ErrNotRoCE, ip.LayerType())
	}
	h, p := ip.LayerContents(), ip.LayerPayload()
	buf := make([]byte, 0, len(h)+len(p))
	return wire.VerifyICRC(append(append(buf, h...), p...))
}

// SealFrame fills in the ICRC of a RoCEv2 Ethernet frame (optionally
// 802.1Q-tagged) serialized with zeros or junk in the ICRC field, then the
// UDP checksum if the frame has one (a zero UDP checksum means none, which
// RoCEv2 allows and kernel rxe sends). The IPv4 header checksum is not
// touched: the ICRC does not cover it.
func SealFrame(frame []byte) error {
	ip, err := framedIP(frame)
	if err != nil {
		return err
	}
	if err := wire.PutICRC(ip); err != nil {
		return err
	}
	ipLen, src, dst := header.IPv4HeaderLen, header.IPv4(ip).Src(), header.IPv4(ip).Dst()
	if ip[0]>>4 == 6 {
		ipLen, src, dst = header.IPv6HeaderLen, header.IPv6(ip).Src(), header.IPv6(ip).Dst()
	}
	udp := header.UDP(ip[ipLen:])
	if udp.Checksum() == 0 {
		return nil
	}
	udp.SetChecksum(0)
	udp.SetChecksum(header.UDPChecksum(src, dst, udp))
	return nil
}

// framedIP is the IP packet of an Ethernet frame, cut to the IP length.
func framedIP(f []byte) ([]byte, error) {
	if len(f) < 14 {
		return nil, fmt.Errorf("%w: %d-byte frame", ErrNotRoCE, len(f))
	}
	et, off := binary.BigEndian.Uint16(f[12:]), 14
	if et == uint16(layers.EthernetTypeDot1Q) && len(f) >= 18 {
		et, off = binary.BigEndian.Uint16(f[16:]), 18
	}
	ip := f[off:]
	var n int
	switch {
	case et == uint16(layers.EthernetTypeIPv4) && len(ip) >= header.IPv4HeaderLen:
		n = int(header.IPv4(ip).TotalLen())
	case et == uint16(layers.EthernetTypeIPv6) && len(ip) >= header.IPv6HeaderLen:
		n = header.IPv6HeaderLen + int(header.IPv6(ip).PayloadLen())
	default:
		return nil, fmt.Errorf("%w: EtherType %#04x", ErrNotRoCE, et)
	}
	if n > len(ip) {
		return nil, fmt.Errorf("%w: IP length %d, frame holds %d", ErrNotRoCE, n, len(ip))
	}
	return ip[:n], nil
}
