package netstack

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/header"
	"github.com/vrnic/vrnicd/transport/wire"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/rocetest"
)

// learnPeer answers the stack's need for the peer's MAC: an ARP request
// from the peer teaches it (the stack's reply is consumed).
func (h *harness) learnPeer() {
	h.t.Helper()
	h.inject(arpFrame(stackMAC, peerMAC, header.ARPFields{Op: header.ARPRequest,
		SenderMAC: [6]byte(peerMAC), SenderIP: peerV4.As4(), TargetIP: myV4.As4()}))
	h.next()
}

// sendN sends n RC packets to the peer from QP qpn, PSNs 0..n-1, in one
// batch.
func (h *harness) sendN(n int, qpn uint32) {
	h.t.Helper()
	d := &Dest{Src: myV4, Dst: peerV4, SrcPort: 0xc000, HopLimit: 64}
	pkts := make([]TxPacket, n)
	for i := range pkts {
		b := transport(16)
		wire.BTH(b[Headroom:]).SetPSN(uint32(i))
		pkts[i] = TxPacket{Buf: b, Offset: Headroom, Dest: d, QPN: qpn}
	}
	if got, err := h.st.Send(pkts); got != n || err != nil {
		h.t.Fatalf("Send = %d, %v", got, err)
	}
}

// received collects the PSNs of the frames the peer gets within d.
func (h *harness) received(d time.Duration) []uint32 {
	var psns []uint32
	for {
		f, ok := h.tryNext(d)
		if !ok {
			return psns
		}
		psns = append(psns, wire.BTH(f[14+20+8:]).PSN())
	}
}

// fromPeer turns a frame the stack sent into one the peer sends it back
// (MACs, addresses swapped; checksum and ICRC recomputed).
func fromPeer(t *testing.T, f []byte) []byte {
	g := append([]byte(nil), f...)
	copy(g[0:6], stackMAC)
	copy(g[6:12], peerMAC)
	ip := g[14:]
	copy(ip[12:16], peerV4.AsSlice())
	copy(ip[16:20], myV4.AsSlice())
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:], header.Checksum(ip[:20]))
	if err := wire.PutICRC(ip[:binary.BigEndian.Uint16(ip[2:])]); err != nil {
		t.Fatal(err)
	}
	return g
}

// Sent frames: dropped, duplicated, corrupted (the ICRC no longer holds),
// reordered and delayed as asked, only for the QP named, each counted;
// off again, they leave untouched.
func TestImpairSent(t *testing.T) {
	h := newHarness(t, nil)
	h.learnPeer()
	ctr := h.st.Counters()
	for _, tc := range []struct {
		name  string
		im    Impairment
		check func(t *testing.T, psns []uint32)
	}{
		{"loss", Impairment{Loss: 1}, func(t *testing.T, psns []uint32) {
			if len(psns) != 0 || ctr.ImpairDropped.Load() != 4 {
				t.Errorf("received %v, impair_dropped %d; want nothing, 4", psns, ctr.ImpairDropped.Load())
			}
		}},
		{"loss of another QP", Impairment{Loss: 1, QPN: 0x99}, func(t *testing.T, psns []uint32) {
			if len(psns) != 4 {
				t.Errorf("received %v, want all 4: the impairment is another QP's", psns)
			}
		}},
		{"dup", Impairment{Dup: 1}, func(t *testing.T, psns []uint32) {
			if len(psns) != 8 || ctr.ImpairDuplicated.Load() != 4 {
				t.Errorf("received %v, impair_duplicated %d; want each twice", psns, ctr.ImpairDuplicated.Load())
			}
		}},
		{"reorder", Impairment{Reorder: 1}, func(t *testing.T, psns []uint32) {
			if len(psns) != 4 || psns[0] != 1 || psns[1] != 0 || psns[2] != 3 || psns[3] != 2 {
				t.Errorf("received %v, want 1 0 3 2", psns)
			}
		}},
		{"delay", Impairment{Delay: 200 * time.Millisecond}, func(t *testing.T, psns []uint32) {
			if len(psns) != 0 || ctr.ImpairDelayed.Load() != 4 {
				t.Fatalf("within 100 ms: %v (impair_delayed %d); want nothing yet", psns, ctr.ImpairDelayed.Load())
			}
			if late := h.received(time.Second); len(late) != 4 {
				t.Errorf("after the delay: %v, want 4", late)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := h.st.SetImpairment(&tc.im); err != nil {
				t.Fatal(err)
			}
			h.sendN(4, 0x11)
			tc.check(t, h.received(100*time.Millisecond))
			if err := h.st.SetImpairment(nil); err != nil {
				t.Fatal(err)
			}
			ctr.ImpairDropped.Store(0)
			ctr.ImpairDuplicated.Store(0)
			ctr.ImpairDelayed.Store(0)
		})
	}
	if err := h.st.SetImpairment(&Impairment{Corrupt: 1}); err != nil {
		t.Fatal(err)
	}
	h.sendN(1, 0x11)
	f := h.next()
	ip := f[14:]
	if wire.VerifyICRC(ip[:binary.BigEndian.Uint16(ip[2:])]) == nil && header.Checksum(ip[:20]) == 0 {
		t.Error("corrupted frame still checks")
	}
	if _, on := h.st.Impairment(); !on {
		t.Error("Impairment() says none in force")
	}
	_ = h.st.SetImpairment(nil)
	if _, on := h.st.Impairment(); on {
		t.Error("Impairment() after it was turned off")
	}
}

// Received frames: dropped, duplicated (delivered twice) and corrupted
// (the ICRC check drops it, counted as an ICRC error) before the stack
// hands them on.
func TestImpairReceived(t *testing.T) {
	h := newHarness(t, nil)
	h.learnPeer()
	h.sendN(1, 0x11)
	frame := fromPeer(t, h.next())
	ctr := h.st.Counters()
	count := func() int {
		n := 0
		for {
			select {
			case <-h.rx:
				n++
			case <-time.After(100 * time.Millisecond):
				return n
			}
		}
	}
	h.inject(frame)
	if n := count(); n != 1 {
		t.Fatalf("without impairment %d delivered, want 1", n)
	}
	for _, tc := range []struct {
		name string
		im   Impairment
		want int
		ctr  func() uint64
	}{
		{"loss", Impairment{Loss: 1, Dir: DirIn}, 0, ctr.ImpairDropped.Load},
		{"dup", Impairment{Dup: 1}, 2, ctr.ImpairDuplicated.Load},
		{"corrupt", Impairment{Corrupt: 1, Dir: DirIn}, 0, ctr.ICRCErrors.Load},
		{"loss, sent only", Impairment{Loss: 1, Dir: DirOut}, 1, func() uint64 { return 1 }},
		{"loss of another QP", Impairment{Loss: 1, QPN: 0x12}, 1, func() uint64 { return 1 }},
	} {
		if err := h.st.SetImpairment(&tc.im); err != nil {
			t.Fatal(err)
		}
		h.inject(frame)
		if n := count(); n != tc.want || tc.ctr() == 0 {
			t.Errorf("%s: %d delivered, counter %d; want %d and counted", tc.name, n, tc.ctr(), tc.want)
		}
	}
	_ = h.st.SetImpairment(nil)
}

func TestImpairmentValidate(t *testing.T) {
	for _, im := range []Impairment{{Loss: 1.5}, {Dup: -0.1}, {Delay: -1}, {Delay: MaxImpairDelay + 1},
		{Dir: DirIn, Delay: time.Millisecond}, {Dir: DirIn, Reorder: 0.1}, {Dir: 7}} {
		if err := im.Validate(); err == nil {
			t.Errorf("%+v accepted", im)
		}
	}
	for _, im := range []Impairment{{}, {Loss: 1, Dup: 1, Reorder: 1, Corrupt: 1, Delay: MaxImpairDelay}, {Dir: DirIn, Loss: 0.5}} {
		if err := im.Validate(); err != nil {
			t.Errorf("%+v: %v", im, err)
		}
	}
}

// Every frame the impairment corrupts fails its ICRC at the receiver, in
// either family: the flipped bit is never one the ICRC masks (the BTH's
// reserved byte, TTL, traffic class), so an impaired port never delivers
// a corrupted packet as good (TestImpairReceived once saw one in fifty).
func TestCorruptionAlwaysFailsTheICRC(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		f := rocetest.BuildFrame(&rocetest.FrameSpec{V6: v6, Packet: wire.PacketFields{
			BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: 7}, Payload: make([]byte, 32)}})
		ip := f[header.EthernetHeaderLen:]
		if err := wire.VerifyICRC(ip); err != nil {
			t.Fatal(err)
		}
		for range 2000 {
			g := append([]byte(nil), f...)
			corruptFrame(g)
			if wire.VerifyICRC(g[header.EthernetHeaderLen:]) == nil {
				t.Fatalf("v6 %v: a corrupted frame passes its ICRC:\n% x\n% x", v6, f, g)
			}
		}
	}
}
