package transport_test

import (
	"encoding/binary"
	"fmt"
	"net/netip"
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

// replayCapture replays a capture's messages through the engine and
// compares what each side sent with what the kernel did, in steps; the
// comparison runs as subtests, one per side and direction, so that a
// difference in one does not hide the others.
func replayCapture(t *testing.T, file string, typ transport.QPType) {
	r := newReplay(t, file, typ)
	r.placeMemory()
	r.postMessages()
	r.run()
	for _, from := range [][4]byte{r.client, r.server} {
		for _, req := range []bool{true, false} {
			t.Run(fmt.Sprintf("%v/%s", netip.AddrFrom4(from), kind(req)), func(t *testing.T) { r.compare(t, from, req) })
		}
	}
}

// replay is a capture replayed through the engine: the kernel's packets and
// request messages, the endpoints standing in for its client and server,
// their memory, and what the engine sent.
type replay struct {
	t              *testing.T
	typ            transport.QPType
	pkts           []capPkt
	msgs           []message
	client, server [4]byte
	n              *tt.Net
	side, peer     map[[4]byte]*tt.Endpoint
	sent           map[*tt.Node][]capPkt       // what each side sent, as the engine built it
	rkeys          map[uint32]uint32           // captured rkey → ours
	targets        map[[4]byte][]*replayTarget // RDMA and atomic targets, by owner
	posted         map[*tt.Endpoint]int
}

// replayTarget is the span of one captured rkey that the peer's RDMA and
// atomics touch, and the bytes registered for it.
type replayTarget struct {
	lo, hi uint64
	rkey   uint32
	init   []byte
}

// newReplay reads the capture and connects two QPs with its QPNs and first
// PSNs; the client sends the first message.
func newReplay(t *testing.T, file string, typ transport.QPType) *replay {
	r := &replay{t: t, typ: typ, pkts: readCapture(t, file)}
	r.msgs = messages(r.pkts)
	if len(r.msgs) == 0 {
		t.Fatal("no request messages")
	}
	r.client = r.msgs[0].from
	for _, c := range r.pkts {
		if c.src != r.client {
			r.server = c.src
			break
		}
	}
	opts := tt.Options{Type: typ, QPN: [2]uint32{r.qpnOf(r.client), r.qpnOf(r.server)},
		PSN: [2]uint32{r.firstPSN(r.client), r.firstPSN(r.server)}, Access: mem.LocalWrite | mem.RemoteWrite | mem.RemoteRead | mem.RemoteAtomic}
	if typ == transport.QPTypeUD {
		// UD QPs address each other by AH; both pingpong sides use their own QPN.
		opts.QPN = [2]uint32{r.pkts[1].p.BTH.DestQP(), r.pkts[0].p.BTH.DestQP()}
	}
	r.n = tt.NewNet(1)
	a, b, err := tt.Connect(r.n.AddNode(), r.n.AddNode(), opts)
	if err != nil {
		t.Fatal(err)
	}
	r.side = map[[4]byte]*tt.Endpoint{r.client: a, r.server: b}
	r.peer = map[[4]byte]*tt.Endpoint{r.client: b, r.server: a}
	r.sent = map[*tt.Node][]capPkt{}
	r.n.Tap = func(f *tt.Frame) {
		c := capPkt{roce: append([]byte(nil), f.IP[28:]...), sport: binary.BigEndian.Uint16(f.IP[20:])}
		if err := c.p.Parse(c.roce); err != nil {
			t.Fatal(err)
		}
		r.sent[f.From] = append(r.sent[f.From], c)
	}
	return r
}

// firstPSN is the PSN of the first message from.
func (r *replay) firstPSN(from [4]byte) uint32 {
	for _, m := range r.msgs {
		if m.from == from {
			return m.pkts[0].p.BTH.PSN()
		}
	}
	return 0
}

// qpnOf is the BTH DestQP of packets sent to "to".
func (r *replay) qpnOf(to [4]byte) uint32 {
	for _, c := range r.pkts {
		if c.src != to {
			return c.p.BTH.DestQP()
		}
	}
	return 0
}

func (r *replay) regAt(ep *tt.Endpoint, va uint64, n int) *tt.Buffer {
	buf, err := ep.RegBuffer(max(n, 8), va, rw)
	if err != nil {
		r.t.Fatal(err)
	}
	return buf
}

// placeMemory registers the targets of RDMA at the captured VAs: READ
// sources hold the bytes the kernel read, atomics' words the original
// values it returned.
func (r *replay) placeMemory() {
	r.findTargets()
	var firstOrig uint64
	for _, c := range r.pkts {
		if c.p.AtomicAckETH != nil {
			firstOrig = c.p.AtomicAckETH.Orig()
			break
		}
	}
	r.rkeys = map[uint32]uint32{}
	for owner, tgs := range r.targets {
		for _, tg := range tgs {
			init := make([]byte, tg.hi-tg.lo)
			binary.LittleEndian.PutUint64(init[:min(8, len(init))], firstOrig)
			buf := r.regAt(r.side[owner], tg.lo, int(tg.hi-tg.lo))
			copy(buf.Bytes, init)
			r.rkeys[tg.rkey] = buf.RKey
			tg.init = buf.Bytes
		}
	}
	r.placeAtomicOrigs()
	r.placeReadData()
}

// findTargets gathers, per captured rkey, the span the messages touch.
func (r *replay) findTargets() {
	r.targets = map[[4]byte][]*replayTarget{}
	for _, m := range r.msgs {
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
		owner := r.server
		if m.from == r.server {
			owner = r.client
		}
		found := false
		for _, tg := range r.targets[owner] {
			if tg.rkey == rkey {
				tg.lo, tg.hi = min(tg.lo, va), max(tg.hi, va+uint64(l))
				found = true
			}
		}
		if !found {
			r.targets[owner] = append(r.targets[owner], &replayTarget{lo: va, hi: va + uint64(l), rkey: rkey})
		}
	}
}

// placeAtomicOrigs makes each atomic's target word hold, before the first
// atomic on it, the original value the kernel returned.
func (r *replay) placeAtomicOrigs() {
	seenVA := map[uint64]bool{}
	for _, m := range r.msgs {
		a := m.pkts[0].p.AtomicETH
		if a == nil || seenVA[a.VA()] {
			continue
		}
		seenVA[a.VA()] = true
		for _, c := range r.pkts {
			if c.p.AtomicAckETH != nil && c.p.BTH.PSN() == m.pkts[0].p.BTH.PSN() {
				for _, tg := range r.targets[r.server] {
					if tg.rkey == a.RKey() {
						binary.LittleEndian.PutUint64(tg.init[a.VA()-tg.lo:], c.p.AtomicAckETH.Orig())
					}
				}
			}
		}
	}
}

// placeReadData puts each READ's response payload at the VA it was read
// from.
func (r *replay) placeReadData() {
	readData := map[uint64][]byte{}
	var cur []byte
	for _, c := range r.pkts {
		if c.p.Op.Flags&wire.FlagResponse != 0 && c.p.Op.Has(wire.FlagPayload) {
			cur = append(cur, c.p.Payload...)
		}
		if c.p.Op.Name == "RC_RDMA_READ_RESPONSE_LAST" || c.p.Op.Name == "RC_RDMA_READ_RESPONSE_ONLY" {
			readData[uint64(len(readData))] = cur
			cur = nil
		}
	}
	readIdx := 0
	for _, m := range r.msgs {
		p := m.pkts[0].p
		if p.BTH.Opcode() == wire.RCRDMAReadRequest {
			tgs := r.targets[r.server]
			if m.from == r.server {
				tgs = r.targets[r.client]
			}
			for _, tg := range tgs {
				if tg.rkey == p.RETH.RKey() {
					copy(tg.init[p.RETH.VA()-tg.lo:], readData[uint64(readIdx)])
				}
			}
			readIdx++
		}
	}
}

// postMessages posts receives first, then every message in capture order
// on its side, each from its own slice of the side's source buffer.
func (r *replay) postMessages() {
	srcs := map[[4]byte]*tt.Buffer{}
	for from, ep := range r.side {
		srcs[from] = r.regAt(ep, 0x7000_0000, 1<<16)
		rbuf := r.regAt(ep, 0x7100_0000, 1<<16)
		for i := range 16 {
			if err := ep.PostRecv(&transport.RecvWR{ID: uint64(i), SGL: []transport.SGE{rbuf.SGE(i*4096, 4096)}}); err != nil {
				r.t.Fatal(err)
			}
		}
	}
	off := map[[4]byte]int{}
	r.posted = map[*tt.Endpoint]int{}
	for _, m := range r.msgs {
		ep := r.side[m.from]
		src := srcs[m.from]
		o := off[m.from]
		copy(src.Bytes[o:], m.payload)
		off[m.from] += len(m.payload) + 64
		wr := r.sendWR(m, src, o, off)
		if err := ep.PostSend(&wr); err != nil {
			r.t.Fatalf("frame %d: %v", m.pkts[0].frame, err)
		}
		r.posted[ep]++
	}
}

// sendWR is the work request that makes message m, its payload at o in
// src; READs and atomics take room for their results past it (off).
func (r *replay) sendWR(m message, src *tt.Buffer, o int, off map[[4]byte]int) transport.SendWR {
	p := m.pkts[0].p
	wr := transport.SendWR{ID: uint64(m.pkts[0].frame), Flags: transport.SendSignaled, SGL: []transport.SGE{src.SGE(o, len(m.payload))}}
	last := m.pkts[len(m.pkts)-1].p
	wr.Flags |= map[bool]transport.SendFlags{true: transport.SendSolicited}[last.BTH.SE()]
	switch {
	case p.Op.Has(wire.FlagSend):
		wr.Opcode = transport.WRSend
		if last.ImmDt != nil {
			wr.Opcode, wr.ImmData = transport.WRSendWithImm, last.ImmDt.Imm()
		}
		if r.typ == transport.QPTypeUD {
			av := r.side[m.from].Node.AV(r.peer[m.from].Node)
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = &av, p.BTH.DestQP(), p.DETH.QKey()
		}
	case p.Op.Has(wire.FlagWrite):
		wr.Opcode, wr.RemoteAddr, wr.RKey = transport.WRRDMAWrite, p.RETH.VA(), r.rkeys[p.RETH.RKey()]
		if last.ImmDt != nil {
			wr.Opcode, wr.ImmData = transport.WRRDMAWriteWithImm, last.ImmDt.Imm()
		}
	case p.Op.Has(wire.FlagRead):
		wr.Opcode, wr.RemoteAddr, wr.RKey = transport.WRRDMARead, p.RETH.VA(), r.rkeys[p.RETH.RKey()]
		wr.SGL = []transport.SGE{src.SGE(o, int(p.RETH.Length()))}
		off[m.from] += int(p.RETH.Length())
	case p.Op.Has(wire.FlagAtomic):
		a := p.AtomicETH
		wr.RemoteAddr, wr.RKey = a.VA(), r.rkeys[a.RKey()]
		wr.SGL = []transport.SGE{src.SGE(o, 8)}
		off[m.from] += 8
		if p.BTH.Opcode() == wire.RCCompareSwap {
			wr.Opcode, wr.Swap, wr.CompareAdd = transport.WRAtomicCmpAndSwp, a.SwapAdd(), a.Compare()
		} else {
			wr.Opcode, wr.CompareAdd = transport.WRAtomicFetchAdd, a.SwapAdd()
		}
	}
	return wr
}

// run drives the network until every WR has completed and nothing is in
// flight; each must complete successfully.
func (r *replay) run() {
	if err := r.n.Run(func() bool {
		for ep, k := range r.posted {
			if ep.SendCQ.Len() < k {
				return false
			}
		}
		return r.n.InFlight() == 0
	}, 1_000_000); err != nil {
		r.t.Fatal(err)
	}
	for ep := range r.posted {
		for _, wc := range tt.Poll(ep.SendCQ) {
			if wc.Status != transport.WCSuccess {
				r.t.Fatalf("WR from frame %d: %v", wc.WRID, wc.Status)
			}
		}
	}
}

// compare checks the requests (req) or the responses one side sent against
// the kernel's, in order; requests and responses apart, since how the two
// interleave on one side is a matter of timing.
func (r *replay) compare(t *testing.T, from [4]byte, req bool) {
	split := func(cs []capPkt) []capPkt {
		var out []capPkt
		for _, c := range cs {
			if (c.p.Op.Flags&wire.FlagRequest != 0) == req {
				out = append(out, c)
			}
		}
		return out
	}
	var mine []capPkt
	for _, c := range r.pkts {
		if c.src == from {
			mine = append(mine, c)
		}
	}
	want, got := split(mine), split(r.sent[r.side[from].Node])
	if len(got) != len(want) {
		t.Errorf("side %v sent %d %s, the kernel %d", from, len(got), kind(req), len(want))
	}
	for i := range min(len(got), len(want)) {
		if d := diffPkt(&got[i], &want[i], r.rkeys, r.typ); d != "" {
			t.Errorf("side %v %s %d (kernel frame %d, %s): %s", from, kind(req), i, want[i].frame, want[i].p.Op.Name, d)
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
