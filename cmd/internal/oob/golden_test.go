package oob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/transport/wire"
)

// The field values below are the ones testdata/roce/README.md lists for
// each capture; the tests check them three ways: the decoder reads them
// out of the kernel tools' bytes, they agree with the RoCE packets of the
// same capture (BTH dest QP, first PSN, RETH/AtomicETH rkey and address,
// source address = GID), and the encoder turns them back into the
// captured bytes.

var (
	clientIP = netip.MustParseAddr("192.0.2.12")
	serverIP = netip.MustParseAddr("192.0.2.11")
)

type pingpongCase struct {
	file           string
	client, server PingpongDest
}

var pingpongCases = []pingpongCase{
	{"rc_send.pcap", ppd(0x11, 0xbc0717, clientIP), ppd(0x11, 0x5b78fa, serverIP)},
	{"rc_send_only.pcap", ppd(0x12, 0x1f288a, clientIP), ppd(0x12, 0x222054, serverIP)},
	{"uc_send.pcap", ppd(0x13, 0x8cc2ea, clientIP), ppd(0x13, 0xf37c44, serverIP)},
	{"ud_send.pcap", ppd(0x14, 0xc588ec, clientIP), ppd(0x14, 0xe89605, serverIP)},
}

func ppd(qpn, psn uint32, ip netip.Addr) PingpongDest {
	return PingpongDest{LID: 0, QPN: qpn, PSN: psn, GID: gid4(ip)}
}

type perftestCase struct {
	file           string
	script         []step
	client, server PerftestDest
	size, iters    uint64 // the client's report
}

var perftestCases = []perftestCase{
	{"rdma_write.pcap", bwScript(1),
		ptd(1, 0x19, 0xe6d357, 0x7b9, 0x55dfe6721000, clientIP), ptd(1, 0x19, 0x57d95f, 0x7c9, 0x56010b8e7000, serverIP), 3000, 5},
	{"rdma_read.pcap", bwScript(1),
		ptd(0x80, 0x1b, 0xb8a203, 0x909, 0x55ee448f8000, clientIP), ptd(0x80, 0x1b, 0x8da8bc, 0x9b6, 0x5595a9e69000, serverIP), 3000, 5},
	{"atomic_cmp_swap.pcap", bwScript(1),
		ptd(0x80, 0x1e, 0xbf2143, 0xc43, 0x56266364e000, clientIP), ptd(0x80, 0x1e, 0xa84f6c, 0xc3c, 0x5573e7f04000, serverIP), 8, 5},
	{"atomic_fetch_add.pcap", bwScript(1),
		ptd(0x80, 0x1d, 0x1788b6, 0xb97, 0x5630ad286000, clientIP), ptd(0x80, 0x1d, 0xf33902, 0xbea, 0x55a9e116c000, serverIP), 8, 5},
	{"send_bw.pcap", sendBWScript(1, 1),
		ptd(1, 0x1c, 0xde3a0c, 0, 0x55a5c1f2e000, clientIP), ptd(1, 0x1c, 0x37463e, 0, 0x55c35f2fa000, serverIP), 0, 0},
	{"rdma_write_lat.pcap", writeLatScript(1),
		ptd(1, 0x1a, 0x688745, 0x808, 0x564acd472000, clientIP), ptd(1, 0x1a, 0x8d04bd, 0x8c5, 0x564fe39ca000, serverIP), 0, 0},
}

func ptd(outReads uint16, qpn, psn, rkey uint32, vaddr uint64, ip netip.Addr) PerftestDest {
	return PerftestDest{OutReads: outReads, QPN: qpn, PSN: psn, RKey: rkey, VAddr: vaddr, GID: gid4(ip)}
}

// qpAddr is what one QP advertised.
type qpAddr struct {
	QPN, PSN uint32
	GID      [16]byte
	RKey     uint32
	VAddr    uint64
}

// checkRoCE checks one pair of advertised addresses against the
// capture's RoCE packets (see checkRoCEPairs).
func checkRoCE(t *testing.T, c *capture, clientQPN, clientPSN uint32, clientGID [16]byte, serverQPN, serverPSN uint32, serverGID [16]byte, clientKey, serverKey uint32, clientVA, serverVA uint64) {
	t.Helper()
	checkRoCEPairs(t, c, []qpAddr{{clientQPN, clientPSN, clientGID, clientKey, clientVA}}, []qpAddr{{serverQPN, serverPSN, serverGID, serverKey, serverVA}})
}

// checkRoCEPairs checks the advertised addresses against the capture's
// RoCE packets, client QP i being connected to server QP i: each side's
// packets come from the address behind its GID and go to a QPN the peer
// advertised; the first request to each carries the PSN the sending QP
// advertised; RDMA and atomic requests carry the target's rkey and an
// address at or above its advertised VADDR.
func checkRoCEPairs(t *testing.T, c *capture, client, server []qpAddr) {
	t.Helper()
	if gid4(c.Client) != client[0].GID || gid4(c.Server) != server[0].GID {
		t.Errorf("%s: TCP between %v and %v, GIDs advertised %v / %v", c.Name, c.Client, c.Server,
			netip.AddrFrom16(client[0].GID), netip.AddrFrom16(server[0].GID))
	}
	type key struct {
		src netip.Addr
		qpn uint32
	}
	firstReq := map[key]bool{}
	var n int
	for _, r := range c.RoCE {
		mine, peer := client, server
		if r.Src == c.Server {
			mine, peer = server, client
		} else if r.Src != c.Client {
			t.Errorf("%s frame %d: RoCE from %v, neither side", c.Name, r.Frame, r.Src)
			continue
		}
		n++
		dqp := r.Pkt.BTH.DestQP()
		i := slices.IndexFunc(peer, func(a qpAddr) bool { return a.QPN == dqp })
		if i < 0 {
			t.Errorf("%s frame %d: dest QP %#x, not one the peer advertised", c.Name, r.Frame, dqp)
			continue
		}
		if isRequest(r.Pkt.BTH.Opcode()) && !firstReq[key{r.Src, dqp}] {
			firstReq[key{r.Src, dqp}] = true
			if got := r.Pkt.BTH.PSN(); got != mine[i].PSN {
				t.Errorf("%s frame %d: first request PSN %#x, want the advertised %#x", c.Name, r.Frame, got, mine[i].PSN)
			}
		}
		var k uint32
		var va uint64
		switch {
		case r.Pkt.RETH != nil:
			k, va = r.Pkt.RETH.RKey(), r.Pkt.RETH.VA()
		case r.Pkt.AtomicETH != nil:
			k, va = r.Pkt.AtomicETH.RKey(), r.Pkt.AtomicETH.VA()
		default:
			continue
		}
		if k != peer[i].RKey || va < peer[i].VAddr || va >= peer[i].VAddr+1<<24 {
			t.Errorf("%s frame %d: rkey %#x va %#x, want the peer's advertised rkey %#x at or above %#x", c.Name, r.Frame, k, va, peer[i].RKey, peer[i].VAddr)
		}
	}
	if n == 0 {
		t.Errorf("%s: no RoCE packets", c.Name)
	}
}

// isRequest: opcodes a requester sends (not ACKs, read responses or
// atomic ACKs), which start at its own send PSN.
func isRequest(op wire.Opcode) bool {
	switch op & 0x1f {
	case 0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12: // READ_RESPONSE_*, ACKNOWLEDGE, ATOMIC_ACKNOWLEDGE
		return false
	}
	return true
}

func TestGoldenPingpong(t *testing.T) {
	for _, tc := range pingpongCases {
		t.Run(tc.file, func(t *testing.T) {
			c := readCapture(t, tc.file)
			if len(c.Chunks) != 3 || !c.Chunks[0].FromClient || c.Chunks[1].FromClient || !c.Chunks[2].FromClient {
				t.Fatalf("want client, server, client; got %v", c.Chunks)
			}
			cm := messages(t, "client stream", c.ToServer, PingpongMsgSize, len(doneMsg))
			sm := messages(t, "server stream", c.ToClient, PingpongMsgSize)
			for _, m := range []struct {
				who  string
				msg  []byte
				want PingpongDest
			}{{"client", cm[0], tc.client}, {"server", sm[0], tc.server}} {
				got, err := ParsePingpongDest(m.msg)
				if err != nil {
					t.Fatalf("%s: %v", m.who, err)
				}
				if got != m.want {
					t.Errorf("%s: decoded %+v, want %+v", m.who, got, m.want)
				}
				if enc := m.want.AppendMsg(nil); !bytes.Equal(enc, m.msg) {
					t.Errorf("%s: encoded %s, the tool sent %s", m.who, quote(enc), quote(m.msg))
				}
			}
			if !bytes.Equal(cm[1], doneMsg) {
				t.Errorf("client's last message %s", quote(cm[1]))
			}
			checkRoCE(t, c, tc.client.QPN, tc.client.PSN, tc.client.GID, tc.server.QPN, tc.server.PSN, tc.server.GID, 0, 0, 0, 0)

			// Our client against the kernel server's bytes, and our server
			// against the kernel client's.
			replay(t, c, true, func(ctx context.Context, conn *Conn) error {
				remote, err := conn.PingpongClient(ctx, []PingpongDest{tc.client})
				if err == nil && remote[0] != tc.server {
					t.Errorf("client got %+v, want %+v", remote[0], tc.server)
				}
				return err
			})
			replay(t, c, false, func(ctx context.Context, conn *Conn) error {
				connected := false
				remote, err := conn.PingpongServer(ctx, []PingpongDest{tc.server}, func(r []PingpongDest) error {
					connected = r[0] == tc.client
					return nil
				})
				if err == nil && (!connected || remote[0] != tc.client) {
					t.Errorf("server got %+v (connect saw the client: %v), want %+v", remote, connected, tc.client)
				}
				return err
			})
		})
	}
}

func TestGoldenPerftest(t *testing.T) {
	for _, tc := range perftestCases {
		t.Run(tc.file, func(t *testing.T) {
			c := readCapture(t, tc.file)
			cl := decodePerftestSide(t, "client", c.ToServer, tc.script)
			sv := decodePerftestSide(t, "server", c.ToClient, tc.script)
			if len(cl.dests) != 1 || cl.dests[0] != tc.client || len(sv.dests) != 1 || sv.dests[0] != tc.server {
				t.Errorf("decoded client %+v server %+v, want %+v %+v", cl.dests, sv.dests, tc.client, tc.server)
			}
			for _, side := range []struct {
				who  string
				want PerftestDest
				msg  []byte
			}{{"client", tc.client, cl.first}, {"server", tc.server, sv.first}} {
				if enc := side.want.AppendMsg(nil, true); !bytes.Equal(enc, side.msg) {
					t.Errorf("%s: encoded %s, the tool sent %s", side.who, quote(enc), quote(side.msg))
				}
			}
			if cl.hasReport {
				r := cl.report // the client's: the results; the server's is uninitialised memory
				if r.Size != tc.size || r.Iters != tc.iters {
					t.Errorf("client report size %d iters %d, want %d %d", r.Size, r.Iters, tc.size, tc.iters)
				}
				checkReport(t, r)
			}
			checkRoCE(t, c, tc.client.QPN, tc.client.PSN, tc.client.GID, tc.server.QPN, tc.server.PSN, tc.server.GID,
				tc.client.RKey, tc.server.RKey, tc.client.VAddr, tc.server.VAddr)
			replayPerftest(t, c, tc.script, cl, sv)
		})
	}
}

// checkReport: MsgRate[Mpps] = BW[MB/s] · 2^20 / size / 10^6, so the three
// doubles decode as one consistent result.
func checkReport(t *testing.T, r BWReport) {
	t.Helper()
	if want := r.BWAvg * 0x100000 / float64(r.Size) / 1e6; math.Abs(r.MsgRateAvg-want) > 1e-9*want || r.BWPeak < 0 || r.BWAvg <= 0 {
		t.Errorf("client report %+v: not a consistent result (msg rate for that average: %g)", r, want)
	}
}

// replayPerftest replays the capture against our client and our server,
// each following the script with the values its kernel counterpart sent.
func replayPerftest(t *testing.T, c *capture, sc []step, cl, sv perftestSide) {
	t.Helper()
	replay(t, c, true, func(ctx context.Context, conn *Conn) error {
		return runScript(ctx, conn.Perftest(true), sc, cl.dests, sv.dests, cl.report, sv.report)
	})
	replay(t, c, false, func(ctx context.Context, conn *Conn) error {
		return runScript(ctx, conn.Perftest(false), sc, sv.dests, cl.dests, sv.report, cl.report)
	})
}

// step is one exchange of a perftest main(): 'V' versions, 'S' page and
// cache line sizes, 'M' MTU, 'H' a handshake with QP qp's address, 'R' the
// bandwidth reports, 'C' the closing handshake and "done".
type step struct {
	op byte
	qp int
}

func hs(nqp int) []step {
	var s []step
	for i := range nqp {
		s = append(s, step{'H', i})
	}
	return s
}

func cat(parts ...[]step) []step {
	var s []step
	for _, p := range parts {
		s = append(s, p...)
	}
	return s
}

var setup = []step{{'V', 0}, {'S', 0}, {'M', 0}}

// bwScript: ib_write_bw, ib_read_bw, ib_atomic_bw (any -a, -D): addresses,
// again after connecting, once more after RTR; after the run a barrier,
// the reports, the close.
func bwScript(nqp int) []step {
	return cat(setup, hs(nqp), hs(nqp), hs(1), hs(1), []step{{'R', 0}, {'C', 0}})
}

// sendBWScript: ib_send_bw with sizes runs (-a: 23): addresses, a
// barrier after connecting, addresses again; around each run a barrier
// (receives posted) and one after; the close. A single run has no
// barrier after it.
func sendBWScript(nqp, sizes int) []step {
	s := cat(setup, hs(nqp), hs(1), hs(nqp))
	if sizes == 1 {
		return cat(s, hs(1), []step{{'C', 0}})
	}
	for range sizes {
		s = cat(s, hs(1), hs(1))
	}
	return cat(s, []step{{'C', 0}})
}

// writeLatScript: ib_write_lat: four handshakes and no close.
func writeLatScript(nqp int) []step { return cat(setup, hs(1), hs(nqp), hs(nqp), hs(1)) }

// readLatScript: ib_read_lat and ib_atomic_lat: as write_lat, then the
// close (the server's right away, which waits for the client's after its run).
func readLatScript(nqp int) []step { return cat(writeLatScript(nqp), []step{{'C', 0}}) }

// sendLatScript: ib_send_lat: addresses, a barrier after connecting,
// addresses again, a barrier with receives posted, the close.
func sendLatScript(nqp int) []step {
	return cat(setup, hs(nqp), hs(1), hs(nqp), hs(1), []step{{'C', 0}})
}

// perftestSide is what one side sent, decoded.
type perftestSide struct {
	dests     []PerftestDest // per QP
	first     []byte         // its first address message
	report    BWReport
	hasReport bool
}

// decodePerftestSide cuts one direction's stream by the script and checks
// every message: the version, page 4096 / cache line 64, MTU 3, every
// address message of a QP the same, "done" last.
func decodePerftestSide(t *testing.T, who string, stream []byte, sc []step) perftestSide {
	t.Helper()
	var side perftestSide
	for i, st := range sc {
		n := map[byte]int{'V': 16, 'S': 8, 'M': 2, 'H': PerftestKeySize, 'R': 40, 'C': PerftestKeySize + 5}[st.op]
		if len(stream) < n {
			t.Fatalf("%s: stream ends in step %d (%c), %d bytes short", who, i, st.op, n-len(stream))
		}
		m := stream[:n]
		stream = stream[n:]
		switch st.op {
		case 'V':
			if string(bytes.TrimRight(m, "\x00")) != PerftestVersion {
				t.Errorf("%s version %s", who, quote(m))
			}
		case 'S':
			if !bytes.Equal(m, []byte{0, 0, 0x10, 0, 0, 0, 0, 64}) {
				t.Errorf("%s sys data %s, want page 4096, cache line 64", who, quote(m))
			}
		case 'M':
			if !bytes.Equal(m, []byte("3\x00")) {
				t.Errorf("%s MTU %s, want 3 (1024)", who, quote(m))
			}
		case 'R':
			side.hasReport = true
			side.report = BWReport{Size: be64(m[0:8]), Iters: be64(m[8:16]), BWPeak: math.Float64frombits(be64(m[16:24])),
				BWAvg: math.Float64frombits(be64(m[24:32])), MsgRateAvg: math.Float64frombits(be64(m[32:40]))}
		case 'C':
			if !bytes.Equal(m[PerftestKeySize:], doneMsg) {
				t.Errorf("%s: last message %s", who, quote(m[PerftestKeySize:]))
			}
			m = m[:PerftestKeySize]
			fallthrough
		case 'H':
			d, err := ParsePerftestDest(m)
			if err != nil {
				t.Fatalf("%s step %d: %v", who, i, err)
			}
			if st.qp == len(side.dests) {
				side.dests = append(side.dests, d)
				if side.first == nil {
					side.first = m
				}
			} else if d != side.dests[st.qp] {
				t.Errorf("%s step %d: QP %d's address %+v, earlier %+v", who, i, st.qp, d, side.dests[st.qp])
			}
		}
	}
	if len(stream) != 0 {
		t.Errorf("%s: %d bytes after the script: %s", who, len(stream), quote(stream))
	}
	return side
}

func be64(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}

// runScript makes the script's exchanges, checking each value received.
func runScript(ctx context.Context, p *Perftest, sc []step, me, peer []PerftestDest, myRep, peerRep BWReport) error {
	fail := func(what string, got, want any) error {
		return &ProtocolError{Op: what, Why: "unexpected value", Msg: []byte(fmt.Sprintf("%+v want %+v", got, want))}
	}
	for _, st := range sc {
		switch st.op {
		case 'V':
			v, err := p.ExchangeVersions(ctx, PerftestVersion)
			if err != nil {
				return err
			}
			if v != PerftestVersion {
				return fail("version", v, PerftestVersion)
			}
		case 'S':
			cb, cl, err := p.ExchangeSysData(ctx, 4096, 64)
			if err != nil {
				return err
			}
			if cb != 4096 || cl != 64 {
				return fail("sys data", [2]int32{cb, cl}, [2]int32{4096, 64})
			}
		case 'M':
			mtu, err := p.ExchangeMTU(ctx, 3)
			if err != nil {
				return err
			}
			if mtu != 3 || NegotiateMTU(3, mtu) != 3 {
				return fail("mtu", mtu, 3)
			}
		case 'H':
			got, err := p.HandShake(ctx, me[st.qp], 0)
			if err != nil {
				return err
			}
			if got != peer[st.qp] {
				return fail("address", got, peer[st.qp])
			}
		case 'R':
			got, err := p.ExchangeBWReports(ctx, myRep, 0)
			if err != nil {
				return err
			}
			if math.Float64bits(got.BWAvg) != math.Float64bits(peerRep.BWAvg) || got.Size != peerRep.Size || got.Iters != peerRep.Iters {
				return fail("report", got, peerRep)
			}
		case 'C':
			if err := p.Close(ctx, me[0], 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// replay runs drive over a real TCP connection on 127.0.0.1 against a fake
// peer that plays the capture's other side: it writes that side's bytes
// when the transcript has them next and reads and compares ours, so drive
// must write the same bytes in the same order as the kernel tool did.
// fakeServer chooses which side the fake plays.
func replay(t *testing.T, c *capture, fakeServer bool, drive func(ctx context.Context, conn *Conn) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fake := func(nc net.Conn) error {
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(5 * time.Second))
		for _, ch := range c.Chunks {
			if ch.FromClient != fakeServer {
				if _, err := nc.Write(ch.Data); err != nil {
					return err
				}
				continue
			}
			got := make([]byte, len(ch.Data))
			if n, err := io.ReadFull(nc, got); err != nil {
				return &ProtocolError{Op: "replay: reading " + ch.String(), Msg: got[:n], Why: err.Error()}
			}
			if !bytes.Equal(got, ch.Data) {
				return &ProtocolError{Op: "replay: " + ch.String(), Msg: got, Why: "sent different bytes"}
			}
		}
		// Nothing more: the side under test closes.
		extra, err := io.ReadAll(nc)
		if len(extra) > 0 || err != nil {
			return &ProtocolError{Op: "replay: after the transcript", Msg: extra, Why: "more bytes or no clean close: " + fmt.Sprint(err)}
		}
		return nil
	}
	fakeErr := make(chan error, 1)
	var conn *Conn
	if fakeServer {
		go func() {
			nc, err := l.l.Accept()
			if err != nil {
				fakeErr <- err
				return
			}
			fakeErr <- fake(nc)
		}()
		conn, err = Dial(ctx, "tcp4", "127.0.0.1", l.Addr().(*net.TCPAddr).Port)
	} else {
		go func() {
			nc, err := net.DialTimeout("tcp4", l.Addr().String(), 5*time.Second)
			if err != nil {
				fakeErr <- err
				return
			}
			fakeErr <- fake(nc)
		}()
		conn, err = l.Accept(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	role := map[bool]string{true: "our client", false: "our server"}[fakeServer]
	if err := drive(ctx, conn); err != nil {
		t.Errorf("%s: %s: %v", c.Name, role, err)
	}
	conn.Close()
	if err := <-fakeErr; err != nil && !errors.Is(err, net.ErrClosed) {
		t.Errorf("%s: %s against the capture: %v", c.Name, role, err)
	}
}
