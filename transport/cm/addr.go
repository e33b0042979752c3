package cm

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
)

// rdma_cm port spaces (include/rdma/rdma_cm.h) that connect over the IB CM.
const (
	PortSpaceTCP = mad.PortSpaceTCP // RC/UC, REQ/REP
	PortSpaceUDP = mad.PortSpaceUDP // UD, SIDR
	PortSpaceIB  = mad.PortSpaceIB  // either, by QP type
)

// UDPQKey is the Q_Key rdma_cm gives every UD QP of RDMA_PS_UDP (RDMA_UDP_QKEY).
const UDPQKey = 0x01234567

// Private-data room of each CM message (IBA 12.6, the tables of 12.6.5 to
// 12.6.11 and 12.11). rdma_cm takes CMAHeaderLen of a REQ's and a SIDR_REQ's
// for the cma_hdr, so its consumers get the rest.
const (
	REQPrivateLen     = 92
	MRAPrivateLen     = 222
	REJPrivateLen     = 148
	REPPrivateLen     = 196
	RTUPrivateLen     = 224
	DREQPrivateLen    = 220
	DREPPrivateLen    = 224
	SIDRREQPrivateLen = 216
	SIDRREPPrivateLen = 136

	CMAHeaderLen          = mad.CMAHeaderLen
	REQUserPrivateLen     = REQPrivateLen - CMAHeaderLen     // 56
	SIDRREQUserPrivateLen = SIDRREQPrivateLen - CMAHeaderLen // 180
)

// ErrPrivateData is returned when private data does not fit its message.
var ErrPrivateData = errors.New("cm: private data too long")

// ServiceID is the service ID rdma_cm listens on and connects to for an IP
// port space and port (cma.c rdma_get_service_id): (port space << 16) | port,
// 0x0000000001061C06 for TCP port 7174.
func ServiceID(portSpace, port uint16) uint64 { return mad.IPServiceID(portSpace, port) }

// ServicePortSpace is the port space of an IP service ID.
func ServicePortSpace(sid uint64) uint16 { return uint16(sid >> 16) }

// GIDFromAddr is the RoCEv2 GID of an IP address (rdma_ip2gid): IPv4 mapped
// into IPv6 (::ffff:a.b.c.d), IPv6 as it is.
func GIDFromAddr(a netip.Addr) mad.GID { return mad.GID(a.Unmap().As16()) }

// AddrFromGID is the IP address of a RoCEv2 GID; an IPv4-mapped GID gives
// the IPv4 address.
func AddrFromGID(g mad.GID) netip.Addr { return netip.AddrFrom16(g).Unmap() }

// RoCEFlowLabel is the flow label rdma_cm puts in a RoCE path when the
// source address carries none (cma.c cma_get_roce_udp_flow_label): a hash
// of the ports, sport*31 + dport, cut to 20 bits.
func RoCEFlowLabel(sport, dport uint16) uint32 {
	return (uint32(sport)*31 + uint32(dport)) & 0xFFFFF
}

// FlowLabelUDPSport is the RoCEv2 UDP source port a QP on a path with flow
// label fl sends from (ib_verbs.h rdma_flow_label_to_udp_sport): the label's
// top six bits folded into its low fourteen, in 0xC000-0xFFFF.
func FlowLabelUDPSport(fl uint32) uint16 {
	low, high := fl&0x3FFF, fl&0xFC000
	low ^= high >> 14
	return uint16(low | 0xC000)
}

// Route is what rdma_resolve_route knows of a RoCE path: the two IP
// addresses and what the IP route and the netdev add. There is no SA on
// RoCE; the path is made up from these (cma.c cma_resolve_iboe_route).
type Route struct {
	Src, Dst       netip.Addr
	PathMTU        uint8  // IB MTU code, 1 (256) to 5 (4096)
	HopLimit       uint8  // IP TTL; 64 for a routed path as the kernel's is
	TrafficClass   uint8  // ToS of the rdma_cm ID
	FlowLabel      uint32 // 20 bits; see RoCEFlowLabel
	PacketLifeTime uint8  // exponent; CMA_IBOE_PACKET_LIFETIME
}

// ErrAddr is returned for addresses rdma_cm cannot connect.
var ErrAddr = errors.New("cm: bad address")

// Path is the REQ path rdma_cm sends for the route: GIDs from the IP
// addresses, permissive LIDs (RoCE has none; the kernel writes 0xFFFF), the
// route's hop limit, traffic class and flow label, SL 0, and a Local ACK
// Timeout from the life time and the local CA's ACK delay.
func (r Route) Path(caAckDelay uint8) (mad.Path, error) {
	if !r.Src.IsValid() || !r.Dst.IsValid() || r.Src.Unmap().Is4() != r.Dst.Unmap().Is4() {
		return mad.Path{}, fmt.Errorf("%w: %v to %v", ErrAddr, r.Src, r.Dst)
	}
	if !ValidMTU(r.PathMTU) {
		return mad.Path{}, fmt.Errorf("cm: path MTU code %d", r.PathMTU)
	}
	return mad.Path{
		LocalLID: 0xFFFF, RemoteLID: 0xFFFF,
		LocalGID: GIDFromAddr(r.Src), RemoteGID: GIDFromAddr(r.Dst),
		FlowLabel: r.FlowLabel & 0xFFFFF, TrafficClass: r.TrafficClass, HopLimit: r.HopLimit,
		LocalACKTimeout: ackTimeout(caAckDelay, r.PacketLifeTime),
	}, nil
}

// ValidMTU reports whether m is an IB MTU code (IBA 9.7.6.1.1 / Table 210:
// 1 256, 2 512, 3 1024, 4 2048, 5 4096).
func ValidMTU(m uint8) bool { return m >= 1 && m <= 5 }

// reversePath is a received REQ's path seen from the passive side: local and
// remote swapped (cm.c cm_format_paths_from_req).
func reversePath(p mad.Path) mad.Path {
	p.LocalLID, p.RemoteLID = p.RemoteLID, p.LocalLID
	p.LocalGID, p.RemoteGID = p.RemoteGID, p.LocalGID
	return p
}

// cmaPrivate lays out REQ or SIDR_REQ private data as rdma_cm does: the
// cma_hdr for src -> dst, then the consumer's bytes.
func cmaPrivate(dst []byte, src, to netip.AddrPort, user []byte) error {
	if len(user) > len(dst)-CMAHeaderLen {
		return fmt.Errorf("%w: %d bytes, room for %d after the cma_hdr", ErrPrivateData, len(user), len(dst)-CMAHeaderLen)
	}
	h := mad.CMAHeader{Version: mad.CMAVersion, SrcPort: src.Port(), Src: src.Addr().Unmap(), Dst: to.Addr().Unmap()}
	if err := h.Encode(dst); err != nil {
		return fmt.Errorf("%w: %v", ErrAddr, err)
	}
	copy(dst[CMAHeaderLen:], user)
	return nil
}

// parseCMA reads the cma_hdr of a REQ or SIDR_REQ for service sid: the
// active side's address and port and the passive side's, whose port is the
// service ID's. A link-local IPv6 address keeps no zone: the wiring knows
// the interface a MAD came in on.
func parseCMA(priv []byte, sid uint64) (src, dst netip.AddrPort, err error) {
	h, err := mad.ParseCMAHeader(priv)
	if err != nil {
		return src, dst, err
	}
	if h.Version != mad.CMAVersion {
		return src, dst, fmt.Errorf("cm: cma_hdr version %d", h.Version)
	}
	return netip.AddrPortFrom(h.Src, h.SrcPort), netip.AddrPortFrom(h.Dst, mad.ServicePort(sid)), nil
}

func putPrivate(dst, src []byte) error {
	if len(src) > len(dst) {
		return fmt.Errorf("%w: %d bytes, room for %d", ErrPrivateData, len(src), len(dst))
	}
	copy(dst, src)
	return nil
}

// PathMTUForNetdev is the RoCE path MTU rdma_cm picks for a netdev MTU
// (ib_addr.h iboe_get_mtu): the largest IB MTU that fits once GRH/IP (40),
// UDP (8), BTH (12), the largest extension headers (XRC 4, AtomicETH 28)
// and the ICRC (4) are taken off; 0 when not even 256 bytes do.
func PathMTUForNetdev(mtu int) uint8 {
	payload := mtu - (40 + 8 + 12 + 4 + 28 + 4)
	for code := uint8(5); code >= 1; code-- {
		if payload >= 128<<code {
			return code
		}
	}
	return 0
}
