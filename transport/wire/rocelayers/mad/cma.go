package mad

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// rdma_cm port spaces (include/rdma/rdma_cm.h enum rdma_ucm_port_space).
const (
	PortSpaceIPoIB = 0x0002
	PortSpaceTCP   = 0x0106
	PortSpaceUDP   = 0x0111
	PortSpaceIB    = 0x013F
)

// ipServicePrefix is the IP CM service ID prefix (IBA Annex A11): the top
// 40 bits 0x0000000001, then the protocol byte and the 16-bit port.
const (
	ipServicePrefix = 0x0000000001000000
	ipServiceMask   = 0xFFFFFFFFFF000000
)

// IPServiceID is the service ID rdma_cm listens on for a port space and port:
// (port space << 16) | port, e.g. 0x0000000001061C06 for TCP port 7174.
func IPServiceID(portSpace, port uint16) uint64 { return uint64(portSpace)<<16 | uint64(port) }

// IsIPServiceID reports whether sid is in the IP CM range, whose REQs carry a
// CMAHeader at the front of their private data.
func IsIPServiceID(sid uint64) bool { return sid&ipServiceMask == ipServicePrefix }

// ServicePort is the port of an IP CM service ID.
func ServicePort(sid uint64) uint16 { return uint16(sid) }

// ServiceProtocol is the protocol byte of an IP CM service ID (0x06 for the
// TCP port space).
func ServiceProtocol(sid uint64) uint8 { return uint8(sid >> 16) }

// CMAHeaderLen is the size of rdma_cm's struct cma_hdr.
const CMAHeaderLen = 36

// CMAVersion is the only cma_hdr version kernel rdma_cm speaks.
const CMAVersion = 0x00

// CMAHeader is the IP CM private-data header (struct cma_hdr in the kernel's
// drivers/infiniband/core/cma.c) that opens a REQ's private data: the CMA
// version, the IP version in bits 7:4 of the next byte, the active side's
// source port, then source and destination addresses, IPv4 in the last four
// bytes of each 16-byte field.
type CMAHeader struct {
	Version   uint8      `json:"version"`
	IPVersion uint8      `json:"ip_version"` // 4 or 6
	SrcPort   uint16     `json:"sport"`
	Src       netip.Addr `json:"src"`
	Dst       netip.Addr `json:"dst"`
}

// ParseCMAHeader reads a CMAHeader from the front of private data.
func ParseCMAHeader(b []byte) (CMAHeader, error) {
	if len(b) < CMAHeaderLen {
		return CMAHeader{}, fmt.Errorf("%w: cma_hdr needs %d bytes, have %d", ErrShort, CMAHeaderLen, len(b))
	}
	h := CMAHeader{Version: b[0], IPVersion: b[1] >> 4, SrcPort: binary.BigEndian.Uint16(b[2:])}
	switch h.IPVersion {
	case 4:
		h.Src = netip.AddrFrom4([4]byte(b[16:20]))
		h.Dst = netip.AddrFrom4([4]byte(b[32:36]))
	case 6:
		h.Src = netip.AddrFrom16([16]byte(b[4:20]))
		h.Dst = netip.AddrFrom16([16]byte(b[20:36]))
	default:
		return h, fmt.Errorf("mad: cma_hdr IP version %d", h.IPVersion)
	}
	return h, nil
}

// Encode writes the header into the first CMAHeaderLen bytes of b. The IP
// version follows the addresses (4 when both are IPv4).
func (h *CMAHeader) Encode(b []byte) error {
	if len(b) < CMAHeaderLen {
		return fmt.Errorf("%w: cma_hdr needs %d bytes, have %d", ErrShort, CMAHeaderLen, len(b))
	}
	if h.Src.Is4() != h.Dst.Is4() || !h.Src.IsValid() || !h.Dst.IsValid() {
		return fmt.Errorf("mad: cma_hdr addresses %v and %v are not of one IP version", h.Src, h.Dst)
	}
	clear(b[:CMAHeaderLen])
	b[0] = h.Version
	binary.BigEndian.PutUint16(b[2:], h.SrcPort)
	if h.Src.Is4() {
		b[1] = 4 << 4
		s, d := h.Src.As4(), h.Dst.As4()
		copy(b[16:20], s[:])
		copy(b[32:36], d[:])
	} else {
		b[1] = 6 << 4
		s, d := h.Src.As16(), h.Dst.As16()
		copy(b[4:20], s[:])
		copy(b[20:36], d[:])
	}
	return nil
}
