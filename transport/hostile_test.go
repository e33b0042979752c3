package transport_test

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/header"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/mem"
	tt "github.com/vrnic/vrnicd/transport/transporttest"
	"github.com/vrnic/vrnicd/transport/wire"
)

// hostile is an RC QP under attack: a peer that sends anything at all with
// a valid ICRC, from the QP's own path (the checks of nic's ingress passed).
// The QP has a SEND, a WRITE, a READ and two atomics outstanding to that
// peer and receives posted, so every requester, completer and responder
// branch is reachable.
type hostile struct {
	net      *tt.Net
	a, b     *tt.Endpoint // a: the forged peer's identity; b: the QP under test
	mr       []byte       // b's remote-accessible MR, with guard bytes around it
	res      []byte       // b's READ/atomic landing area, with guard bytes
	mrKey    uint32
	posted   map[uint64]bool // WR IDs b posted (send and receive)
	ePSN     uint32          // the first PSN b expects from the peer
	sqPSN    uint32          // b's first request PSN
	sent     int             // frames b put on the wire (dropped)
	lastSent []byte
}

const (
	hostileMRVA  = 0x20000
	hostileResVA = 0x40000
	guard        = 4096
	guardByte    = 0xA5
)

func newHostile(t testing.TB) *hostile {
	h := &hostile{net: tt.NewNet(7), posted: map[uint64]bool{}, ePSN: 0xfffff8, sqPSN: 0x100}
	a, b, err := tt.Connect(h.net.AddNode(), h.net.AddNode(), tt.Options{PSN: [2]uint32{h.ePSN, h.sqPSN}})
	if err != nil {
		t.Fatal(err)
	}
	h.a, h.b = a, b
	// Everything b sends goes nowhere: the peer is the fuzzer.
	h.net.Faults.Drop = func(f *tt.Frame) bool {
		h.sent++
		h.lastSent = append(h.lastSent[:0], f.IP...)
		return true
	}
	reg := func(va uint64, n int) ([]byte, uint32) {
		whole := bytes.Repeat([]byte{guardByte}, guard+n+guard)
		key, err := b.Node.Mem.RegMR(b.PD, mem.NewSliceBacking(whole[guard:guard+n]), 0, uint64(n), va, rw|mem.FlushGlobal)
		if err != nil {
			t.Fatal(err)
		}
		return whole, key
	}
	var resKey uint32
	h.mr, h.mrKey = reg(hostileMRVA, 8192)
	h.res, resKey = reg(hostileResVA, 4096)
	sge := func(va uint64, lkey uint32, n uint32) []transport.SGE {
		return []transport.SGE{{Addr: va, Length: n, LKey: lkey}}
	}
	for i := range 4 {
		id := uint64(100 + i)
		h.posted[id] = true
		if err := b.QP.PostRecv(&transport.RecvWR{ID: id, SGL: sge(hostileMRVA+uint64(i)*2048, h.mrKey, 2048)}); err != nil {
			t.Fatal(err)
		}
	}
	// The peer's memory is imaginary: b's requests are never executed.
	wrs := []transport.SendWR{
		{ID: 1, Opcode: transport.WRSend, SGL: sge(hostileMRVA, h.mrKey, 3000)},
		{ID: 2, Opcode: transport.WRRDMAWrite, SGL: sge(hostileMRVA, h.mrKey, 2048), RemoteAddr: 0x9000, RKey: 0x1234},
		{ID: 3, Opcode: transport.WRRDMARead, SGL: sge(hostileResVA, resKey, 2048), RemoteAddr: 0x9000, RKey: 0x1234},
		{ID: 4, Opcode: transport.WRAtomicFetchAdd, SGL: sge(hostileResVA+2048, resKey, 8), RemoteAddr: 0x9000, RKey: 0x1234, CompareAdd: 1},
		{ID: 5, Opcode: transport.WRAtomicCmpAndSwp, SGL: sge(hostileResVA+2056, resKey, 8), RemoteAddr: 0x9008, RKey: 0x1234, Swap: 2},
		{ID: 6, Opcode: transport.WRSendWithImm, SGL: sge(hostileMRVA, h.mrKey, 16), ImmData: 9},
	}
	for i := range wrs {
		wrs[i].Flags = transport.SendSignaled
		h.posted[wrs[i].ID] = true
		if err := b.QP.PostSend(&wrs[i]); err != nil {
			t.Fatal(err)
		}
	}
	h.run(t)
	return h
}

// run lets b's owners work until they are idle; an owner that never idles
// on its own is a hang.
func (h *hostile) run(t testing.TB) {
	q := h.b.QP
	for range 64 {
		busy := false
		for n := 0; q.RunRecv(); n++ {
			if n > 1<<12 {
				t.Fatal("the receive owner never runs out of work")
			}
			busy = true
		}
		sent := h.sent
		q.RunSend()
		if !busy && h.sent == sent {
			return
		}
	}
	t.Fatal("the QP's owners keep each other busy without input")
}

// inject forges one packet from the fuzz bytes and hands it to b. It returns
// the bytes it did not use. Layout: opcode, PSN offset (signed, from the PSN
// the packet's direction starts at), flags, header+payload length, extra
// payload (in 8-byte units), then the header and payload bytes.
func (h *hostile) inject(t testing.TB, in []byte) []byte {
	if len(in) < 5 {
		return nil
	}
	op, dpsn, flags, n, extra := in[0], int8(in[1]), in[2], int(in[3]), int(in[4])*8
	in = in[5:]
	n = min(n, len(in))
	body, rest := in[:n], in[n:]

	opc := wire.Opcode(op & 0x1f) // RC: ingress drops other transports
	info := opc.Info()
	if info == nil {
		return rest
	}
	tp := make([]byte, wire.BTHLen+len(body)+extra+wire.ICRCLen)
	copy(tp[wire.BTHLen:], body)
	for i := wire.BTHLen + len(body); i < len(tp)-wire.ICRCLen; i++ {
		tp[i] = byte(i)
	}
	psn := h.ePSN
	if info.Flags&wire.FlagRequest == 0 {
		psn = h.sqPSN
	}
	bth := wire.BTH(tp)
	bth.Encode(&wire.BTHFields{Opcode: opc, SE: flags&1 != 0, AckReq: flags&2 != 0, PadCnt: flags >> 2 & 3,
		PKey: wire.DefaultPKey, DestQP: h.b.QP.QPN(), PSN: uint32(wire.PSN(psn).Add(uint32(int32(dpsn))))})
	// Bit 4 aims the RETH or AtomicETH at b's MR (VA near it, its rkey), so
	// the fuzzer reaches data placement and the access checks past the key.
	if flags&0x10 != 0 && len(tp) >= info.HdrLen {
		if off := info.Offset[wire.HdrRETH]; off != 0 {
			r := wire.RETH(tp[off:])
			r.SetRKey(h.mrKey)
			r.SetVA(hostileMRVA - 64 + r.VA()%(8192+128))
		}
		if off := info.Offset[wire.HdrAtomicETH]; off != 0 {
			a := wire.AtomicETH(tp[off:])
			a.SetRKey(h.mrKey)
			a.SetVA(hostileMRVA - 64 + a.VA()%(8192+128))
		}
	}
	var rx transport.RxPacket
	if rx.Packet.Parse(tp) != nil {
		return rest // ingress drops what does not parse
	}
	rx.SrcGID, rx.DstGID = h.a.Node.GID, h.b.Node.GID
	rx.IPHeader = make([]byte, header.IPv4HeaderLen)
	rx.IPHeader[0] = 0x45
	rx.SrcPort = 0xc000
	if rx.Op.Flags&wire.FlagRequest != 0 {
		h.b.QP.HandleRequest(&rx)
	} else {
		h.b.QP.HandleResponse(&rx)
	}
	if flags&0x20 != 0 { // let timers (retransmit, RNR) fire
		h.net.Clock.Advance(time.Duration(flags>>6+1) * 40 * time.Millisecond)
	}
	h.run(t)
	return rest
}

// check asserts what no peer may cause: writes outside registered memory or
// outside a READ's or atomic's SGE, completions of WRs never posted or
// completed twice, and packets the engine could not have built.
func (h *hostile) check(t testing.TB) {
	for _, area := range []struct {
		name  string
		whole []byte
	}{{"MR", h.mr}, {"READ/atomic buffer", h.res}} {
		n := len(area.whole) - 2*guard
		for i, c := range area.whole {
			if (i < guard || i >= guard+n) && c != guardByte {
				t.Fatalf("%s: byte %d outside the registered region was written", area.name, i-guard)
			}
		}
	}
	// The READ landed in [0, 2048), the atomics in [2048, 2064): the rest of
	// the buffer, registered as it is, is no response's to write.
	for i := guard + 2064; i < guard+4096; i++ {
		if h.res[i] != guardByte {
			t.Fatalf("READ/atomic buffer: byte %d past every SGE was written", i-guard)
		}
	}
	done := map[uint64]bool{}
	for _, cq := range []*transport.MemCQ{h.b.SendCQ, h.b.RecvCQ} {
		for _, wc := range tt.Poll(cq) {
			if !h.posted[wc.WRID] {
				t.Fatalf("completion of WR %d, never posted: %+v", wc.WRID, wc)
			}
			if done[wc.WRID] {
				t.Fatalf("WR %d completed twice: %+v", wc.WRID, wc)
			}
			done[wc.WRID] = true
		}
	}
	if h.lastSent != nil {
		if err := wire.VerifyICRC(h.lastSent); err != nil {
			t.Fatalf("the QP sent a frame with a bad ICRC: %v", err)
		}
		var p wire.Packet
		if err := p.Parse(h.lastSent[header.IPv4HeaderLen+header.UDPHeaderLen:]); err != nil {
			t.Fatalf("the QP sent a packet that does not parse: %v", err)
		}
	}
}

// FuzzHostilePeer feeds an RC QP in RTS sequences of forged requests and
// responses (see hostile.inject) and checks that it never panics, hangs,
// writes where no peer may write, or completes a WR it was not given or
// twice; whatever the peer does, the QP answers with NAKs or goes to ERR.
func FuzzHostilePeer(f *testing.F) {
	req := func(op wire.Opcode, dpsn int8, flags byte, hdr []byte, extra8 byte) []byte {
		return append([]byte{byte(op), byte(dpsn), flags, byte(len(hdr)), extra8}, hdr...)
	}
	reth := func(va uint64, n uint32) []byte {
		b := make([]byte, 16)
		binary.BigEndian.PutUint64(b, va)
		binary.BigEndian.PutUint32(b[12:], n)
		return b
	}
	aeth := func(syn byte, msn uint32) []byte {
		return []byte{syn, byte(msn >> 16), byte(msn >> 8), byte(msn)}
	}
	f.Add(req(wire.RCSendOnly, 0, 2, []byte("hello"), 0))
	f.Add(append(req(wire.RCSendFirst, 0, 0, nil, 128), req(wire.RCSendLast, 1, 2, nil, 4)...))
	f.Add(req(wire.RCRDMAWriteOnly, 0, 0x12, reth(0x100, 64), 8))
	f.Add(req(wire.RCRDMAWriteFirst, 0, 0x10, reth(0x1f00, 4096), 128))
	f.Add(req(wire.RCRDMAReadRequest, 0, 0x12, reth(0x10, 4000), 0))
	f.Add(req(wire.RCCompareSwap, 0, 0x12, make([]byte, 28), 0))
	f.Add(req(wire.RCAcknowledge, 0, 0, aeth(0, 1), 0))
	f.Add(req(wire.RCAcknowledge, 100, 0, aeth(0, 6), 0))
	f.Add(req(wire.RCAcknowledge, 2, 0, aeth(0x60, 0), 0))
	f.Add(req(wire.RCAcknowledge, 2, 0x20, aeth(0x2c, 0), 0))
	f.Add(append(req(wire.RCRDMAReadResponseFirst, 5, 0, aeth(0, 3), 128),
		req(wire.RCRDMAReadResponseLast, 6, 0, aeth(0, 3), 128)...))
	f.Add(req(wire.RCAtomicAcknowledge, 7, 0, append(aeth(0, 4), 1, 2, 3, 4, 5, 6, 7, 8), 0))
	f.Fuzz(func(t *testing.T, in []byte) {
		h := newHostile(t)
		for k := 0; len(in) > 0 && k < 64; k++ {
			in = h.inject(t, in)
		}
		// Every timer the peer set off runs out, then nothing may be left.
		h.net.Clock.Advance(10 * time.Second)
		h.run(t)
		h.check(t)
	})
}
