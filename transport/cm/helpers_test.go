package cm

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vrnic/vrnicd/transport/transporttest"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/rocetest"
)

// capturedMAD is one CM MAD of a capture and who sent it.
type capturedMAD struct {
	frame int
	from  netip.Addr
	b     []byte
	h     mad.Header
	msg   mad.Message
}

// rpingMADs are the CM MADs of rdma_cm_rping.pcap (UD SEND_ONLY to QP1 on
// UDP 4791 over IPv4), in capture order, and the UDP source port of the RC
// traffic that follows them.
func rpingMADs(t *testing.T) ([]capturedMAD, uint16) {
	t.Helper()
	dir, err := rocetest.Dir()
	if err != nil {
		t.Fatal(err)
	}
	frames, err := rocetest.ReadFrames(filepath.Join(dir, "rdma_cm_rping.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	const eth, ip, udp, bth, deth = 14, 20, 8, 12, 8
	var out []capturedMAD
	var rcSport uint16
	for _, f := range frames {
		d := f.Data
		if len(d) < eth+ip+udp+bth || d[12] != 0x08 || d[13] != 0x00 || d[14] != 0x45 || d[23] != 17 ||
			binary.BigEndian.Uint16(d[36:]) != 4791 {
			continue
		}
		opcode := d[eth+ip+udp]
		destQP := uint32(d[eth+ip+udp+5])<<16 | uint32(d[eth+ip+udp+6])<<8 | uint32(d[eth+ip+udp+7])
		if opcode != 0x64 || destQP != 1 { // UD SEND_ONLY to QP1
			if rcSport == 0 && opcode>>5 == 0 {
				rcSport = binary.BigEndian.Uint16(d[34:])
			}
			continue
		}
		off := eth + ip + udp + bth + deth
		if len(d) < off+mad.Size {
			t.Fatalf("frame %d: %d bytes, short of a MAD", f.N, len(d))
		}
		b := d[off : off+mad.Size]
		h, msg, err := mad.Decode(b)
		if err != nil || msg == nil {
			t.Fatalf("frame %d: %v", f.N, err)
		}
		out = append(out, capturedMAD{f.N, netip.AddrFrom4([4]byte(d[26:30])), b, h, msg})
	}
	if len(out) != 5 {
		t.Fatalf("%d CM MADs in the capture, want REQ REP RTU DREQ DREP", len(out))
	}
	for i, attr := range []uint16{mad.AttrConnectRequest, mad.AttrConnectReply, mad.AttrReadyToUse,
		mad.AttrDisconnectRequest, mad.AttrDisconnectReply} {
		if out[i].h.AttributeID != attr {
			t.Fatalf("MAD %d is %s", i, mad.AttrName(mad.ClassCM, out[i].h.AttributeID))
		}
	}
	return out, rcSport
}

// fixedIDs hands out the given communication IDs, then counts up from a
// seed, so tests know every ID a Table draws.
func fixedIDs(ids ...uint32) func() uint32 {
	next := uint32(0x1000)
	return func() uint32 {
		if len(ids) > 0 {
			id := ids[0]
			ids = ids[1:]
			return id
		}
		next++
		return next
	}
}

func events(out *Output) []EventKind {
	var k []EventKind
	for _, e := range out.Events {
		k = append(k, e.Kind)
	}
	return k
}

// only returns the single event of kind k in out, failing otherwise.
func only(t *testing.T, out *Output, k EventKind) Event {
	t.Helper()
	if len(out.Events) != 1 || out.Events[0].Kind != k {
		t.Fatalf("events %v, want just %v", events(out), k)
	}
	return out.Events[0]
}

// sent decodes the MADs of out.
func sent(t *testing.T, out *Output) []mad.Message {
	t.Helper()
	var ms []mad.Message
	for _, s := range out.Sends {
		_, m, err := mad.Decode(s.MAD[:])
		if err != nil {
			t.Fatalf("we sent a MAD we cannot decode: %v", err)
		}
		ms = append(ms, m)
	}
	return ms
}

func attrs(ms []mad.Message) string {
	s := ""
	for _, m := range ms {
		s += mad.AttrName(mad.ClassCM, m.AttributeID()) + " "
	}
	return s
}

// checkInvariants is what must hold of a Table after any call: the counts,
// the indexes and the timer heap agree with the connections.
func checkInvariants(t *Table) error {
	half := 0
	for id, c := range t.conns {
		if c.ID != id || c.State == StateIdle {
			return fmt.Errorf("conn %#x: ID %#x state %v", id, c.ID, c.State)
		}
		if !c.Active && isHalfOpen(c.State) {
			half++
		}
		if c.timer.Queued() {
			if i := slices.Index(timerOrder(t), c); i < 0 {
				return fmt.Errorf("conn %#x: queued for %v but not in the timer heap", id, c.timer.At())
			}
		}
	}
	if half != t.halfOpen {
		return fmt.Errorf("half-open count %d, %d connections are", t.halfOpen, half)
	}
	if len(t.conns) > t.cfg.MaxConns || t.halfOpen > t.cfg.MaxHalfOpen {
		return fmt.Errorf("%d connections, %d half-open, past the limits", len(t.conns), t.halfOpen)
	}
	order := timerOrder(t)
	for i, c := range order {
		if !c.timer.Queued() || t.conns[c.ID] != c {
			return fmt.Errorf("timer %d: conn %#x not in the table or not queued", i, c.ID)
		}
		if i > 0 && c.timer.At().Before(order[(i-1)/2].timer.At()) {
			return fmt.Errorf("timer heap out of order at %d", i)
		}
	}
	for what, m := range map[string]int{"remote": len(t.byRemote), "qpn": len(t.byQPN), "sidr": len(t.bySIDR)} {
		if m > len(t.conns) {
			return fmt.Errorf("%s index has %d entries for %d connections", what, m, len(t.conns))
		}
	}
	for _, id := range t.byRemote {
		if t.conns[id] == nil {
			return fmt.Errorf("remote index names freed conn %#x", id)
		}
	}
	for _, id := range t.byQPN {
		if t.conns[id] == nil {
			return fmt.Errorf("QPN index names freed conn %#x", id)
		}
	}
	for _, id := range t.bySIDR {
		if t.conns[id] == nil {
			return fmt.Errorf("SIDR index names freed conn %#x", id)
		}
	}
	return nil
}

var (
	activeIP  = netip.MustParseAddr("192.0.2.12")
	passiveIP = netip.MustParseAddr("192.0.2.11")
)

// pair is two Tables joined by a hand-driven exchange on one clock.
type pair struct {
	clock           *transporttest.ManualClock
	active, passive *Table
}

func newPair(t *testing.T, acfg, pcfg Config) *pair {
	t.Helper()
	clock := transporttest.NewManualClock()
	if acfg.LocalCAGUID == 0 {
		acfg.LocalCAGUID = 0xa
	}
	if pcfg.LocalCAGUID == 0 {
		pcfg.LocalCAGUID = 0xb
	}
	p := &pair{clock: clock, active: NewTable(acfg, clock), passive: NewTable(pcfg, clock)}
	if _, err := p.passive.Listen(ServiceID(PortSpaceTCP, 7174), netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	return p
}

func rpingConnect() ConnectParams {
	return ConnectParams{Src: netip.AddrPortFrom(activeIP, 58775), Dst: netip.AddrPortFrom(passiveIP, 7174),
		QPN: 0x11, PSN: 0x100, RespRes: 1, InitDepth: 1, RetryCount: 7, RNRRetry: 7, PathMTU: 3}
}

func rpingAccept() AcceptParams {
	return AcceptParams{QPN: 0x22, PSN: 0x200, RespRes: 1, InitDepth: 1, RNRRetry: 7}
}

// rpingDataPSN is the BTH PSN of the first RC request (a SEND or an RDMA
// READ request, not an ACK or a read response) that from sends in the
// rping capture: where its QP's send PSNs start.
func rpingDataPSN(t *testing.T, from netip.Addr) uint32 {
	t.Helper()
	dir, err := rocetest.Dir()
	if err != nil {
		t.Fatal(err)
	}
	frames, err := rocetest.ReadFrames(filepath.Join(dir, "rdma_cm_rping.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	const bthOff = 14 + 20 + 8
	for _, f := range frames {
		d := f.Data
		if len(d) < bthOff+12 || d[12] != 0x08 || d[13] != 0x00 || netip.AddrFrom4([4]byte(d[26:30])) != from {
			continue
		}
		op := d[bthOff]
		// RC: SEND first..only with immediate (0-5), RDMA WRITE (6-11),
		// RDMA READ request (12).
		if op <= 12 {
			return binary.BigEndian.Uint32(d[bthOff+8:]) & 0xFFFFFF
		}
	}
	t.Fatalf("no RC request from %v in the capture", from)
	return 0
}

// timerOrder is the table's timer heap in heap order.
func timerOrder(t *Table) []*Conn {
	out := make([]*Conn, t.timers.Len())
	for i := range out {
		out[i] = t.timers.Item(i)
	}
	return out
}
