package mad

import (
	"encoding/binary"
	"net"
)

// Transport service types of a REQ (IBA 12.6.5).
const (
	ServiceRC = 0
	ServiceUC = 1
	ServiceRD = 2
)

// What an MRA or REJ refers to (IBA 12.6.6, 12.6.7).
const (
	MsgREQ   = 0
	MsgREP   = 1
	MsgOther = 2 // REJ: other; MRA: LAP
)

// REJ reasons (IBA Table 112) that kernel ib_cm and rdma_cm send.
const (
	RejNoQP                   = 1
	RejNoResources            = 3
	RejTimeout                = 4
	RejUnsupported            = 5
	RejInvalidServiceID       = 8
	RejInvalidTransportType   = 9
	RejStaleConn              = 10
	RejInvalidMTU             = 26
	RejInsufficientRespRes    = 27
	RejConsumerDefined        = 28
	RejInvalidRNRRetry        = 29
	RejDuplicateLocalCommID   = 30
	RejInvalidClassVersion    = 31
	RejInvalidFlowLabel       = 32
	RejInvalidAltFlowLabel    = 33
	RejVendorOptionNotSupport = 35
)

// GID is a 128-bit port GID; on RoCEv2 it is the port's IP address (IPv4
// mapped into IPv6).
type GID [GIDLen]byte

// String formats the GID as an IP address (dotted quad for IPv4-mapped).
func (g GID) String() string { return net.IP(g[:]).String() }

// MarshalText writes the GID as String does.
func (g GID) MarshalText() ([]byte, error) { return []byte(g.String()), nil }

// pathLen is the length of one path in a REQ.
const pathLen = 44

// Path is one path of a REQ (primary or alternate, 44 bytes).
type Path struct {
	LocalLID        uint16 `json:"local_lid"`
	RemoteLID       uint16 `json:"remote_lid"`
	LocalGID        GID    `json:"local_gid"`
	RemoteGID       GID    `json:"remote_gid"`
	FlowLabel       uint32 `json:"flow_label"`  // 20 bits
	PacketRate      uint8  `json:"packet_rate"` // 6 bits
	TrafficClass    uint8  `json:"traffic_class"`
	HopLimit        uint8  `json:"hop_limit"`
	SL              uint8  `json:"sl"` // 4 bits
	SubnetLocal     bool   `json:"subnet_local"`
	LocalACKTimeout uint8  `json:"local_ack_timeout"` // 5 bits
}

func (p *Path) decode(b []byte) {
	p.LocalLID = binary.BigEndian.Uint16(b[0:])
	p.RemoteLID = binary.BigEndian.Uint16(b[2:])
	copy(p.LocalGID[:], b[4:20])
	copy(p.RemoteGID[:], b[20:36])
	p.FlowLabel = binary.BigEndian.Uint32(b[36:]) >> 12
	p.PacketRate = getBits(b[39], 2, 6)
	p.TrafficClass = b[40]
	p.HopLimit = b[41]
	p.SL = getBits(b[42], 0, 4)
	p.SubnetLocal = getBits(b[42], 4, 1) != 0
	p.LocalACKTimeout = getBits(b[43], 0, 5)
}

func (p *Path) encode(b []byte) {
	binary.BigEndian.PutUint16(b[0:], p.LocalLID)
	binary.BigEndian.PutUint16(b[2:], p.RemoteLID)
	copy(b[4:20], p.LocalGID[:])
	copy(b[20:36], p.RemoteGID[:])
	binary.BigEndian.PutUint32(b[36:], (p.FlowLabel&0xFFFFF)<<12)
	setBits(&b[39], 2, 6, p.PacketRate)
	b[40] = p.TrafficClass
	b[41] = p.HopLimit
	setBits(&b[42], 0, 4, p.SL)
	setBits(&b[42], 4, 1, b2u(p.SubnetLocal))
	setBits(&b[43], 0, 5, p.LocalACKTimeout)
}

// REQ is ConnectRequest (IBA 12.6.5, Table 106).
type REQ struct {
	LocalCommID             uint32   `json:"local_comm_id"`
	VendorID                uint32   `json:"vendor_id"` // 24 bits (ECE)
	ServiceID               uint64   `json:"service_id"`
	LocalCAGUID             uint64   `json:"local_ca_guid"`
	LocalQKey               uint32   `json:"local_qkey"`
	LocalQPN                uint32   `json:"local_qpn"` // 24 bits
	ResponderResources      uint8    `json:"responder_resources"`
	LocalEECN               uint32   `json:"local_eecn"` // 24 bits
	InitiatorDepth          uint8    `json:"initiator_depth"`
	RemoteEECN              uint32   `json:"remote_eecn"`                // 24 bits
	RemoteCMResponseTimeout uint8    `json:"remote_cm_response_timeout"` // 5 bits
	TransportServiceType    uint8    `json:"transport_service_type"`     // 2 bits
	EndToEndFlowControl     bool     `json:"e2e_flow_control"`
	StartingPSN             uint32   `json:"starting_psn"`              // 24 bits
	LocalCMResponseTimeout  uint8    `json:"local_cm_response_timeout"` // 5 bits
	RetryCount              uint8    `json:"retry_count"`               // 3 bits
	PKey                    uint16   `json:"pkey"`
	PathMTU                 uint8    `json:"path_mtu"` // 4 bits, IB MTU code (3 = 1024)
	RDCExists               bool     `json:"rdc_exists"`
	RNRRetryCount           uint8    `json:"rnr_retry_count"` // 3 bits
	MaxCMRetries            uint8    `json:"max_cm_retries"`  // 4 bits
	SRQ                     bool     `json:"srq"`
	ExtendedTransportType   uint8    `json:"extended_transport_type"` // 3 bits
	Primary                 Path     `json:"primary_path"`
	Alternate               Path     `json:"alternate_path"`
	SAPSupported            bool     `json:"sap_supported"`
	PrivateData             [92]byte `json:"-"`
}

func (*REQ) AttributeID() uint16 { return AttrConnectRequest }
func (m *REQ) Private() []byte   { return m.PrivateData[:] }

func (m *REQ) Decode(b []byte) error {
	if err := checkData("REQ", b); err != nil {
		return err
	}
	*m = REQ{
		LocalCommID:             be32(b[0:]),
		VendorID:                be24(b[5:]),
		ServiceID:               binary.BigEndian.Uint64(b[8:]),
		LocalCAGUID:             binary.BigEndian.Uint64(b[16:]),
		LocalQKey:               be32(b[28:]),
		LocalQPN:                be24(b[32:]),
		ResponderResources:      b[35],
		LocalEECN:               be24(b[36:]),
		InitiatorDepth:          b[39],
		RemoteEECN:              be24(b[40:]),
		RemoteCMResponseTimeout: getBits(b[43], 0, 5),
		TransportServiceType:    getBits(b[43], 5, 2),
		EndToEndFlowControl:     getBits(b[43], 7, 1) != 0,
		StartingPSN:             be24(b[44:]),
		LocalCMResponseTimeout:  getBits(b[47], 0, 5),
		RetryCount:              getBits(b[47], 5, 3),
		PKey:                    binary.BigEndian.Uint16(b[48:]),
		PathMTU:                 getBits(b[50], 0, 4),
		RDCExists:               getBits(b[50], 4, 1) != 0,
		RNRRetryCount:           getBits(b[50], 5, 3),
		MaxCMRetries:            getBits(b[51], 0, 4),
		SRQ:                     getBits(b[51], 4, 1) != 0,
		ExtendedTransportType:   getBits(b[51], 5, 3),
		SAPSupported:            getBits(b[139], 5, 1) != 0,
	}
	m.Primary.decode(b[52 : 52+pathLen])
	m.Alternate.decode(b[52+pathLen : 52+2*pathLen])
	copy(m.PrivateData[:], b[140:232])
	return nil
}

func (m *REQ) Encode(b []byte) {
	b = b[:CMDataLen:CMDataLen]
	clear(b)
	put32(b[0:], m.LocalCommID)
	put24(b[5:], m.VendorID)
	binary.BigEndian.PutUint64(b[8:], m.ServiceID)
	binary.BigEndian.PutUint64(b[16:], m.LocalCAGUID)
	put32(b[28:], m.LocalQKey)
	put24(b[32:], m.LocalQPN)
	b[35] = m.ResponderResources
	put24(b[36:], m.LocalEECN)
	b[39] = m.InitiatorDepth
	put24(b[40:], m.RemoteEECN)
	setBits(&b[43], 0, 5, m.RemoteCMResponseTimeout)
	setBits(&b[43], 5, 2, m.TransportServiceType)
	setBits(&b[43], 7, 1, b2u(m.EndToEndFlowControl))
	put24(b[44:], m.StartingPSN)
	setBits(&b[47], 0, 5, m.LocalCMResponseTimeout)
	setBits(&b[47], 5, 3, m.RetryCount)
	binary.BigEndian.PutUint16(b[48:], m.PKey)
	setBits(&b[50], 0, 4, m.PathMTU)
	setBits(&b[50], 4, 1, b2u(m.RDCExists))
	setBits(&b[50], 5, 3, m.RNRRetryCount)
	setBits(&b[51], 0, 4, m.MaxCMRetries)
	setBits(&b[51], 4, 1, b2u(m.SRQ))
	setBits(&b[51], 5, 3, m.ExtendedTransportType)
	m.Primary.encode(b[52 : 52+pathLen])
	m.Alternate.encode(b[52+pathLen : 52+2*pathLen])
	setBits(&b[139], 5, 1, b2u(m.SAPSupported))
	copy(b[140:232], m.PrivateData[:])
}

// MRA is MsgRcptAck (IBA 12.6.6, Table 107).
type MRA struct {
	LocalCommID    uint32    `json:"local_comm_id"`
	RemoteCommID   uint32    `json:"remote_comm_id"`
	MessageMRAed   uint8     `json:"message_mraed"`   // 2 bits: MsgREQ, MsgREP, MsgOther (LAP)
	ServiceTimeout uint8     `json:"service_timeout"` // 5 bits
	PrivateData    [222]byte `json:"-"`
}

func (*MRA) AttributeID() uint16 { return AttrMsgRcptAck }
func (m *MRA) Private() []byte   { return m.PrivateData[:] }

func (m *MRA) Decode(b []byte) error {
	if err := checkData("MRA", b); err != nil {
		return err
	}
	*m = MRA{LocalCommID: be32(b[0:]), RemoteCommID: be32(b[4:]),
		MessageMRAed: getBits(b[8], 0, 2), ServiceTimeout: getBits(b[9], 0, 5)}
	copy(m.PrivateData[:], b[10:232])
	return nil
}

func (m *MRA) Encode(b []byte) {
	b = b[:CMDataLen:CMDataLen]
	clear(b)
	put32(b[0:], m.LocalCommID)
	put32(b[4:], m.RemoteCommID)
	setBits(&b[8], 0, 2, m.MessageMRAed)
	setBits(&b[9], 0, 5, m.ServiceTimeout)
	copy(b[10:232], m.PrivateData[:])
}

// REJ is ConnectReject (IBA 12.6.7, Table 108).
type REJ struct {
	LocalCommID        uint32    `json:"local_comm_id"`
	RemoteCommID       uint32    `json:"remote_comm_id"`
	MessageRejected    uint8     `json:"message_rejected"`     // 2 bits: MsgREQ, MsgREP, MsgOther
	RejectedInfoLength uint8     `json:"rejected_info_length"` // 7 bits
	Reason             uint16    `json:"reason"`
	ARI                [72]byte  `json:"-"` // additional rejection information
	PrivateData        [148]byte `json:"-"`
}

func (*REJ) AttributeID() uint16 { return AttrConnectReject }
func (m *REJ) Private() []byte   { return m.PrivateData[:] }

func (m *REJ) Decode(b []byte) error {
	if err := checkData("REJ", b); err != nil {
		return err
	}
	*m = REJ{LocalCommID: be32(b[0:]), RemoteCommID: be32(b[4:]),
		MessageRejected: getBits(b[8], 0, 2), RejectedInfoLength: getBits(b[9], 0, 7),
		Reason: binary.BigEndian.Uint16(b[10:])}
	copy(m.ARI[:], b[12:84])
	copy(m.PrivateData[:], b[84:232])
	return nil
}

func (m *REJ) Encode(b []byte) {
	b = b[:CMDataLen:CMDataLen]
	clear(b)
	put32(b[0:], m.LocalCommID)
	put32(b[4:], m.RemoteCommID)
	setBits(&b[8], 0, 2, m.MessageRejected)
	setBits(&b[9], 0, 7, m.RejectedInfoLength)
	binary.BigEndian.PutUint16(b[10:], m.Reason)
	copy(b[12:84], m.ARI[:])
	copy(b[84:232], m.PrivateData[:])
}

// REP is ConnectReply (IBA 12.6.8, Table 110).
type REP struct {
	LocalCommID         uint32    `json:"local_comm_id"`
	RemoteCommID        uint32    `json:"remote_comm_id"`
	LocalQKey           uint32    `json:"local_qkey"`
	LocalQPN            uint32    `json:"local_qpn"`  // 24 bits
	LocalEECN           uint32    `json:"local_eecn"` // 24 bits
	StartingPSN         uint32    `json:"starting_psn"`
	VendorID            uint32    `json:"vendor_id"` // 24 bits (ECE), in three bytes H/M/L
	ResponderResources  uint8     `json:"responder_resources"`
	InitiatorDepth      uint8     `json:"initiator_depth"`
	TargetACKDelay      uint8     `json:"target_ack_delay"`  // 5 bits
	FailoverAccepted    uint8     `json:"failover_accepted"` // 2 bits
	EndToEndFlowControl bool      `json:"e2e_flow_control"`
	RNRRetryCount       uint8     `json:"rnr_retry_count"` // 3 bits
	SRQ                 bool      `json:"srq"`
	LocalCAGUID         uint64    `json:"local_ca_guid"`
	PrivateData         [196]byte `json:"-"`
}

func (*REP) AttributeID() uint16 { return AttrConnectReply }
func (m *REP) Private() []byte   { return m.PrivateData[:] }

func (m *REP) Decode(b []byte) error {
	if err := checkData("REP", b); err != nil {
		return err
	}
	*m = REP{
		LocalCommID:         be32(b[0:]),
		RemoteCommID:        be32(b[4:]),
		LocalQKey:           be32(b[8:]),
		LocalQPN:            be24(b[12:]),
		LocalEECN:           be24(b[16:]),
		StartingPSN:         be24(b[20:]),
		VendorID:            uint32(b[15])<<16 | uint32(b[19])<<8 | uint32(b[23]),
		ResponderResources:  b[24],
		InitiatorDepth:      b[25],
		TargetACKDelay:      getBits(b[26], 0, 5),
		FailoverAccepted:    getBits(b[26], 5, 2),
		EndToEndFlowControl: getBits(b[26], 7, 1) != 0,
		RNRRetryCount:       getBits(b[27], 0, 3),
		SRQ:                 getBits(b[27], 3, 1) != 0,
		LocalCAGUID:         binary.BigEndian.Uint64(b[28:]),
	}
	copy(m.PrivateData[:], b[36:232])
	return nil
}

func (m *REP) Encode(b []byte) {
	b = b[:CMDataLen:CMDataLen]
	clear(b)
	put32(b[0:], m.LocalCommID)
	put32(b[4:], m.RemoteCommID)
	put32(b[8:], m.LocalQKey)
	put24(b[12:], m.LocalQPN)
	b[15] = byte(m.VendorID >> 16)
	put24(b[16:], m.LocalEECN)
	b[19] = byte(m.VendorID >> 8)
	put24(b[20:], m.StartingPSN)
	b[23] = byte(m.VendorID)
	b[24] = m.ResponderResources
	b[25] = m.InitiatorDepth
	setBits(&b[26], 0, 5, m.TargetACKDelay)
	setBits(&b[26], 5, 2, m.FailoverAccepted)
	setBits(&b[26], 7, 1, b2u(m.EndToEndFlowControl))
	setBits(&b[27], 0, 3, m.RNRRetryCount)
	setBits(&b[27], 3, 1, b2u(m.SRQ))
	binary.BigEndian.PutUint64(b[28:], m.LocalCAGUID)
	copy(b[36:232], m.PrivateData[:])
}

// RTU is ReadyToUse (IBA 12.6.9, Table 111).
type RTU struct {
	LocalCommID  uint32    `json:"local_comm_id"`
	RemoteCommID uint32    `json:"remote_comm_id"`
	PrivateData  [224]byte `json:"-"`
}

func (*RTU) AttributeID() uint16 { return AttrReadyToUse }
func (m *RTU) Private() []byte   { return m.PrivateData[:] }

func (m *RTU) Decode(b []byte) error {
	if err := checkData("RTU", b); err != nil {
		return err
	}
	m.LocalCommID, m.RemoteCommID = be32(b[0:]), be32(b[4:])
	copy(m.PrivateData[:], b[8:232])
	return nil
}

func (m *RTU) Encode(b []byte) {
	b = b[:CMDataLen:CMDataLen]
	put32(b[0:], m.LocalCommID)
	put32(b[4:], m.RemoteCommID)
	copy(b[8:232], m.PrivateData[:])
}

// DREQ is DisconnectRequest (IBA 12.6.10, Table 112).
type DREQ struct {
	LocalCommID  uint32    `json:"local_comm_id"`
	RemoteCommID uint32    `json:"remote_comm_id"`
	RemoteQPN    uint32    `json:"remote_qpn"` // 24 bits: QPN or EECN
	PrivateData  [220]byte `json:"-"`
}

func (*DREQ) AttributeID() uint16 { return AttrDisconnectRequest }
func (m *DREQ) Private() []byte   { return m.PrivateData[:] }

func (m *DREQ) Decode(b []byte) error {
	if err := checkData("DREQ", b); err != nil {
		return err
	}
	m.LocalCommID, m.RemoteCommID, m.RemoteQPN = be32(b[0:]), be32(b[4:]), be24(b[8:])
	copy(m.PrivateData[:], b[12:232])
	return nil
}

func (m *DREQ) Encode(b []byte) {
	b = b[:CMDataLen:CMDataLen]
	put32(b[0:], m.LocalCommID)
	put32(b[4:], m.RemoteCommID)
	put24(b[8:], m.RemoteQPN)
	b[11] = 0
	copy(b[12:232], m.PrivateData[:])
}

// DREP is DisconnectReply (IBA 12.6.11, Table 113).
type DREP struct {
	LocalCommID  uint32    `json:"local_comm_id"`
	RemoteCommID uint32    `json:"remote_comm_id"`
	PrivateData  [224]byte `json:"-"`
}

func (*DREP) AttributeID() uint16 { return AttrDisconnectReply }
func (m *DREP) Private() []byte   { return m.PrivateData[:] }

func (m *DREP) Decode(b []byte) error {
	if err := checkData("DREP", b); err != nil {
		return err
	}
	m.LocalCommID, m.RemoteCommID = be32(b[0:]), be32(b[4:])
	copy(m.PrivateData[:], b[8:232])
	return nil
}

func (m *DREP) Encode(b []byte) {
	b = b[:CMDataLen:CMDataLen]
	put32(b[0:], m.LocalCommID)
	put32(b[4:], m.RemoteCommID)
	copy(b[8:232], m.PrivateData[:])
}

// SIDRREQ is ServiceIDResReq, SIDR_REQ (IBA 12.11.1, Table 119): how
// rdma_cm resolves a UD service (RDMA_PS_UDP).
type SIDRREQ struct {
	RequestID   uint32    `json:"request_id"`
	PKey        uint16    `json:"pkey"`
	ServiceID   uint64    `json:"service_id"`
	PrivateData [216]byte `json:"-"`
}

func (*SIDRREQ) AttributeID() uint16 { return AttrServiceIDResReq }
func (m *SIDRREQ) Private() []byte   { return m.PrivateData[:] }

func (m *SIDRREQ) Decode(b []byte) error {
	if err := checkData("SIDR_REQ", b); err != nil {
		return err
	}
	m.RequestID, m.PKey, m.ServiceID = be32(b[0:]), binary.BigEndian.Uint16(b[4:]), binary.BigEndian.Uint64(b[8:])
	copy(m.PrivateData[:], b[16:232])
	return nil
}

func (m *SIDRREQ) Encode(b []byte) {
	b = b[:CMDataLen:CMDataLen]
	put32(b[0:], m.RequestID)
	binary.BigEndian.PutUint16(b[4:], m.PKey)
	b[6], b[7] = 0, 0
	binary.BigEndian.PutUint64(b[8:], m.ServiceID)
	copy(b[16:232], m.PrivateData[:])
}

// SIDR_REP status values (IBA Table 121).
const (
	SIDRValid           = 0
	SIDRServiceNotFound = 1
	SIDRRejected        = 2
	SIDRNoQP            = 3
	SIDRRedirect        = 4
	SIDRClassVersion    = 5
)

// SIDRREP is ServiceIDResReqResp, SIDR_REP (IBA 12.11.2, Table 120).
type SIDRREP struct {
	RequestID      uint32    `json:"request_id"`
	Status         uint8     `json:"status"`
	AddInfoLength  uint8     `json:"add_info_length"`
	QPN            uint32    `json:"qpn"` // 24 bits
	ServiceID      uint64    `json:"service_id"`
	QKey           uint32    `json:"qkey"`
	AdditionalInfo [72]byte  `json:"-"`
	PrivateData    [136]byte `json:"-"`
}

func (*SIDRREP) AttributeID() uint16 { return AttrServiceIDResReqResp }
func (m *SIDRREP) Private() []byte   { return m.PrivateData[:] }

func (m *SIDRREP) Decode(b []byte) error {
	if err := checkData("SIDR_REP", b); err != nil {
		return err
	}
	*m = SIDRREP{RequestID: be32(b[0:]), Status: b[4], AddInfoLength: b[5], QPN: be24(b[8:]),
		ServiceID: binary.BigEndian.Uint64(b[12:]), QKey: be32(b[20:])}
	copy(m.AdditionalInfo[:], b[24:96])
	copy(m.PrivateData[:], b[96:232])
	return nil
}

func (m *SIDRREP) Encode(b []byte) {
	b = b[:CMDataLen:CMDataLen]
	clear(b[:24])
	put32(b[0:], m.RequestID)
	b[4], b[5] = m.Status, m.AddInfoLength
	put24(b[8:], m.QPN)
	binary.BigEndian.PutUint64(b[12:], m.ServiceID)
	put32(b[20:], m.QKey)
	copy(b[24:96], m.AdditionalInfo[:])
	copy(b[96:232], m.PrivateData[:])
}

// getBits reads width bits of b starting at bit off, counted from the MSB
// (the Byte[Bit] notation of the IBA tables).
func getBits(b byte, off, width uint) uint8 {
	return (b >> (8 - off - width)) & (1<<width - 1)
}

func setBits(p *byte, off, width uint, v uint8) {
	shift := 8 - off - width
	mask := byte(1<<width-1) << shift
	*p = *p&^mask | (v<<shift)&mask
}

func b2u(v bool) uint8 {
	if v {
		return 1
	}
	return 0
}

func be32(b []byte) uint32 { return binary.BigEndian.Uint32(b) }
func be24(b []byte) uint32 {
	_ = b[2]
	return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
}
func put32(b []byte, v uint32) { binary.BigEndian.PutUint32(b, v) }
func put24(b []byte, v uint32) {
	_ = b[2]
	b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v)
}
