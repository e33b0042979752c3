package verbs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/vrnic/vrnicd/verbsock"
)

// UD over SIDR, rdma_cm's RDMA_PS_UDP port space (udaddy): a client
// resolves the UD QP behind an rdma_cm port with ResolveUD (rdma_connect
// on a UD ID: a SIDR_REQ), and gets its QPN, Q_Key and the address vector
// to reach it; a server listens with ListenUD, and answers each request
// (a CONNECT_REQUEST whose Conn is a SIDR request) with Conn.AcceptUD or
// Conn.Reject. Nothing is connected: the UD QPs send to each other through
// address handles.

// PortSpaceUDP is RDMA_PS_UDP, the rdma_cm port space of UD over SIDR.
const PortSpaceUDP = verbsock.PortSpaceUDP

// UDQKey is the Q_Key rdma_cm gives every UD QP of RDMA_PS_UDP
// (RDMA_UDP_QKEY); ReadyUD sets it, and a kernel peer expects it.
const UDQKey = 0x01234567

// Private data room of SIDR (after the cma_hdr of the request).
const (
	ResolveUDPrivateLen = verbsock.CMResolveUDPrivateLen // SIDR_REQ
	AcceptUDPrivateLen  = verbsock.CMAcceptUDPrivateLen  // SIDR_REP
)

// SIDR_REP statuses (IBA Table 123) a resolution can fail with.
const (
	SIDRServiceNotFound = 1 // nobody listens on the port
	SIDRRejected        = 2 // the listener refused (Conn.Reject)
	SIDRNoQP            = 3
)

// UDPeer is a resolved UD peer, what rdma_cm's ESTABLISHED event of a UD
// ID carries (event->param.ud): where to send (AH, for PD.CreateAH), to
// which QP and with which Q_Key, and the listener's private data.
type UDPeer struct {
	AH          AHAttr
	QPN         uint32
	QKey        uint32
	PrivateData []byte
	Peer, Local netip.AddrPort
}

// SIDRError is a resolution the peer answered with a SIDR status other
// than valid (rdma_cm's UNREACHABLE event with that status).
type SIDRError struct {
	Status      int // SIDRServiceNotFound, SIDRRejected, ...
	PrivateData []byte
}

// Event is librdmacm's report of it: UNREACHABLE, status the SIDR status.
func (e *SIDRError) Event() CMEvent {
	return CMEvent{Type: CMEventUnreachable, Status: e.Status, PrivateData: e.PrivateData}
}

func (e *SIDRError) Error() string {
	switch e.Status {
	case SIDRServiceNotFound:
		return "rdma_cm: SIDR: service not found (status 1)"
	case SIDRRejected:
		return "rdma_cm: SIDR: rejected (status 2)"
	}
	return fmt.Sprintf("rdma_cm: SIDR: status %d", e.Status)
}

// ResolveUD resolves the UD peer listening on the RDMA_PS_UDP port at addr
// from the device's address of addr's family; see ResolveUDFrom.
func (d *Device) ResolveUD(ctx context.Context, addr netip.AddrPort, privateData []byte) (*UDPeer, error) {
	return d.ResolveUDFrom(ctx, netip.AddrPort{}, addr, privateData)
}

// ResolveUDFrom sends a SIDR_REQ from src (address zero: the device picks;
// port 0: ephemeral) to the rdma_cm UD service at dst and waits for the
// answer: a *UDPeer, a *SIDRError (the peer refused), ErrUnreachable (no
// answer after the CM's retries) or ctx's error. An address whose link
// address does not resolve fails with an *AddrError. Private data:
// at most ResolveUDPrivateLen bytes.
func (d *Device) ResolveUDFrom(ctx context.Context, src, dst netip.AddrPort, privateData []byte) (*UDPeer, error) {
	if len(privateData) > ResolveUDPrivateLen {
		return nil, verr(verbsock.OpCMResolveUD, syscall.EINVAL, "%d bytes of private data, room for %d", len(privateData), ResolveUDPrivateLen)
	}
	c := &Conn{d: d, events: make(chan CMEvent, cmEventQueue)}
	c.ctx = d.cm.add(c)
	defer c.Close() // the resolution is over whatever its outcome
	req := verbsock.CMResolveUDReq{Context: c.ctx, Dst: dst.Addr().As16(), DstPort: dst.Port(), SrcPort: src.Port(),
		PortSpace: verbsock.PortSpaceUDP}
	req.PrivateLen = uint8(copy(req.Private[:], privateData))
	if a := src.Addr(); a.IsValid() && !a.IsUnspecified() {
		req.Src = a.As16()
	}
	var resp verbsock.CMConnectResp
	if _, err := d.call(verbsock.OpCMResolveUD, &req, nil, &resp); err != nil {
		d.cm.drop(c.ctx)
		return nil, addrErr(err, dst.Addr())
	}
	c.h = resp.Conn
	d.cm.setHandle(c)
	ev, err := c.await(ctx, CMEventEstablished)
	if errors.Is(err, ErrUnreachable) && ev.Status > 0 {
		return nil, &SIDRError{Status: ev.Status, PrivateData: ev.PrivateData}
	}
	if err != nil {
		return nil, err
	}
	return &UDPeer{AH: ev.Info.AH, QPN: ev.Info.RemoteQPN, QKey: ev.Info.QKey, PrivateData: ev.PrivateData,
		Peer: ev.Peer, Local: ev.Local}, nil
}

// ListenUD listens on addr (address zero or unspecified: every address of
// the device) for SIDR requests of the RDMA_PS_UDP port space: each comes
// as a CONNECT_REQUEST whose Conn takes AcceptUD or Reject.
func (d *Device) ListenUD(addr netip.AddrPort) (*Listener, error) {
	return d.listen(addr, verbsock.PortSpaceUDP)
}

// ReadyUD takes a UD QP to RTS with Q_Key UDQKey on port 1, as
// rdma_create_qp does for an RDMA_PS_UDP ID, from where it is (RESET, INIT
// or RTR); a QP in INIT keeps the Q_Key it was given.
func ReadyUD(qp *QP) error {
	if qp == nil || qp.Type() != QPTypeUD {
		return verr(verbsock.OpModifyQP, syscall.EINVAL, "not a UD QP")
	}
	steps := []struct {
		from QPState
		a    QPAttr
		m    AttrMask
	}{
		{QPStateReset, QPAttr{State: QPStateInit, Port: 1, QKey: UDQKey}, QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrQKey},
		{QPStateInit, QPAttr{State: QPStateRTR}, QPAttrState},
		{QPStateRTR, QPAttr{State: QPStateRTS}, QPAttrState | QPAttrSQPSN},
	}
	for _, s := range steps {
		if qp.State() != s.from {
			continue
		}
		if err := qp.Modify(&s.a, s.m); err != nil {
			return err
		}
	}
	if st := qp.State(); st != QPStateRTS {
		return verr(verbsock.OpModifyQP, syscall.EINVAL, "UD QP %#x is %v, not RTS", qp.QPN(), st)
	}
	return nil
}

// AcceptUD answers a SIDR request with qp, a UD QP (taken to RTS by
// ReadyUD first if in RESET: post its receives before, the peer may send
// as soon as it has the answer), and its Q_Key; private data at most
// AcceptUDPrivateLen bytes. The request is over then and the Conn closed.
func (c *Conn) AcceptUD(qp *QP, privateData []byte) error {
	if len(privateData) > AcceptUDPrivateLen {
		return verr(verbsock.OpCMAcceptUD, syscall.EINVAL, "%d bytes of private data, room for %d", len(privateData), AcceptUDPrivateLen)
	}
	if err := ReadyUD(qp); err != nil {
		return err
	}
	req := verbsock.CMAcceptUDReq{Conn: c.h, QP: qp.h}
	req.PrivateLen = uint8(copy(req.Private[:], privateData))
	_, err := c.d.call(verbsock.OpCMAcceptUD, &req, nil, &verbsock.Empty{})
	c.Close()
	return err
}

// GRHLen is the room a UD receive buffer keeps ahead of the data for the
// Global Route Header (WCWithGRH: ByteLen counts it).
const GRHLen = 40

// AHFromGRH is the address vector back to the sender of a UD receive, as
// ibv_init_ah_from_wc makes it: grh is the receive buffer's first GRHLen
// bytes, which RoCEv2 fills with the IPv6 header, or with the IPv4 header
// in its last 20 bytes. The destination GID is the sender's address, the
// source GID the table entry of the address it was sent to; the traffic
// class and flow label are the received ones, the hop limit 255 (the
// received one has been spent on the way).
func (d *Device) AHFromGRH(grh []byte) (AHAttr, error) {
	g, ok := parseGRH(grh)
	if !ok {
		return AHAttr{}, verr(verbsock.OpCreateAH, syscall.EINVAL, "no IPv4 or IPv6 header in the GRH")
	}
	p, err := d.QueryPort(1)
	if err != nil {
		return AHAttr{}, err
	}
	want := GIDFromAddr(g.dst)
	for i := range int(p.GIDTblLen) {
		if id, err := d.QueryGID(1, i); err == nil && id == want {
			return AHAttr{DGID: GIDFromAddr(g.src), SGIDIndex: uint8(i), HopLimit: 0xFF, TrafficClass: g.tc,
				FlowLabel: g.flow, Port: 1}, nil
		}
	}
	return AHAttr{}, verr(verbsock.OpCreateAH, syscall.EINVAL, "%v is not one of the device's addresses", g.dst)
}

// grhFields are what a reply's address vector takes from a received GRH.
type grhFields struct {
	src, dst netip.Addr
	tc       uint8
	flow     uint32
}

func parseGRH(grh []byte) (grhFields, bool) {
	if len(grh) < GRHLen {
		return grhFields{}, false
	}
	if ip := grh[20:40]; ip[0]>>4 == 4 {
		return grhFields{src: netip.AddrFrom4([4]byte(ip[12:16])), dst: netip.AddrFrom4([4]byte(ip[16:20])), tc: ip[1]}, true
	}
	if grh[0]>>4 == 6 {
		w := binary.BigEndian.Uint32(grh)
		return grhFields{src: netip.AddrFrom16([16]byte(grh[8:24])), dst: netip.AddrFrom16([16]byte(grh[24:40])),
			tc: uint8(w >> 20), flow: w & 0xFFFFF}, true
	}
	return grhFields{}, false
}
