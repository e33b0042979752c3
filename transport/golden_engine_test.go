package transport_test

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/mem"
	tt "github.com/vrnic/vrnicd/transport/transporttest"
	"github.com/vrnic/vrnicd/transport/wire"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/rocetest"
)

// capPkt is one RoCEv2 packet of a kernel capture.
type capPkt struct {
	frame int
	src   [4]byte
	sport uint16
	roce  []byte
	p     wire.Packet
}

func readCapture(t *testing.T, name string) []capPkt {
	t.Helper()
	dir, err := rocetest.Dir()
	if err != nil {
		t.Fatal(err)
	}
	frames, err := rocetest.ReadFrames(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	var out []capPkt
	for _, f := range frames {
		d := f.Data
		if len(d) < 14+20+8 || binary.BigEndian.Uint16(d[12:]) != 0x0800 || d[23] != 17 {
			continue
		}
		ip := d[14:]
		ip = ip[:binary.BigEndian.Uint16(ip[2:])]
		udp := ip[20:]
		if binary.BigEndian.Uint16(udp[2:]) != wire.RoCEv2Port {
			continue
		}
		c := capPkt{frame: f.N, sport: binary.BigEndian.Uint16(udp[0:]), roce: udp[8:]}
		copy(c.src[:], ip[12:16])
		if err := c.p.Parse(c.roce); err != nil {
			t.Fatalf("%s frame %d: %v", name, f.N, err)
		}
		out = append(out, c)
	}
	return out
}

// message is one request message of the capture (START through END).
type message struct {
	from    [4]byte
	pkts    []capPkt
	payload []byte
}

func messages(pkts []capPkt) []message {
	var out []message
	open := map[[4]byte]int{}
	for _, c := range pkts {
		if c.p.Op.Flags&wire.FlagRequest == 0 {
			continue
		}
		i, ok := open[c.src]
		if !ok || c.p.Op.Has(wire.FlagStart) {
			out = append(out, message{from: c.src})
			i = len(out) - 1
			open[c.src] = i
		}
		out[i].pkts = append(out[i].pkts, c)
		out[i].payload = append(out[i].payload, c.p.Payload...)
		if c.p.Op.Has(wire.FlagEnd) {
			delete(open, c.src)
		}
	}
	return out
}

// TestEngineMatchesKernelCaptures replays the request messages of each
// kernel rxe capture through two engines set up with the capture's QPNs and
// PSNs, and checks that every packet either side sends carries the fields
// the kernel's did: opcode sequence, SE, AckReq, PadCnt, P_Key, DestQP, PSN,
// payload, RETH/AtomicETH (the rkey stands in for ours), AETH syndrome and
// MSN, atomic original value, DETH, and the UDP source port.
func TestEngineMatchesKernelCaptures(t *testing.T) {
	for _, tc := range []struct {
		file string
		typ  transport.QPType
	}{
		{"rc_send.pcap", transport.QPTypeRC},
		{"rc_send_only.pcap", transport.QPTypeRC},
		{"send_bw.pcap", transport.QPTypeRC},
		{"rdma_write.pcap", transport.QPTypeRC},
		{"rdma_write_lat.pcap", transport.QPTypeRC},
		{"rdma_read.pcap", transport.QPTypeRC},
		{"atomic_cmp_swap.pcap", transport.QPTypeRC},
		{"atomic_fetch_add.pcap", transport.QPTypeRC},
		{"uc_send.pcap", transport.QPTypeUC},
		{"ud_send.pcap", transport.QPTypeUD},
	} {
		t.Run(tc.file, func(t *testing.T) { replayCapture(t, tc.file, tc.typ) })
	}
}

func replayCapture(t *testing.T, file string, typ transport.QPType) {
	pkts := readCapture(t, file)
	msgs := messages(pkts)
	if len(msgs) == 0 {
		t.Fatal("no request messages")
	}
	// The client sends the first message; a and b are client and server.
	client := msgs[0].from
	var server [4]byte
	for _, c := range pkts {
		if c.src != client {
			server = c.src
			break
		}
	}
	firstPSN := func(from [4]byte) uint32 {
		for _, m := range msgs {
			if m.from == from {
				return m.pkts[0].p.BTH.PSN()
			}
		}
		return 0
	}
	qpnOf := func(to [4]byte) uint32 { // the BTH DestQP of packets sent to "to"
		for _, c := range pkts {
			if c.src != to {
				return c.p.BTH.DestQP()
			}
		}
		return 0
	}
	opts := tt.Options{Type: typ, QPN: [2]uint32{qpnOf(client), qpnOf(server)},
		PSN: [2]uint32{firstPSN(client), firstPSN(server)}, Access: mem.LocalWrite | mem.RemoteWrite | mem.RemoteRead | mem.RemoteAtomic}
	if typ == transport.QPTypeUD {
		// UD QPs address each other by AH; both pingpong sides use their own QPN.
		opts.QPN = [2]uint32{pkts[1].p.BTH.DestQP(), pkts[0].p.BTH.DestQP()}
	}
	n := tt.NewNet(1)
	a, b, err := tt.Connect(n.AddNode(), n.AddNode(), opts)
	if err != nil {
		t.Fatal(err)
	}
	side := map[[4]byte]*tt.Endpoint{client: a, server: b}
	peer := map[[4]byte]*tt.Endpoint{client: b, server: a}
	// What each side sent, as the engine built it.
	sent := map[*tt.Node][]capPkt{}
	n.Tap = func(f *tt.Frame) {
		c := capPkt{roce: append([]byte(nil), f.IP[28:]...), sport: binary.BigEndian.Uint16(f.IP[20:])}
		if err := c.p.Parse(c.roce); err != nil {
			t.Fatal(err)
		}
		sent[f.From] = append(sent[f.From], c)
	}
	// Memory: each side's source buffer holds its messages' payloads; the
	// targets of RDMA sit at the captured VAs and READ sources hold the
	// bytes the kernel read; atomics start from the first original value.
	rkeys := map[uint32]uint32{} // captured rkey → ours
	regAt := func(ep *tt.Endpoint, va uint64, n int, init []byte) *tt.Buffer {
		buf, err := ep.RegBuffer(max(n, 8), va, rw)
		if err != nil {
			t.Fatal(err)
		}
		copy(buf.Bytes, init)
		return buf
	}
	type target struct {
		lo, hi uint64
		rkey   uint32
		init   []byte
	}
	targets := map[[4]byte][]*target{} // by owner
	for _, m := range msgs {
		p := m.pkts[0].p
		var va uint64
		var l int
		var rkey uint32
		switch {
		case p.RETH != nil:
			va, l, rkey = p.RETH.VA(), int(p.RETH.Length()), p.RETH.RKey()
		case p.AtomicETH != nil:
			va, l, rkey = p.AtomicETH.VA(), 8, p.AtomicETH.RKey()
		default:
			continue
		}
		owner := server
		if m.from == server {
			owner = client
		}
		found := false
		for _, tg := range targets[owner] {
			if tg.rkey == rkey {
				tg.lo, tg.hi = min(tg.lo, va), max(tg.hi, va+uint64(l))
				found = true
			}
		}
		if !found {
			targets[owner] = append(targets[owner], &target{lo: va, hi: va + uint64(l), rkey: rkey})
		}
	}
	// READ sources: the response payloads, placed at their VAs.
	readData := map[uint64][]byte{}
	{
		var cur []byte
		for _, c := range pkts {
			if c.p.Op.Flags&wire.FlagResponse != 0 && c.p.Op.Has(wire.FlagPayload) {
				cur = append(cur, c.p.Payload...)
			}
			if c.p.Op.Name == "RC_RDMA_READ_RESPONSE_LAST" || c.p.Op.Name == "RC_RDMA_READ_RESPONSE_ONLY" {
				readData[uint64(len(readData))] = cur
				cur = nil
			}
		}
	}
	var firstOrig uint64
	for _, c := range pkts {
		if c.p.AtomicAckETH != nil {
			firstOrig = c.p.AtomicAckETH.Orig()
			break
		}
	}
	for owner, tgs := range targets {
		for _, tg := range tgs {
			init := make([]byte, tg.hi-tg.lo)
			binary.LittleEndian.PutUint64(init[:min(8, len(init))], firstOrig)
			buf := regAt(side[owner], tg.lo, int(tg.hi-tg.lo), nil)
			copy(buf.Bytes, init)
			rkeys[tg.rkey] = buf.RKey
			tg.init = buf.Bytes
		}
	}
	// Each atomic's target word holds, before the first atomic on it, the
	// original value the kernel returned.
	seenVA := map[uint64]bool{}
	for _, m := range msgs {
		a := m.pkts[0].p.AtomicETH
		if a == nil || seenVA[a.VA()] {
			continue
		}
		seenVA[a.VA()] = true
		for _, c := range pkts {
			if c.p.AtomicAckETH != nil && c.p.BTH.PSN() == m.pkts[0].p.BTH.PSN() {
				for _, tg := range targets[server] {
					if tg.rkey == a.RKey() {
						binary.LittleEndian.PutUint64(tg.init[a.VA()-tg.lo:], c.p.AtomicAckETH.Orig())
					}
				}
			}
		}
	}
	readIdx := 0
	for _, m := range msgs {
		p := m.pkts[0].p
		if p.BTH.Opcode() == wire.RCRDMAReadRequest {
			tgs := targets[server]
			if m.from == server {
				tgs = targets[client]
			}
			for _, tg := range tgs {
				if tg.rkey == p.RETH.RKey() {
					copy(tg.init[p.RETH.VA()-tg.lo:], readData[uint64(readIdx)])
				}
			}
			readIdx++
		}
	}
	// Post: receives first, then every message in capture order on its side.
	srcs := map[[4]byte]*tt.Buffer{}
	for from, ep := range side {
		srcs[from] = regAt(ep, 0x7000_0000, 1<<16, nil)
		rbuf := regAt(ep, 0x7100_0000, 1<<16, nil)
		for i := range 16 {
			if err := ep.PostRecv(&transport.RecvWR{ID: uint64(i), SGL: []transport.SGE{rbuf.SGE(i*4096, 4096)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	off := map[[4]byte]int{}
	posted := map[*tt.Endpoint]int{}
	for _, m := range msgs {
		ep := side[m.from]
		p := m.pkts[0].p
		src := srcs[m.from]
		o := off[m.from]
		copy(src.Bytes[o:], m.payload)
		off[m.from] += len(m.payload) + 64
		wr := transport.SendWR{ID: uint64(m.pkts[0].frame), Flags: transport.SendSignaled, SGL: []transport.SGE{src.SGE(o, len(m.payload))}}
		last := m.pkts[len(m.pkts)-1].p
		wr.Flags |= map[bool]transport.SendFlags{true: transport.SendSolicited}[last.BTH.SE()]
		switch {
		case p.Op.Has(wire.FlagSend):
			wr.Opcode = transport.WRSend
			if last.ImmDt != nil {
				wr.Opcode, wr.ImmData = transport.WRSendWithImm, last.ImmDt.Imm()
			}
			if typ == transport.QPTypeUD {
				av := ep.Node.AV(peer[m.from].Node)
				wr.AH, wr.RemoteQPN, wr.RemoteQKey = &av, p.BTH.DestQP(), p.DETH.QKey()
			}
		case p.Op.Has(wire.FlagWrite):
			wr.Opcode, wr.RemoteAddr, wr.RKey = transport.WRRDMAWrite, p.RETH.VA(), rkeys[p.RETH.RKey()]
			if last.ImmDt != nil {
				wr.Opcode, wr.ImmData = transport.WRRDMAWriteWithImm, last.ImmDt.Imm()
			}
		case p.Op.Has(wire.FlagRead):
			wr.Opcode, wr.RemoteAddr, wr.RKey = transport.WRRDMARead, p.RETH.VA(), rkeys[p.RETH.RKey()]
			wr.SGL = []transport.SGE{src.SGE(o, int(p.RETH.Length()))}
			off[m.from] += int(p.RETH.Length())
		case p.Op.Has(wire.FlagAtomic):
			a := p.AtomicETH
			wr.RemoteAddr, wr.RKey = a.VA(), rkeys[a.RKey()]
			wr.SGL = []transport.SGE{src.SGE(o, 8)}
			off[m.from] += 8
			if p.BTH.Opcode() == wire.RCCompareSwap {
				wr.Opcode, wr.Swap, wr.CompareAdd = transport.WRAtomicCmpAndSwp, a.SwapAdd(), a.Compare()
			} else {
				wr.Opcode, wr.CompareAdd = transport.WRAtomicFetchAdd, a.SwapAdd()
			}
		}
		if err := ep.PostSend(&wr); err != nil {
			t.Fatalf("frame %d: %v", m.pkts[0].frame, err)
		}
		posted[ep]++
	}
	if err := n.Run(func() bool {
		for ep, k := range posted {
			if ep.SendCQ.Len() < k {
				return false
			}
		}
		return n.InFlight() == 0
	}, 1_000_000); err != nil {
		t.Fatal(err)
	}
	for ep := range posted {
		for _, wc := range tt.Poll(ep.SendCQ) {
			if wc.Status != transport.WCSuccess {
				t.Fatalf("WR from frame %d: %v", wc.WRID, wc.Status)
			}
		}
	}
	// Compare, direction by direction, requests and responses apart (how
	// the two interleave on one side is a matter of timing).
	split := func(cs []capPkt, req bool) []capPkt {
		var out []capPkt
		for _, c := range cs {
			if (c.p.Op.Flags&wire.FlagRequest != 0) == req {
				out = append(out, c)
			}
		}
		return out
	}
	for from, ep := range side {
		var mine []capPkt
		for _, c := range pkts {
			if c.src == from {
				mine = append(mine, c)
			}
		}
		for _, req := range []bool{true, false} {
			want, got := split(mine, req), split(sent[ep.Node], req)
			if len(got) != len(want) {
				t.Errorf("side %v sent %d %s, the kernel %d", from, len(got), kind(req), len(want))
			}
			for i := range min(len(got), len(want)) {
				if d := diffPkt(&got[i], &want[i], rkeys, typ); d != "" {
					t.Errorf("side %v %s %d (kernel frame %d, %s): %s", from, kind(req), i, want[i].frame, want[i].p.Op.Name, d)
				}
			}
		}
	}
}

func kind(req bool) string {
	if req {
		return "requests"
	}
	return "responses"
}

func diffPkt(g, w *capPkt, rkeys map[uint32]uint32, typ transport.QPType) string {
	gp, wp := &g.p, &w.p
	var d []string
	cmp := func(name string, a, b any) {
		if a != b {
			d = append(d, fmt.Sprintf("%s %v, kernel %v", name, a, b))
		}
	}
	gb, wb := gp.BTH.Fields(), wp.BTH.Fields()
	if typ == transport.QPTypeUD {
		// Linux 6.1 still set AckReq on UD; upstream dropped it in 2024
		// ("RDMA/rxe: Don't set BTH_ACK_MASK for UC or UD QPs"), as we do.
		wb.AckReq = false
	}
	cmp("BTH", gb, wb)
	cmp("UDP source port", g.sport, w.sport)
	if !slices.Equal(gp.Payload, wp.Payload) {
		d = append(d, fmt.Sprintf("payload of %d bytes differs from the kernel's %d", len(gp.Payload), len(wp.Payload)))
	}
	if gp.Op != wp.Op {
		return fmt.Sprintf("opcode %s, kernel %s", gp.Op.Name, wp.Op.Name)
	}
	if wp.RETH != nil {
		f := wp.RETH.Fields()
		f.RKey = rkeys[f.RKey]
		cmp("RETH", gp.RETH.Fields(), f)
	}
	if wp.AtomicETH != nil {
		f := wp.AtomicETH.Fields()
		f.RKey = rkeys[f.RKey]
		cmp("AtomicETH", gp.AtomicETH.Fields(), f)
	}
	if wp.AETH != nil {
		cmp("AETH", gp.AETH.Fields(), wp.AETH.Fields())
	}
	if wp.AtomicAckETH != nil {
		cmp("AtomicAckETH", gp.AtomicAckETH.Orig(), wp.AtomicAckETH.Orig())
	}
	if wp.DETH != nil {
		cmp("DETH", gp.DETH.Fields(), wp.DETH.Fields())
	}
	if wp.ImmDt != nil {
		cmp("ImmDt", gp.ImmDt.Imm(), wp.ImmDt.Imm())
	}
	if len(d) == 0 {
		return ""
	}
	return fmt.Sprint(d)
}
