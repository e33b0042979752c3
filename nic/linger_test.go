package nic_test

import (
	"net"
	"net/netip"
	"sync"
	"testing"

	"github.com/vrnic/vrnicd/header"
	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/nic/gid"
	"github.com/vrnic/vrnicd/nic/netstack"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/mem"
	tt "github.com/vrnic/vrnicd/transport/transporttest"
	"github.com/vrnic/vrnicd/transport/wire"
)

// recorder is a port that keeps the transport packets the device sends.
type recorder struct {
	mu   sync.Mutex
	pkts [][]byte
}

func (r *recorder) Send(pkts []netstack.TxPacket) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range pkts {
		r.pkts = append(r.pkts, append([]byte(nil), p.Buf[p.Offset:]...))
	}
	return len(pkts), nil
}

func (r *recorder) Resolve(netip.Addr) {}

func (r *recorder) take() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.pkts
	r.pkts = nil
	return out
}

// A destroyed RC QP goes on acknowledging duplicates of the SENDs and
// WRITEs it took, for nic.Linger, so a peer whose copy of the last ACK was
// lost gets it again instead of retransmitting to nobody (kernel rxe, at
// retry_cnt 7, would for ever). Nothing else is answered.
func TestDestroyedQPAcknowledgesDuplicates(t *testing.T) {
	clk := tt.NewManualClock()
	mac := net.HardwareAddr{0x02, 0, 0x5e, 0, 0, 1}
	local, peer := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	gids := gid.New(mac, 0)
	if err := gids.Sync([]netip.Addr{local}); err != nil {
		t.Fatal(err)
	}
	dev, err := nic.NewDevice(nic.Config{MAC: mac, GIDs: gids, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	rec := &recorder{}
	dev.Attach(rec)
	pd, err := dev.Mem().AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	key, err := dev.Mem().RegMR(pd, mem.NewSliceBacking(buf), 0, 4096, 0x1000, mem.LocalWrite|mem.RemoteWrite|mem.RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	q, err := dev.CreateQP(nic.QPConfig{Type: transport.QPTypeRC, PD: pd, SendCQ: transport.NewMemCQ(16, nil),
		RecvCQ: transport.NewMemCQ(16, nil), Cap: transport.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	li, _ := gids.IndexOf(local)
	const peerQPN, firstPSN = 0x77, 0x500
	steps := []struct {
		attr transport.QPAttr
		mask transport.AttrMask
	}{
		{transport.QPAttr{State: transport.StateInit, Port: 1, AccessFlags: 0xF},
			transport.AttrState | transport.AttrPKeyIndex | transport.AttrPort | transport.AttrAccessFlags},
		{transport.QPAttr{State: transport.StateRTR, PathMTU: transport.MTU1024, DestQPN: peerQPN, RQPSN: firstPSN,
			MaxDestRdAtomic: 1, MinRNRTimer: 12,
			AV: transport.AddressVector{DGID: gid.FromAddr(peer), SGIDIndex: uint8(li), HopLimit: 64, Port: 1}},
			transport.AttrState | transport.AttrAV | transport.AttrPathMTU | transport.AttrDestQPN | transport.AttrRQPSN |
				transport.AttrMaxDestRdAtomic | transport.AttrMinRNRTimer},
	}
	for _, s := range steps {
		if err := q.Modify(&s.attr, s.mask); err != nil {
			t.Fatal(err)
		}
	}
	qpn := q.QPN()
	deliver := func(from netip.Addr, op wire.Opcode, psn uint32, payload int) {
		f := wire.PacketFields{BTH: wire.BTHFields{Opcode: op, PKey: wire.DefaultPKey, DestQP: qpn, PSN: psn, AckReq: true},
			RETH: wire.RETHFields{VA: 0x1000, RKey: key, Length: uint32(payload)}}
		pkt := make([]byte, wire.Len(op.Info(), payload))
		f.EncodeHeaders(pkt, payload)
		dev.Deliver([]netstack.RxPacket{{Transport: pkt, IPHeader: make([]byte, header.IPv4HeaderLen), Src: from, Dst: local, SrcPort: 0xc000}})
	}
	expectACK := func(what string, pkts [][]byte, psn, msn uint32) {
		t.Helper()
		if len(pkts) != 1 {
			t.Fatalf("%s: %d packets sent, want one ACK", what, len(pkts))
		}
		var p wire.Packet
		if err := p.Parse(pkts[0]); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if p.BTH.Opcode() != wire.RCAcknowledge || p.BTH.DestQP() != peerQPN || p.BTH.PSN() != psn ||
			wire.SyndromeType(p.AETH.Syndrome()) != wire.AETHAck || p.AETH.MSN() != msn {
			t.Fatalf("%s: %v to qp %#x psn %#x syndrome %#x msn %d; want an ACK to %#x psn %#x msn %d", what, p.BTH.Opcode(),
				p.BTH.DestQP(), p.BTH.PSN(), p.AETH.Syndrome(), p.AETH.MSN(), peerQPN, psn, msn)
		}
	}

	// Two WRITEs taken while the QP lives, each acknowledged.
	for i := range uint32(2) {
		deliver(peer, wire.RCRDMAWriteOnly, firstPSN+i, 16)
		dev.Sync()
		expectACK("live WRITE", rec.take(), firstPSN+i, i+1)
	}
	q.Destroy()

	deliver(peer, wire.RCRDMAWriteOnly, firstPSN+1, 16)
	expectACK("duplicate of the last WRITE after destroy", rec.take(), firstPSN+1, 2)
	deliver(peer, wire.RCRDMAWriteOnly, firstPSN, 16)
	expectACK("duplicate of an earlier WRITE", rec.take(), firstPSN+1, 2)
	if got := dev.Counters().Get(transport.ClosedQPAcks); got != 2 {
		t.Errorf("closed_qp_acks %d, want 2", got)
	}
	for _, c := range []struct {
		what string
		from netip.Addr
		op   wire.Opcode
		psn  uint32
		n    int
	}{
		{"a new WRITE (never taken)", peer, wire.RCRDMAWriteOnly, firstPSN + 2, 16},
		{"a duplicate READ (its memory is gone)", peer, wire.RCRDMAReadRequest, firstPSN, 0},
		{"a duplicate from another address", netip.MustParseAddr("192.0.2.3"), wire.RCRDMAWriteOnly, firstPSN, 16},
	} {
		deliver(c.from, c.op, c.psn, c.n)
		if got := rec.take(); len(got) != 0 {
			t.Errorf("%s: answered with %d packets", c.what, len(got))
		}
	}
	clk.Advance(nic.Linger)
	dropped := dev.Counters().Get(transport.RcvdDropped)
	deliver(peer, wire.RCRDMAWriteOnly, firstPSN+1, 16)
	if got := rec.take(); len(got) != 0 {
		t.Errorf("answered %d packets after nic.Linger", len(got))
	}
	if dev.Counters().Get(transport.RcvdDropped) != dropped+1 {
		t.Error("a packet to a QP gone for good is not counted as dropped")
	}
}
