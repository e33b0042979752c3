package transport_test

// Rules of queues and QP state: SRQs, the modify transition table,
// outstanding reads, faulted receives, solicited events, GSI, ACK
// coalescing.

import (
	"errors"
	"fmt"
	"testing"

	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/mem"
	tt "github.com/vrnic/vrnicd/transport/transporttest"
	"github.com/vrnic/vrnicd/transport/wire"
)

// SRQ: two QPs take receives from one SRQ; the limit event fires once when
// the SRQ drops below its armed limit.
func TestSRQSharedAndLimitEvent(t *testing.T) {
	n := tt.NewNet(13)
	na, nb := n.AddNode(), n.AddNode()
	pd, _ := nb.Mem.AllocPD()
	events := 0
	srq, err := transport.NewSRQ(1, pd, 16, 1, func() { events++ })
	if err != nil {
		t.Fatal(err)
	}
	a1, b1, err := tt.Connect(na, nb, tt.Options{SRQ: [2]*transport.SRQ{nil, srq}, PD: [2]mem.PD{0, pd}})
	if err != nil {
		t.Fatal(err)
	}
	a2, b2, err := tt.Connect(na, nb, tt.Options{SRQ: [2]*transport.SRQ{nil, srq}, PD: [2]mem.PD{0, pd}})
	if err != nil {
		t.Fatal(err)
	}
	dst, _ := b1.RegBuffer(16*256, 0x2000, rw)
	for i := range 8 {
		if err := srq.Post(&transport.RecvWR{ID: uint64(i), SGL: []transport.SGE{dst.SGE(i*256, 256)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := srq.Modify(0, false, 5, true); err != nil {
		t.Fatal(err)
	}
	if err := b1.PostRecv(&transport.RecvWR{ID: 99}); !errors.Is(err, transport.ErrInvalid) {
		t.Errorf("PostRecv on an SRQ QP: %v, want ErrInvalid", err)
	}
	for i, a := range []*tt.Endpoint{a1, a2, a1, a2} {
		src, _ := a.RegBuffer(64, uint64(0x1000+i*0x100), rw)
		post(t, a, transport.SendWR{ID: uint64(i), Opcode: transport.WRSend, SGL: []transport.SGE{src.SGE(0, 64)}})
	}
	if err := n.Run(func() bool { return b1.RecvCQ.Len()+b2.RecvCQ.Len() == 4 }, 10000); err != nil {
		t.Fatal(err)
	}
	if b1.RecvCQ.Len() != 2 || b2.RecvCQ.Len() != 2 {
		t.Errorf("receives %d and %d, want 2 and 2", b1.RecvCQ.Len(), b2.RecvCQ.Len())
	}
	if events != 1 || srq.Len() != 4 {
		t.Errorf("%d limit events with %d WQEs left, want 1 with 4", events, srq.Len())
	}
}

func TestModifyQPFollowsTheTransitionTable(t *testing.T) {
	n := tt.NewNet(14)
	nd := n.AddNode()
	pd, _ := nd.Mem.AllocPD()
	cq := transport.NewMemCQ(16, nil)
	newQP := func(typ transport.QPType) *transport.QP {
		q, err := nd.NewQP(transport.QPConfig{Type: typ, PD: pd, SendCQ: cq, RecvCQ: cq, Cap: transport.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	const (
		S, P, PI, A, Q = transport.AttrState, transport.AttrPort, transport.AttrPKeyIndex, transport.AttrAccessFlags, transport.AttrQKey
	)
	rtr := transport.AttrAV | transport.AttrPathMTU | transport.AttrDestQPN | transport.AttrRQPSN | transport.AttrMaxDestRdAtomic | transport.AttrMinRNRTimer
	rts := transport.AttrSQPSN | transport.AttrTimeout | transport.AttrRetryCnt | transport.AttrRNRRetry | transport.AttrMaxQPRdAtomic
	good := transport.QPAttr{Port: 1, PathMTU: transport.MTU1024, DestQPN: 0x12, AV: nd.AV(nd), RetryCnt: 7, RNRRetry: 7, Timeout: 14}
	steps := []struct {
		name  string
		typ   transport.QPType
		to    transport.QPState
		mask  transport.AttrMask
		tweak func(*transport.QPAttr)
		ok    bool
	}{
		{"RC RESET→INIT needs port, pkey index, access", transport.QPTypeRC, transport.StateInit, S | P | PI, nil, false},
		{"RC RESET→INIT with a Q_Key is not allowed", transport.QPTypeRC, transport.StateInit, S | P | PI | A | Q, nil, false},
		{"RC RESET→RTS is not a transition", transport.QPTypeRC, transport.StateRTS, S | rts, nil, false},
		{"RC RESET→INIT", transport.QPTypeRC, transport.StateInit, S | P | PI | A, nil, true},
		{"RC INIT→RTR without min_rnr_timer", transport.QPTypeRC, transport.StateRTR, S | rtr&^transport.AttrMinRNRTimer, nil, false},
		{"RC INIT→RTR with path MTU 6", transport.QPTypeRC, transport.StateRTR, S | rtr, func(a *transport.QPAttr) { a.PathMTU = 6 }, false},
		{"RC INIT→RTR with rq_psn over 24 bits", transport.QPTypeRC, transport.StateRTR, S | rtr, func(a *transport.QPAttr) { a.RQPSN = 1 << 24 }, false},
		{"RC INIT→RTR", transport.QPTypeRC, transport.StateRTR, S | rtr, nil, true},
		{"RC RTR→RTS without retry_cnt", transport.QPTypeRC, transport.StateRTS, S | rts&^transport.AttrRetryCnt, nil, false},
		{"RC RTR→RTS with retry_cnt 8", transport.QPTypeRC, transport.StateRTS, S | rts, func(a *transport.QPAttr) { a.RetryCnt = 8 }, false},
		{"RC RTR→RTS with max_rd_atomic 129", transport.QPTypeRC, transport.StateRTS, S | rts, func(a *transport.QPAttr) { a.MaxRdAtomic = 129 }, false},
		{"RC RTR→RTS", transport.QPTypeRC, transport.StateRTS, S | rts, nil, true},
		{"RC RTS→RTS may change min_rnr_timer", transport.QPTypeRC, transport.StateRTS, S | transport.AttrMinRNRTimer, nil, true},
		{"RC RTS→RTS may not change the path MTU", transport.QPTypeRC, transport.StateRTS, S | transport.AttrPathMTU, nil, false},
		{"RC RTS→SQD", transport.QPTypeRC, transport.StateSQD, S, nil, true},
		{"RC SQD→RTS", transport.QPTypeRC, transport.StateRTS, S, nil, true},
		{"RC any→ERR", transport.QPTypeRC, transport.StateErr, S, nil, true},
		{"RC ERR→RTS is not a transition", transport.QPTypeRC, transport.StateRTS, S, nil, false},
		{"RC ERR→RESET", transport.QPTypeRC, transport.StateReset, S, nil, true},
	}
	q := newQP(transport.QPTypeRC)
	for _, st := range steps {
		a := good
		a.State = st.to
		if st.tweak != nil {
			st.tweak(&a)
		}
		before := q.State()
		err := q.Modify(&a, st.mask)
		if st.ok && err != nil {
			t.Errorf("%s: %v", st.name, err)
		}
		if !st.ok {
			if !errors.Is(err, transport.ErrInvalid) {
				t.Errorf("%s: got %v, want EINVAL", st.name, err)
			}
			if q.State() != before {
				t.Errorf("%s: failed modify changed the state to %v", st.name, q.State())
			}
		}
	}
	ud := newQP(transport.QPTypeUD)
	if err := ud.Modify(&transport.QPAttr{State: transport.StateInit, Port: 1, QKey: 1}, S|P|PI|Q); err != nil {
		t.Errorf("UD RESET→INIT: %v", err)
	}
	if err := ud.Modify(&transport.QPAttr{State: transport.StateRTR}, S|transport.AttrAV); !errors.Is(err, transport.ErrInvalid) {
		t.Errorf("UD INIT→RTR with an AV: %v, want EINVAL", err)
	}
	if err := ud.PostSend(&transport.SendWR{Opcode: transport.WRSend}); !errors.Is(err, transport.ErrState) {
		t.Errorf("post_send in INIT: %v, want ErrState", err)
	}
}

// A requester that keeps more READs outstanding than the responder's
// max_dest_rd_atomic (plus room for its retries) gets an invalid-request
// NAK instead of an ever-growing response queue. The requester here is
// hand-built packets: our own never exceeds its window.
func TestTooManyOutstandingReadsIsInvalidRequest(t *testing.T) {
	p := newPair(t, 15, tt.Options{RdAtomic: 2, MTU: transport.MTU256})
	dst := p.buf(t, p.b, 1<<20, 0x2000_0000)
	var naks []uint8
	p.net.Tap = func(f *tt.Frame) {
		if f.Pkt.AETH != nil && f.Pkt.BTH.Opcode() == wire.RCAcknowledge {
			naks = append(naks, f.Pkt.AETH.Syndrome())
		}
	}
	psn := uint32(0)
	for i := range 16 {
		f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAReadRequest, PKey: wire.DefaultPKey,
			DestQP: p.b.QP.QPN(), AckReq: true, PSN: psn},
			RETH: wire.RETHFields{VA: dst.Addr, RKey: dst.RKey, Length: 1 << 20}}
		buf := make([]byte, f.EncodedLen())
		f.Encode(buf)
		var rx transport.RxPacket
		if err := rx.Parse(buf); err != nil {
			t.Fatal(err)
		}
		p.b.QP.HandleRequest(&rx)
		psn += (1 << 20) / 256
		if p.b.QP.State() == transport.StateErr {
			if i < 8 {
				t.Fatalf("READ %d refused; max_dest_rd_atomic 2 allows %d queued", i, 2*2+4)
			}
			break
		}
	}
	p.net.Run(func() bool { return p.net.InFlight() == 0 }, 1<<20)
	if len(naks) == 0 || naks[len(naks)-1] != wire.NakInvalidRequest || p.b.QP.State() != transport.StateErr {
		t.Fatalf("NAKs %#x, responder %v; want an invalid-request NAK and ERR", naks, p.b.QP.State())
	}
}

// A receive WQE that failed validation fails the message that reaches it:
// on RC with a remote operational error NAK (the QP goes to ERR).
func TestFaultedRecvWQEIsRemoteOperationalError(t *testing.T) {
	p := newPair(t, 16, tt.Options{})
	src := p.buf(t, p.a, 64, 0x1000)
	if err := p.b.PostRecv(&transport.RecvWR{ID: 5, Fault: transport.WCLocQPOpErr}); err != nil {
		t.Fatal(err)
	}
	post(t, p.a, transport.SendWR{ID: 1, Opcode: transport.WRSend, Flags: transport.SendSolicited, SGL: []transport.SGE{src.SGE(0, 8)}})
	if wc := p.waitWC(t, p.a.SendCQ, 1); wc[0].Status != transport.WCRemOpErr {
		t.Fatalf("sender %v, want REM_OP_ERR", wc[0].Status)
	}
	if wc := p.waitWC(t, p.b.RecvCQ, 1); wc[0].Status != transport.WCLocQPOpErr || wc[0].WRID != 5 {
		t.Fatalf("receiver %+v, want WR 5 with LOC_QP_OP_ERR", wc[0])
	}
}

// The BTH SE bit of a message's last packet reaches its receive completion.
func TestSolicitedEventReachesTheCompletion(t *testing.T) {
	p := newPair(t, 17, tt.Options{})
	src := p.buf(t, p.a, 64, 0x1000)
	dst := p.buf(t, p.b, 64, 0x2000)
	postRecv(t, p.b, 1, dst.SGE(0, 64))
	postRecv(t, p.b, 2, dst.SGE(0, 64))
	post(t, p.a, transport.SendWR{ID: 1, Opcode: transport.WRSend, SGL: []transport.SGE{src.SGE(0, 8)}})
	post(t, p.a, transport.SendWR{ID: 2, Opcode: transport.WRSend, Flags: transport.SendSolicited, SGL: []transport.SGE{src.SGE(0, 8)}})
	wcs := p.waitWC(t, p.b.RecvCQ, 2)
	if wcs[0].Solicited || !wcs[1].Solicited {
		t.Fatalf("solicited flags %v, %v; want false, true", wcs[0].Solicited, wcs[1].Solicited)
	}
}

// QP1 (GSI) is UD with the well-known Q_Key 0x80010000 (IBA 13.5.2.1): its
// datagrams carry that Q_Key whatever the WR says, with source QP 1, and a
// datagram to QP1 with another Q_Key is dropped.
func TestGSIUsesTheWellKnownQKey(t *testing.T) {
	p := newPair(t, 18, tt.Options{Type: transport.QPTypeGSI, QPN: [2]uint32{1, 1}, QKey: wire.GSIQKey})
	src := p.buf(t, p.a, 512, 0x1000)
	dst := p.buf(t, p.b, 512, 0x2000)
	var deths []wire.DETHFields
	p.net.Tap = func(f *tt.Frame) { deths = append(deths, f.Pkt.DETH.Fields()) }
	av := p.a.Node.AV(p.b.Node)
	postRecv(t, p.b, 1, dst.SGE(0, 512))
	post(t, p.a, transport.SendWR{ID: 1, Opcode: transport.WRSend, SGL: []transport.SGE{src.SGE(0, 256)}, AH: &av, RemoteQPN: 1, RemoteQKey: 0x1234})
	wc := p.waitWC(t, p.b.RecvCQ, 1)
	if wc[0].Status != transport.WCSuccess || wc[0].SrcQP != 1 || wc[0].ByteLen != 256+transport.GRHLen {
		t.Fatalf("receive %+v", wc[0])
	}
	if len(deths) != 1 || deths[0] != (wire.DETHFields{QKey: wire.GSIQKey, SrcQP: 1}) {
		t.Errorf("DETH %+v, want Q_Key %#x from QP 1", deths, wire.GSIQKey)
	}
	if err := p.a.QP.Modify(&transport.QPAttr{State: transport.StateRTS, QKey: 0x1111}, transport.AttrState|transport.AttrQKey); !errors.Is(err, transport.ErrInvalid) {
		t.Errorf("setting QP1's Q_Key to 0x1111: %v, want EINVAL", err)
	}
}

// IBA 9.7.5.1.1: one ACK acknowledges every request up to its PSN. The
// responder answers a batch of requests it took in one owner pass with one
// ACK, for the last PSN and the MSN of every message completed; a READ in
// the batch gets its response behind the ACK of what came before it.
func TestAcksOfABatchCoalesce(t *testing.T) {
	for _, withRead := range []bool{false, true} {
		p := newPair(t, 21, tt.Options{PSN: [2]uint32{0x100, 0x100}})
		src := p.buf(t, p.a, 4096, 0x1000)
		dst := p.buf(t, p.b, 8192, 0x2000)
		const n = 8
		for i := range n {
			postRecv(t, p.b, uint64(i), dst.SGE(i*64, 64))
			op := transport.WRSend
			wr := transport.SendWR{ID: uint64(i), Opcode: op, Flags: transport.SendSignaled, SGL: []transport.SGE{src.SGE(0, 16)}}
			if withRead && i == n/2 {
				wr = transport.SendWR{ID: uint64(i), Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
					SGL: []transport.SGE{src.SGE(64, 32)}, RemoteAddr: dst.Addr + 4096, RKey: dst.RKey}
			}
			post(t, p.a, wr)
		}
		p.net.RunQPs() // a sends its n requests, each LAST/ONLY with AckReq
		if got := p.net.InFlight(); got != n {
			t.Fatalf("%d requests on the wire, want %d", got, n)
		}
		var out []string
		p.net.Tap = func(f *tt.Frame) {
			if f.Pkt.Op.Flags&wire.FlagRequest == 0 {
				out = append(out, fmt.Sprintf("%s psn %#x msn %d", f.Pkt.Op.Name, f.Pkt.BTH.PSN(), f.Pkt.AETH.MSN()))
			}
		}
		for range n { // one receive batch: every request before the owner runs
			p.net.Step()
		}
		p.net.RunQPs()
		for p.net.InFlight() > 0 {
			p.net.Step()
		}
		want := []string{"RC_ACKNOWLEDGE psn 0x107 msn 8"}
		if withRead {
			want = []string{"RC_ACKNOWLEDGE psn 0x103 msn 4", "RC_RDMA_READ_RESPONSE_ONLY psn 0x104 msn 5",
				"RC_ACKNOWLEDGE psn 0x107 msn 8"}
		}
		if fmt.Sprint(out) != fmt.Sprint(want) {
			t.Errorf("read %v: responses %v, want %v", withRead, out, want)
		}
		if wcs := p.waitWC(t, p.a.SendCQ, n); len(wcs) != n {
			t.Fatalf("%d completions", len(wcs))
		}
	}
}

// A request the responder has executed and completed is acknowledged even
// if the QP goes to ERR before its coalesced ACK left: the receive
// completion is already the application's (it may react to it, e.g. by
// disconnecting, which moves the QP to ERR), and a requester left without
// the ACK would retry into a QP that no longer answers.
func TestPendingAckLeavesWhenQPGoesToErr(t *testing.T) {
	p := newPair(t, 17, tt.Options{})
	dst := p.buf(t, p.b, 64, 0x3000)
	if err := p.b.PostRecv(&transport.RecvWR{ID: 9, SGL: []transport.SGE{dst.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	p.net.Run(func() bool { return p.net.InFlight() == 0 }, 1<<16)
	var acked []uint32
	p.net.Tap = func(f *tt.Frame) {
		if f.Pkt.AETH != nil && f.Pkt.BTH.Opcode() == wire.RCAcknowledge && wire.SyndromeType(f.Pkt.AETH.Syndrome()) == wire.AETHAck {
			acked = append(acked, f.Pkt.BTH.PSN())
		}
	}
	f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey,
		DestQP: p.b.QP.QPN(), AckReq: true, PSN: 0}}
	buf := make([]byte, f.EncodedLen())
	f.Encode(buf)
	var rx transport.RxPacket
	if err := rx.Parse(buf); err != nil {
		t.Fatal(err)
	}
	p.b.QP.HandleRequest(&rx)
	if wc := tt.Poll(p.b.RecvCQ); len(wc) != 1 || wc[0].Status != transport.WCSuccess || wc[0].WRID != 9 {
		t.Fatalf("receive completion %+v", wc)
	}
	if err := p.b.QP.Modify(&transport.QPAttr{State: transport.StateErr}, transport.AttrState); err != nil {
		t.Fatal(err)
	}
	p.b.QP.RunRecv()
	_ = p.net.Run(func() bool { return len(acked) > 0 }, 1<<16) // ErrStalled if no ACK ever leaves
	if len(acked) != 1 || acked[0] != 0 {
		t.Fatalf("ACKs for PSNs %v, want one for PSN 0", acked)
	}
}
