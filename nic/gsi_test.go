package nic_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/nic/link"
	"github.com/vrnic/vrnicd/nic/netstack"
	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/transport/wire"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
)

// madOf is a 256-byte MAD with the common header of class, method and
// attribute (IBA 13.4.2) and transaction ID tid.
func madOf(class, method uint8, attr uint16, tid uint64) [mad.Size]byte {
	var b [mad.Size]byte
	b[0], b[1], b[2], b[3] = mad.BaseVersion, class, 2, method
	binary.BigEndian.PutUint64(b[8:], tid)
	binary.BigEndian.PutUint16(b[16:], attr)
	return b
}

func counters(d *nic.Device) map[string]uint64 {
	m := map[string]uint64{}
	d.GSICounters(func(n string, v uint64) { m[n] = v })
	return m
}

func recvMAD(t *testing.T, ch <-chan nic.MAD) nic.MAD {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no MAD received")
	}
	return nic.MAD{}
}

func madChan(d *nic.Device) chan nic.MAD {
	ch := make(chan nic.MAD, 16)
	d.SetCMHandler(func(m *nic.MAD) {
		select {
		case ch <- *m:
		default:
		}
	})
	return ch
}

// TestGSICMMAD: a CM MAD sent from QP1 arrives at the peer's CM handler with
// the sender's address and source QP 1, counted by kind on both sides.
func TestGSICMMAD(t *testing.T) {
	a, b := nictest.Pair(t, 1500)
	ch := madChan(b.Dev)
	var frame []byte
	a.Link.SetHook(func(f []byte) link.Action {
		if len(f) > 14 && f[12] == 0x08 && f[13] == 0 && frame == nil {
			frame = append([]byte(nil), f...)
		}
		return link.Deliver
	})
	req := madOf(mad.ClassCM, mad.MethodSend, mad.AttrConnectRequest, 42)
	if err := a.Dev.SendMAD(&nic.MAD{To: b.Addr, Data: req}); err != nil {
		t.Fatal(err)
	}
	m := recvMAD(t, ch)
	if m.From != a.Addr || m.To != b.Addr || m.SrcQP != nic.GSIQPN || m.Data != req {
		t.Errorf("received from %v to %v src QP %d, data equal %v", m.From, m.To, m.SrcQP, m.Data == req)
	}
	if c := counters(a.Dev); c["cm_tx_req"] != 1 {
		t.Errorf("sender cm_tx_req %d, want 1", c["cm_tx_req"])
	}
	if c := counters(b.Dev); c["cm_rx_req"] != 1 || c["cm_rx_rep"] != 0 {
		t.Errorf("receiver cm_rx_req %d cm_rx_rep %d, want 1 0", c["cm_rx_req"], c["cm_rx_rep"])
	}
	// On the wire: UDP source port 0xd872 (rxe's for QP1), BTH dest QP 1,
	// P_Key 0xFFFF, DETH Q_Key 0x80010000 and source QP 1.
	a.Link.SetHook(nil)
	if frame == nil {
		t.Fatal("no IPv4 frame seen")
	}
	udp := frame[14+20:]
	bth := udp[8:]
	if sport := binary.BigEndian.Uint16(udp); sport != 0xd872 {
		t.Errorf("UDP source port %#x, want 0xd872", sport)
	}
	if bth[0] != byte(wire.UDSendOnly) || binary.BigEndian.Uint16(bth[2:]) != 0xFFFF ||
		binary.BigEndian.Uint32(bth[4:])&0xFFFFFF != 1 || binary.BigEndian.Uint32(bth[12:]) != wire.GSIQKey ||
		binary.BigEndian.Uint32(bth[16:])&0xFFFFFF != 1 {
		t.Errorf("BTH+DETH % x", bth[:20])
	}
	if ttl := frame[14+8]; ttl != 64 {
		t.Errorf("TTL %d, want 64", ttl)
	}
}

// TestGSIUnsupported: a Get of a class nothing serves is answered GetResp
// with status 0x000C to the sender's QP; a response or a Send is not.
func TestGSIUnsupported(t *testing.T) {
	a, b := nictest.Pair(t, 1500)
	ch := madChan(a.Dev) // a's CM handler sees b's answer to a CM-class Get
	get := madOf(mad.ClassCM, mad.MethodGet, mad.AttrClassPortInfo, 7)
	if err := a.Dev.SendMAD(&nic.MAD{To: b.Addr, Data: get}); err != nil {
		t.Fatal(err)
	}
	m := recvMAD(t, ch)
	if m.Data[3] != mad.MethodGetResp || binary.BigEndian.Uint16(m.Data[4:]) != mad.StatusUnsupportedMethodAttr ||
		binary.BigEndian.Uint64(m.Data[8:]) != 7 {
		t.Errorf("answer method %#x status %#x TID %d", m.Data[3], binary.BigEndian.Uint16(m.Data[4:]), binary.BigEndian.Uint64(m.Data[8:]))
	}
	// A Perf-class Get: answered, and counted as another class.
	got := make(chan []byte, 4)
	b.Link.SetHook(func(f []byte) link.Action {
		if len(f) > 14+20+8+20+mad.Size && f[12] == 0x08 {
			select {
			case got <- append([]byte(nil), f[14+20+8+20:14+20+8+20+mad.Size]...):
			default:
			}
		}
		return link.Deliver
	})
	perf := madOf(mad.ClassPerf, mad.MethodGet, 0x12, 9)
	if err := a.Dev.SendMAD(&nic.MAD{To: b.Addr, Data: perf}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r[1] != mad.ClassPerf || r[3] != mad.MethodGetResp || binary.BigEndian.Uint16(r[4:]) != mad.StatusUnsupportedMethodAttr {
			t.Errorf("Perf answer class %#x method %#x status %#x", r[1], r[3], binary.BigEndian.Uint16(r[4:]))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer to a Perf Get")
	}
	// A GetResp is never answered: it would ping-pong.
	resp := madOf(mad.ClassPerf, mad.MethodGetResp, 0x12, 10)
	if err := a.Dev.SendMAD(&nic.MAD{To: b.Addr, Data: resp}); err != nil {
		t.Fatal(err)
	}
	// Barrier: a CM Get after it is answered, so the GetResp was handled.
	if err := a.Dev.SendMAD(&nic.MAD{To: b.Addr, Data: get}); err != nil {
		t.Fatal(err)
	}
	recvMAD(t, ch)
	b.Link.SetHook(nil)
	if c := counters(b.Dev); c["gsi_rx_other"] != 2 || c["gsi_tx_other"] != 1 {
		t.Errorf("gsi_rx_other %d gsi_tx_other %d, want 2 1", c["gsi_rx_other"], c["gsi_tx_other"])
	}
}

// TestGSIRefuses: QP1 drops what is not a UD SEND_ONLY of a 256-byte MAD
// with the GSI Q_Key, and a subnet management class (QP0's).
func TestGSIRefuses(t *testing.T) {
	a, b := nictest.Pair(t, 1500)
	ch := madChan(b.Dev)
	good := madOf(mad.ClassCM, mad.MethodSend, mad.AttrReadyToUse, 1)
	smp := madOf(mad.ClassSubnLID, mad.MethodGet, 0x11, 1)
	cases := []struct {
		name    string
		op      wire.Opcode
		qkey    uint32
		payload []byte
	}{
		{"wrong Q_Key", wire.UDSendOnly, 0x11111111, good[:]},
		{"short MAD", wire.UDSendOnly, wire.GSIQKey, good[:128]},
		{"with immediate", wire.UDSendOnlyWithImmediate, wire.GSIQKey, good[:]},
		{"SMP on QP1", wire.UDSendOnly, wire.GSIQKey, smp[:]},
	}
	for _, c := range cases {
		f := wire.PacketFields{BTH: wire.BTHFields{Opcode: c.op, PKey: wire.DefaultPKey, DestQP: 1},
			DETH: wire.DETHFields{QKey: c.qkey, SrcQP: 1}, Payload: c.payload}
		tp := make([]byte, f.EncodedLen())
		f.Encode(tp)
		b.Dev.Deliver([]netstack.RxPacket{{Transport: tp, IPHeader: make([]byte, 20), Src: a.Addr, Dst: b.Addr, SrcPort: 0xd872}})
	}
	select {
	case m := <-ch:
		t.Errorf("a refused MAD reached the CM: % x", m.Data[:24])
	default:
	}
	if c := counters(b.Dev); c["gsi_dropped"] != uint64(len(cases)) {
		t.Errorf("gsi_dropped %d, want %d", c["gsi_dropped"], len(cases))
	}
	// And the right one passes.
	f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: 1},
		DETH: wire.DETHFields{QKey: wire.GSIQKey, SrcQP: 1}, Payload: good[:]}
	tp := make([]byte, f.EncodedLen())
	f.Encode(tp)
	b.Dev.Deliver([]netstack.RxPacket{{Transport: tp, IPHeader: make([]byte, 20), Src: a.Addr, Dst: b.Addr}})
	if m := recvMAD(t, ch); m.From != a.Addr || m.Data != good {
		t.Errorf("MAD from %v", m.From)
	}
}
