package cm

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/transport/transporttest"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
)

// prog reads a fuzz input as a program, byte by byte; past its end every
// read is zero, so any input is a whole program.
type prog struct{ b []byte }

func (p *prog) byte() byte {
	if len(p.b) == 0 {
		return 0
	}
	c := p.b[0]
	p.b = p.b[1:]
	return c
}

func (p *prog) bytes(n int) []byte {
	out := make([]byte, n)
	k := copy(out, p.b)
	p.b = p.b[k:]
	return out
}

func (p *prog) u32() uint32 { return binary.BigEndian.Uint32(p.bytes(4)) }

var fuzzAttrs = []uint16{
	mad.AttrConnectRequest, mad.AttrMsgRcptAck, mad.AttrConnectReject, mad.AttrConnectReply, mad.AttrReadyToUse,
	mad.AttrDisconnectRequest, mad.AttrDisconnectReply, mad.AttrServiceIDResReq, mad.AttrServiceIDResReqResp,
}

// fuzzWorld is two small Tables, the MADs in flight between them, and a
// third party whose MADs the fuzzer writes.
type fuzzWorld struct {
	clock *transporttest.ManualClock
	tabs  [2]*Table
	ips   [3]netip.Addr
	queue []simPacket
	seen  []EventKind
}

func newFuzzWorld() *fuzzWorld {
	w := &fuzzWorld{clock: transporttest.NewManualClock(),
		ips: [3]netip.Addr{activeIP, passiveIP, netip.MustParseAddr("203.0.113.5")}}
	for i := range w.tabs {
		w.tabs[i] = NewTable(Config{LocalCAGUID: uint64(i + 1), MaxConns: 16, MaxHalfOpen: 4, MaxCMRetries: 3}, w.clock)
		_, _ = w.tabs[i].Listen(ServiceID(PortSpaceTCP, 7174), netip.Addr{})
		_, _ = w.tabs[i].Listen(ServiceID(PortSpaceUDP, 7174), netip.Addr{})
	}
	return w
}

// anyConn picks a connection of table i by a program byte, or 0.
func (w *fuzzWorld) anyConn(i int, sel byte) uint32 {
	tb := w.tabs[i]
	if len(tb.conns) == 0 {
		return sel2id(sel)
	}
	n := int(sel) % len(tb.conns)
	for id := range tb.conns {
		if n == 0 {
			return id
		}
		n--
	}
	return 0
}

func sel2id(sel byte) uint32 { return uint32(sel) }

// craft makes a CM MAD from the program that often names a connection of
// table i, so the handlers past the lookups run.
func (w *fuzzWorld) craft(p *prog, i int) [mad.Size]byte {
	attr := fuzzAttrs[int(p.byte())%len(fuzzAttrs)]
	msg, _ := mad.DecodeCM(attr, p.bytes(mad.CMDataLen))
	flags := p.byte()
	id := w.anyConn(i, p.byte())
	var remote uint32
	if c := w.tabs[i].conns[id]; c != nil {
		remote = c.RemoteID
	}
	if flags&1 != 0 {
		switch m := msg.(type) {
		case *mad.REP:
			m.RemoteCommID, m.LocalCommID = id, remote
		case *mad.RTU:
			m.RemoteCommID, m.LocalCommID = id, remote
		case *mad.MRA:
			m.RemoteCommID, m.LocalCommID = id, remote
			m.MessageMRAed %= 3
		case *mad.REJ:
			m.RemoteCommID, m.LocalCommID = id, remote
		case *mad.DREQ:
			m.RemoteCommID, m.LocalCommID = id, remote
		case *mad.DREP:
			m.RemoteCommID, m.LocalCommID = id, remote
		case *mad.SIDRREP:
			m.RequestID = id
		}
	}
	if flags&2 != 0 {
		src := netip.AddrPortFrom(w.ips[2], 1)
		dst := netip.AddrPortFrom(w.ips[i], 7174)
		switch m := msg.(type) {
		case *mad.REQ:
			m.ServiceID = ServiceID(PortSpaceTCP, 7174)
			m.PathMTU = 1 + m.PathMTU%5
			m.TransportServiceType %= 2
			_ = cmaPrivate(m.PrivateData[:], src, dst, nil)
		case *mad.SIDRREQ:
			m.ServiceID = ServiceID(PortSpaceUDP, 7174)
			_ = cmaPrivate(m.PrivateData[:], src, dst, nil)
		}
	}
	var b [mad.Size]byte
	h := mad.CMHeader(uint64(p.u32()), 0)
	if flags&4 != 0 {
		h.Method = p.byte()
	}
	_, _ = mad.EncodeCM(b[:], h, msg)
	return b
}

// act runs one consumer call on table i.
func (w *fuzzWorld) act(p *prog, i int, out *Output) {
	tb := w.tabs[i]
	id := w.anyConn(i, p.byte())
	priv := p.bytes(int(p.byte()) % 250)
	switch p.byte() % 8 {
	case 0:
		_ = tb.Accept(id, AcceptParams{QPN: p.u32(), PSN: p.u32(), RespRes: p.byte(), InitDepth: p.byte(), RNRRetry: p.byte(), PrivateData: priv}, out)
	case 1:
		_ = tb.Reject(id, uint16(p.byte()), p.bytes(int(p.byte())%80), priv, out)
	case 2:
		_ = tb.Disconnect(id, priv, out)
	case 3:
		_ = tb.SendMRA(id, p.byte(), priv, out)
	case 4:
		_ = tb.AnswerSIDR(id, SIDRAnswer{Status: p.byte(), QPN: p.u32(), QKey: p.u32()}, priv, out)
	case 5:
		cp := rpingConnect()
		cp.Src, cp.Dst = netip.AddrPortFrom(w.ips[i], uint16(p.byte())), netip.AddrPortFrom(w.ips[1-i], 7174)
		cp.QPN, cp.PSN, cp.PathMTU, cp.PrivateData = p.u32(), p.u32(), p.byte()%7, priv
		_, _ = tb.Connect(cp, out)
	case 6:
		_, _ = tb.ResolveSIDR(SIDRParams{Src: netip.AddrPortFrom(w.ips[i], 9), Dst: netip.AddrPortFrom(w.ips[1-i], 7174), PrivateData: priv}, out)
	case 7:
		if h, ok := tb.listens, len(tb.listens) > 0; ok {
			tb.Unlisten(h[0].handle)
		} else {
			_, _ = tb.Listen(ServiceID(PortSpaceTCP, uint16(p.byte())), netip.Addr{})
		}
	}
}

// handshakeProgram connects table 0 to table 1, disconnects, and lets
// timewait pass: a seed that takes the fuzzer through every common state.
func handshakeProgram() []byte {
	u32 := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
	// An op byte is op<<1 | table.
	op := func(code, table byte) byte { return code<<1 | table }
	var b []byte
	b = append(b, op(3, 0), 0, 0, 5, 9)                           // table 0: Connect from port 9
	b = append(append(append(b, u32(0x11)...), u32(0x100)...), 3) // QPN, PSN, MTU 1024
	b = append(b, op(4, 0), 1)                                    // deliver the REQ
	b = append(b, op(3, 1), 0, 0, 0)                              // table 1: Accept
	b = append(append(append(b, u32(0x22)...), u32(0x200)...), 1, 1, 7)
	b = append(b, op(4, 0), 1, op(4, 0), 1)       // REP, RTU
	b = append(b, op(3, 0), 0, 0, 2, op(4, 0), 1) // table 0: Disconnect; DREQ
	b = append(b, op(3, 1), 0, 0, 2, op(4, 0), 1) // table 1: Disconnect; DREP
	b = append(b, op(5, 0), 255, op(5, 1), 255)   // timewait passes on both
	return b
}

// runProgram runs a fuzz program against a fresh world, failing t when an
// invariant breaks.
func runProgram(t *testing.T, b []byte) *fuzzWorld {
	w := newFuzzWorld()
	p := &prog{b}
	var out Output
	for step := 0; len(p.b) > 0 && step < 500; step++ {
		i := int(p.b[0] & 1)
		switch p.byte() >> 1 % 6 {
		case 0: // a MAD from the third party
			m := w.craft(p, i)
			_ = w.tabs[i].Receive(w.ips[2], m[:], &out)
		case 1: // a MAD from the other table, forged
			m := w.craft(p, i)
			_ = w.tabs[i].Receive(w.ips[1-i], m[:], &out)
		case 2: // raw bytes
			_ = w.tabs[i].Receive(w.ips[p.byte()%3], p.bytes(int(p.byte())+int(p.byte())), &out)
		case 3:
			w.act(p, i, &out)
		case 4: // deliver or lose the next MAD in flight
			if len(w.queue) > 0 {
				q := w.queue[0]
				w.queue = w.queue[1:]
				if p.byte()%4 != 0 {
					_ = w.tabs[q.to].Receive(w.ips[1-q.to], q.mad[:], &out)
					i = q.to
				}
			}
		case 5: // time passes
			w.clock.Advance(time.Duration(p.byte()) * 100 * time.Millisecond)
			w.tabs[i].OnTimer(w.clock.Now(), &out)
		}
		for _, s := range out.Sends {
			if s.To == w.ips[1-i] && len(w.queue) < 64 {
				w.queue = append(w.queue, simPacket{1 - i, s.MAD})
			}
			if _, _, err := mad.Decode(s.MAD[:]); err != nil {
				t.Fatalf("sent an undecodable MAD: %v", err)
			}
		}
		if len(out.Sends) > 2*16+2 {
			t.Fatalf("one step sent %d MADs", len(out.Sends))
		}
		for _, ev := range out.Events {
			w.seen = append(w.seen, ev.Kind)
		}
		out.Reset()
		for j := range w.tabs {
			if err := checkInvariants(w.tabs[j]); err != nil {
				t.Fatalf("step %d table %d: %v", step, j, err)
			}
		}
	}
	return w
}

// The handshake seed does what it says, so the fuzzer starts from real
// connections, not only from garbage.
func TestFuzzSeedConnectsAndDisconnects(t *testing.T) {
	w := runProgram(t, handshakeProgram())
	want := []EventKind{EventConnectRequest, EventEstablished, EventEstablished, EventDisconnected,
		EventDisconnected, EventTimewaitExit, EventTimewaitExit}
	if !slices.Equal(w.seen, want) {
		t.Errorf("events %v, want %v", w.seen, want)
	}
}

// FuzzTable: any sequence of MADs, consumer calls and clock steps leaves
// both Tables consistent and within their limits, and nothing panics.
func FuzzTable(f *testing.F) {
	f.Add(handshakeProgram())
	f.Add([]byte{0, 0, 5, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0, 2, 2, 2, 2, 2, 3, 3, 3})
	f.Add([]byte{3, 0, 5, 5, 5, 5, 4, 4, 4, 4, 4, 4, 4, 2, 200, 2, 200, 2, 200})
	f.Add(make([]byte, 600))
	f.Fuzz(func(t *testing.T, b []byte) { runProgram(t, b) })
}
