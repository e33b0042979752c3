package transporttest

import (
	"fmt"

	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/mem"
)

var _ transport.Memory = (*mem.Table)(nil)

// Endpoint is one side of a connection: a QP with its CQs and PD.
type Endpoint struct {
	Node   *Node
	QP     *transport.QP
	PD     mem.PD
	SendCQ *transport.MemCQ
	RecvCQ *transport.MemCQ
}

// Options shape the QPs Connect makes. Zero values take rc_pingpong's
// settings (MTU 1024, timeout 14, retry 7, rnr_retry 7, min_rnr_timer 12,
// one outstanding READ/atomic each way is raised to 16 here).
type Options struct {
	Type        transport.QPType
	MTU         transport.MTU
	Timeout     uint8
	RetryCnt    *uint8
	RNRRetry    *uint8
	MinRNRTimer uint8
	RdAtomic    uint8
	Access      mem.Access
	Cap         transport.QPCap
	CQSize      int
	SQSigAll    bool
	QKey        uint32
	SRQ         [2]*transport.SRQ
	PSN         [2]uint32
	QPN         [2]uint32
	PD          [2]mem.PD // 0: allocate one
}

// U8 returns a pointer to v (for the optional Options fields).
func U8(v uint8) *uint8 { return &v }

func (o *Options) defaults() {
	if o.Type == 0 {
		o.Type = transport.QPTypeRC
	}
	if o.MTU == 0 {
		o.MTU = transport.MTU1024
	}
	if o.Timeout == 0 {
		o.Timeout = 14
	}
	if o.RetryCnt == nil {
		o.RetryCnt = U8(7)
	}
	if o.RNRRetry == nil {
		o.RNRRetry = U8(7)
	}
	if o.MinRNRTimer == 0 {
		o.MinRNRTimer = 12
	}
	if o.RdAtomic == 0 {
		o.RdAtomic = 16
	}
	if o.Access == 0 {
		o.Access = mem.LocalWrite | mem.RemoteWrite | mem.RemoteRead | mem.RemoteAtomic | mem.FlushGlobal
	}
	if o.Cap.MaxSendWR == 0 {
		o.Cap = transport.QPCap{MaxSendWR: 512, MaxRecvWR: 512, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 256}
	}
	if o.CQSize == 0 {
		o.CQSize = 1 << 16
	}
	if o.QKey == 0 {
		o.QKey = 0x11111111
	}
}

// Connect creates a QP on a and one on b and brings both to RTS, connected
// to each other (for UD: to RTS, each addressing the other with an AH).
func Connect(a, b *Node, o Options) (*Endpoint, *Endpoint, error) {
	o.defaults()
	eps := [2]*Endpoint{}
	for i, nd := range []*Node{a, b} {
		pd := o.PD[i]
		if pd == 0 {
			var err error
			if pd, err = nd.Mem.AllocPD(); err != nil {
				return nil, nil, err
			}
		}
		ep := &Endpoint{Node: nd, PD: pd, SendCQ: transport.NewMemCQ(o.CQSize, nil), RecvCQ: transport.NewMemCQ(o.CQSize, nil)}
		q, err := nd.NewQP(transport.QPConfig{QPN: o.QPN[i], Type: o.Type, PD: pd, Cap: o.Cap, SendCQ: ep.SendCQ,
			RecvCQ: ep.RecvCQ, SRQ: o.SRQ[i], SQSigAll: o.SQSigAll})
		if err != nil {
			return nil, nil, err
		}
		ep.QP = q
		eps[i] = ep
	}
	for i, ep := range eps {
		peer := eps[1-i]
		if err := bringUp(ep, peer, o, o.PSN[1-i], o.PSN[i]); err != nil {
			return nil, nil, fmt.Errorf("QP %#x: %w", ep.QP.QPN(), err)
		}
	}
	return eps[0], eps[1], nil
}

func bringUp(ep, peer *Endpoint, o Options, rqPSN, sqPSN uint32) error {
	q := ep.QP
	init := transport.QPAttr{State: transport.StateInit, Port: 1, AccessFlags: o.Access, QKey: o.QKey}
	mask := transport.AttrState | transport.AttrPKeyIndex | transport.AttrPort
	if o.Type == transport.QPTypeUD || o.Type == transport.QPTypeGSI {
		mask |= transport.AttrQKey
		if o.Type == transport.QPTypeGSI {
			mask &^= transport.AttrPort
		}
	} else {
		mask |= transport.AttrAccessFlags
	}
	if err := q.Modify(&init, mask); err != nil {
		return err
	}
	rtr := transport.QPAttr{State: transport.StateRTR}
	mask = transport.AttrState
	if o.Type == transport.QPTypeRC || o.Type == transport.QPTypeUC {
		rtr.AV = ep.Node.AV(peer.Node)
		rtr.PathMTU = o.MTU
		rtr.DestQPN = peer.QP.QPN()
		rtr.RQPSN = rqPSN
		mask |= transport.AttrAV | transport.AttrPathMTU | transport.AttrDestQPN | transport.AttrRQPSN
		if o.Type == transport.QPTypeRC {
			rtr.MaxDestRdAtomic = o.RdAtomic
			rtr.MinRNRTimer = o.MinRNRTimer
			mask |= transport.AttrMaxDestRdAtomic | transport.AttrMinRNRTimer
		}
	}
	if err := q.Modify(&rtr, mask); err != nil {
		return err
	}
	rts := transport.QPAttr{State: transport.StateRTS, SQPSN: sqPSN}
	mask = transport.AttrState | transport.AttrSQPSN
	if o.Type == transport.QPTypeRC {
		rts.Timeout, rts.RetryCnt, rts.RNRRetry, rts.MaxRdAtomic = o.Timeout, *o.RetryCnt, *o.RNRRetry, o.RdAtomic
		mask |= transport.AttrTimeout | transport.AttrRetryCnt | transport.AttrRNRRetry | transport.AttrMaxQPRdAtomic
	}
	return q.Modify(&rts, mask)
}

// PostSend posts wr on the endpoint's QP and rings its doorbell, as the
// device's send owner runs the engine once it has taken a WR from the
// client's ring.
func (ep *Endpoint) PostSend(wr *transport.SendWR) error {
	err := ep.QP.PostSend(wr)
	ep.Node.Doorbell(ep.QP)
	return err
}

// PostRecv posts wr on the endpoint's QP and rings its doorbell.
func (ep *Endpoint) PostRecv(wr *transport.RecvWR) error {
	err := ep.QP.PostRecv(wr)
	ep.Node.Doorbell(ep.QP)
	return err
}

// Buffer is registered memory on a node.
type Buffer struct {
	Bytes []byte
	LKey  uint32
	RKey  uint32
	Addr  uint64 // the IOVA of Bytes[0]
}

// RegBuffer registers n bytes at IOVA addr with the given access.
func (ep *Endpoint) RegBuffer(n int, addr uint64, access mem.Access) (*Buffer, error) {
	b := make([]byte, n)
	key, err := ep.Node.Mem.RegMR(ep.PD, mem.NewSliceBacking(b), 0, uint64(n), addr, access)
	if err != nil {
		return nil, err
	}
	return &Buffer{Bytes: b, LKey: key, RKey: key, Addr: addr}, nil
}

// SGE covers [off, off+n) of the buffer.
func (b *Buffer) SGE(off, n int) transport.SGE {
	return transport.SGE{Addr: b.Addr + uint64(off), Length: uint32(n), LKey: b.LKey}
}

// Poll drains a CQ.
func Poll(cq *transport.MemCQ) []transport.WC {
	out := make([]transport.WC, cq.Len())
	return out[:cq.Poll(out)]
}
