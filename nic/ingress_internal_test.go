package nic

import (
	"net"
	"net/netip"
	"testing"

	"github.com/vrnic/vrnicd/nic/gid"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/wire"
)

func encodePacket(t *testing.T, f wire.PacketFields) []byte {
	t.Helper()
	b := make([]byte, f.EncodedLen())
	if f.Encode(b) != len(b) {
		t.Fatalf("Encode %+v", f.BTH)
	}
	return b
}

// ingress only decides: each packet gets its verdict, and a drop is
// counted, with nothing handed to any QP.
func TestIngressVerdicts(t *testing.T) {
	d, err := NewDevice(Config{MAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	pd, err := d.Mem().AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	q, err := d.CreateQP(QPConfig{Type: transport.QPTypeUD, PD: pd, SendCQ: transport.NewMemCQ(4, nil),
		RecvCQ: transport.NewMemCQ(4, nil), Cap: transport.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	src, dst := gid.FromAddr(netip.MustParseAddr("192.0.2.2")), gid.FromAddr(netip.MustParseAddr("192.0.2.1"))
	ud := func(qpn uint32, mod func(*wire.BTHFields)) []byte {
		f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: qpn},
			DETH: wire.DETHFields{QKey: 1, SrcQP: 9}, Payload: make([]byte, 8)}
		if mod != nil {
			mod(&f.BTH)
		}
		return encodePacket(t, f)
	}
	rc := encodePacket(t, wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: q.QPN()}})
	for _, tc := range []struct {
		name    string
		tp      []byte
		to      rxTo
		q       *QP
		request bool
		dropped uint64
	}{
		{"truncated", make([]byte, 8), rxDropped, nil, false, 1},
		{"TVer 1", ud(q.QPN(), func(b *wire.BTHFields) { b.TVer = 1 }), rxDropped, nil, false, 1},
		{"P_Key 0x1234", ud(q.QPN(), func(b *wire.BTHFields) { b.PKey = 0x1234 }), rxDropped, nil, false, 1},
		{"QPN 0", ud(0, nil), rxDropped, nil, false, 1},
		{"GSI", ud(GSIQPN, nil), rxGSI, nil, false, 0},
		{"no such QP", ud(0x7777, nil), rxClosed, nil, false, 0},
		{"multicast, no group", ud(wire.MulticastQPN, nil), rxDropped, nil, false, 1},
		{"RC to a UD QP", rc, rxDropped, nil, false, 1},
		{"UD QP", ud(q.QPN(), nil), rxQP, q, true, 0},
	} {
		before := d.ctr.Get(transport.RcvdDropped)
		var rx transport.RxPacket
		v := d.ingress(&rx, tc.tp, nil, src, dst, 0xc000)
		if v.to != tc.to || v.q != tc.q || v.request != tc.request {
			t.Errorf("%s: verdict %+v, want to %d q %p request %v", tc.name, v, tc.to, tc.q, tc.request)
		}
		if got := d.ctr.Get(transport.RcvdDropped) - before; got != tc.dropped {
			t.Errorf("%s: %d drops counted, want %d", tc.name, got, tc.dropped)
		}
	}
	// A group with a member: the group, for receive to admit each member.
	group := gid.FromAddr(netip.MustParseAddr("239.1.2.3"))
	if err := d.AttachMcast(q, group); err != nil {
		t.Fatal(err)
	}
	var rx transport.RxPacket
	if v := d.ingress(&rx, ud(wire.MulticastQPN, nil), nil, src, group, 0xc000); v.to != rxGroup || len(v.group) != 1 || v.group[0] != q || !v.request {
		t.Errorf("multicast to a group of one: verdict %+v", v)
	}
	// The verdict costs no allocation.
	tp := ud(q.QPN(), nil)
	if n := testing.AllocsPerRun(100, func() { d.ingress(&rx, tp, nil, src, dst, 0xc000) }); n != 0 {
		t.Errorf("ingress: %v allocations", n)
	}
}
