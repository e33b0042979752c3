package cm

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
)

// ConnectParams is what rdma_connect knows: the resolved route, the QP and
// the conn_param.
type ConnectParams struct {
	Src, Dst     netip.AddrPort // ours (source port) and the listener's
	PortSpace    uint16         // PortSpaceTCP when 0
	ServiceID    uint64         // 0: ServiceID(PortSpace, Dst.Port())
	QPType       uint8          // mad.ServiceRC or ServiceUC
	QPN          uint32
	PSN          uint32 // our starting PSN, 24 bits
	RespRes      uint8
	InitDepth    uint8
	RetryCount   uint8 // 0-7
	RNRRetry     uint8 // 0-7
	PathMTU      uint8 // IB MTU code
	HopLimit     uint8 // 0: 64
	TrafficClass uint8
	FlowLabel    uint32 // 0: RoCEFlowLabel(Src.Port, Dst.Port)
	SRQ          bool
	PrivateData  []byte // at most REQUserPrivateLen, after the cma_hdr
	// Manual: the consumer moves its QP itself (rdma_cm with no QP on the
	// id): no QPModify, and the REP is EventConnectResponse, whose RTU
	// waits for Establish.
	Manual bool
}

// Connect sends a REQ for p (IBA 12.9.6.1; cma.c cma_connect_ib) and
// returns the new connection's ID. The REQ is resent every response
// timeout (2 × packet life time + the remote CM response timeout, as
// ib_send_cm_req times it) up to MaxCMRetries times.
func (t *Table) Connect(p ConnectParams, out *Output) (uint32, error) {
	if p.PortSpace == 0 {
		p.PortSpace = PortSpaceTCP
	}
	if p.ServiceID == 0 {
		p.ServiceID = ServiceID(p.PortSpace, p.Dst.Port())
	}
	if p.HopLimit == 0 {
		p.HopLimit = 64
	}
	if p.FlowLabel == 0 {
		p.FlowLabel = RoCEFlowLabel(p.Src.Port(), p.Dst.Port())
	}
	if p.QPType != mad.ServiceRC && p.QPType != mad.ServiceUC {
		return 0, fmt.Errorf("cm: transport service type %d over REQ", p.QPType)
	}
	path, err := Route{Src: p.Src.Addr(), Dst: p.Dst.Addr(), PathMTU: p.PathMTU, HopLimit: p.HopLimit,
		TrafficClass: p.TrafficClass, FlowLabel: p.FlowLabel, PacketLifeTime: t.cfg.PacketLifeTime}.Path(t.cfg.CAAckDelay)
	if err != nil {
		return 0, err
	}
	req := &mad.REQ{
		ServiceID: p.ServiceID, LocalCAGUID: t.cfg.LocalCAGUID, LocalQPN: p.QPN & 0xFFFFFF,
		ResponderResources: p.RespRes, InitiatorDepth: p.InitDepth, RemoteCMResponseTimeout: t.cfg.CMResponseTimeout,
		TransportServiceType: p.QPType, StartingPSN: p.PSN & 0xFFFFFF, LocalCMResponseTimeout: t.cfg.CMResponseTimeout,
		RetryCount: min(p.RetryCount, 7), PKey: 0xFFFF, PathMTU: p.PathMTU, RNRRetryCount: min(p.RNRRetry, 7),
		MaxCMRetries: t.cfg.MaxCMRetries, SRQ: p.SRQ, Primary: path,
	}
	if mad.IsIPServiceID(p.ServiceID) {
		err = cmaPrivate(req.PrivateData[:], p.Src, p.Dst, p.PrivateData)
	} else {
		err = putPrivate(req.PrivateData[:], p.PrivateData)
	}
	if err != nil {
		return 0, err
	}
	if t.qpInUse(req.LocalQPN, 0) {
		return 0, fmt.Errorf("%w: QPN %#x", ErrQPInUse, req.LocalQPN)
	}
	c, err := t.newConn()
	if err != nil {
		return 0, err
	}
	req.LocalCommID = c.ID
	*c = Conn{
		ID: c.ID, Active: true, Peer: p.Dst.Addr().Unmap(), ServiceID: p.ServiceID,
		TID: t.formTID(c.ID), QPType: p.QPType, QPN: req.LocalQPN, PSN: req.StartingPSN, Path: path,
		PathMTU: p.PathMTU, RespRes: p.RespRes, InitDepth: p.InitDepth, RetryCount: req.RetryCount,
		RNRRetry: req.RNRRetryCount, Timeout: path.LocalACKTimeout, SRQ: p.SRQ, Manual: p.Manual,
		responseTimeout: 2*kernelMs(t.cfg.PacketLifeTime) + kernelMs(t.cfg.CMResponseTimeout),
		maxRetries:      t.cfg.MaxCMRetries,
	}
	t.sendConn(out, c, c.TID, req, true)
	t.setState(c, StateREQSent)
	t.awaitAnswer(c, t.clock.Now())
	return c.ID, nil
}

// Disconnect ends connection id the way rdma_disconnect and
// rdma_destroy_id do (cm.c ib_send_cm_dreq, ib_send_cm_drep,
// cm_destroy_id), whatever its state:
//   - established: QP to error, DREQ, resent until the DREP;
//   - DREQ received: the DREP, then timewait;
//   - our REQ unanswered: REJ "timeout" with our CA GUID, forgotten;
//   - our REP unanswered: QP to error, REJ "consumer defined", forgotten;
//   - a REP not yet established (Manual): REJ "consumer defined", forgotten;
//   - a request not yet accepted: REJ "consumer defined", forgotten;
//   - a SIDR request not yet answered: SIDR_REP "rejected" (cm_destroy_id
//     in IB_CM_SIDR_REQ_RCVD), so the peer stops retrying at once;
//   - already disconnecting or in timewait: nothing.
func (t *Table) Disconnect(id uint32, priv []byte, out *Output) error {
	c, ok := t.conns[id]
	if !ok {
		return ErrNoConn
	}
	now := t.clock.Now()
	switch c.State {
	case StateEstablished:
		if len(priv) > DREQPrivateLen {
			return fmt.Errorf("%w: %d bytes, room for %d", ErrPrivateData, len(priv), DREQPrivateLen)
		}
		c.qpError(out)
		t.sendDREQ(c, priv, now, out)
	case StateDREQRcvd:
		drep := &mad.DREP{LocalCommID: c.ID, RemoteCommID: c.RemoteID}
		if err := putPrivate(drep.PrivateData[:], priv); err != nil {
			return err
		}
		t.sendConn(out, c, c.TID, drep, false)
		t.enterTimewait(c, now)
	case StateREQSent, StateMRAREQRcvd:
		rej := &mad.REJ{LocalCommID: c.ID, RemoteCommID: c.RemoteID, MessageRejected: mad.MsgOther,
			Reason: mad.RejTimeout, RejectedInfoLength: 8}
		copy(rej.ARI[:], guidARI(t.cfg.LocalCAGUID))
		t.sendConn(out, c, c.TID, rej, false)
		t.free(c)
	case StateREPRcvd:
		// a manual consumer's REP it never established (cm.c: REJ in REP_RCVD)
		t.sendConn(out, c, c.TID, &mad.REJ{LocalCommID: c.ID, RemoteCommID: c.RemoteID,
			MessageRejected: mad.MsgREP, Reason: mad.RejConsumerDefined}, false)
		t.free(c)
	case StateREPSent, StateMRAREPRcvd:
		c.qpError(out)
		t.sendConn(out, c, c.TID, &mad.REJ{LocalCommID: c.ID, RemoteCommID: c.RemoteID,
			MessageRejected: mad.MsgOther, Reason: mad.RejConsumerDefined}, false)
		t.free(c)
	case StateREQRcvd, StateMRAREQSent:
		return t.Reject(id, mad.RejConsumerDefined, nil, priv, out)
	case StateSIDRREQRcvd:
		return t.AnswerSIDR(id, SIDRAnswer{Status: mad.SIDRRejected}, nil, out)
	case StateSIDRREQSent:
		t.free(c)
	}
	return nil
}

// sendDREQ starts the disconnect of an established connection.
func (t *Table) sendDREQ(c *Conn, priv []byte, now time.Time, out *Output) {
	dreq := &mad.DREQ{LocalCommID: c.ID, RemoteCommID: c.RemoteID, RemoteQPN: c.RemoteQPN}
	copy(dreq.PrivateData[:], priv)
	t.sendConn(out, c, t.formTID(c.ID), dreq, true)
	t.setState(c, StateDREQSent)
	t.awaitAnswer(c, now)
}

// Establish sends the RTU of a Manual connection whose REP came
// (EventConnectResponse), once the consumer has its QP in RTS
// (rdma_establish; cma.c cma_rep_recv without a QP): it is established.
func (t *Table) Establish(id uint32, out *Output) error {
	c, ok := t.conns[id]
	if !ok {
		return ErrNoConn
	}
	if !c.Manual || c.State != StateREPRcvd {
		return ErrState
	}
	t.sendConn(out, c, c.TID, &mad.RTU{LocalCommID: c.ID, RemoteCommID: c.RemoteID}, true)
	t.setState(c, StateEstablished)
	return nil
}
