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

// perftest kinds: the sequence of exchanges each tool's main() makes.
const (
	kindBW     = "bw"      // ib_write_bw, ib_read_bw, ib_atomic_bw
	kindSendBW = "send_bw" // ib_send_bw
	kindLat    = "lat"     // ib_write_lat
)

type perftestCase struct {
	file           string
	kind           string
	client, server PerftestDest
	size, iters    uint64 // the client's report
}

var perftestCases = []perftestCase{
	{"rdma_write.pcap", kindBW,
		ptd(1, 0x19, 0xe6d357, 0x7b9, 0x55dfe6721000, clientIP), ptd(1, 0x19, 0x57d95f, 0x7c9, 0x56010b8e7000, serverIP), 3000, 5},
	{"rdma_read.pcap", kindBW,
		ptd(0x80, 0x1b, 0xb8a203, 0x909, 0x55ee448f8000, clientIP), ptd(0x80, 0x1b, 0x8da8bc, 0x9b6, 0x5595a9e69000, serverIP), 3000, 5},
	{"atomic_cmp_swap.pcap", kindBW,
		ptd(0x80, 0x1e, 0xbf2143, 0xc43, 0x56266364e000, clientIP), ptd(0x80, 0x1e, 0xa84f6c, 0xc3c, 0x5573e7f04000, serverIP), 8, 5},
	{"atomic_fetch_add.pcap", kindBW,
		ptd(0x80, 0x1d, 0x1788b6, 0xb97, 0x5630ad286000, clientIP), ptd(0x80, 0x1d, 0xf33902, 0xbea, 0x55a9e116c000, serverIP), 8, 5},
	{"send_bw.pcap", kindSendBW,
		ptd(1, 0x1c, 0xde3a0c, 0, 0x55a5c1f2e000, clientIP), ptd(1, 0x1c, 0x37463e, 0, 0x55c35f2fa000, serverIP), 0, 0},
	{"rdma_write_lat.pcap", kindLat,
		ptd(1, 0x1a, 0x688745, 0x808, 0x564acd472000, clientIP), ptd(1, 0x1a, 0x8d04bd, 0x8c5, 0x564fe39ca000, serverIP), 0, 0},
}

func ptd(outReads uint16, qpn, psn, rkey uint32, vaddr uint64, ip netip.Addr) PerftestDest {
	return PerftestDest{OutReads: outReads, QPN: qpn, PSN: psn, RKey: rkey, VAddr: vaddr, GID: gid4(ip)}
}

// checkRoCE checks the advertised addresses against the capture's RoCE
// packets: each side's packets go to the peer's advertised QPN from the
// address behind its own GID, and its first request carries its own
// advertised PSN; RDMA/atomic requests carry the server's rkey and an
// address at or above its advertised VADDR (the client's, when the server
// writes: ib_write_lat).
func checkRoCE(t *testing.T, c *capture, clientQPN, clientPSN uint32, clientGID [16]byte, serverQPN, serverPSN uint32, serverGID [16]byte, clientKey, serverKey uint32, clientVA, serverVA uint64) {
	t.Helper()
	if got := gid4(c.client); got != clientGID || gid4(c.server) != serverGID {
		t.Errorf("%s: TCP between %v and %v, GIDs advertised %v / %v", c.name, c.client, c.server,
			netip.AddrFrom16(clientGID), netip.AddrFrom16(serverGID))
	}
	firstReq := map[netip.Addr]bool{}
	var n int
	for _, r := range c.roce {
		if r.pkt.BTH.Opcode().Info().Name == "" {
			continue
		}
		toQPN, myPSN, rkey, vaddr := serverQPN, clientPSN, serverKey, serverVA
		if r.src == c.server {
			toQPN, myPSN, rkey, vaddr = clientQPN, serverPSN, clientKey, clientVA
		} else if r.src != c.client {
			t.Errorf("%s frame %d: RoCE from %v, neither side", c.name, r.frame, r.src)
			continue
		}
		n++
		if got := r.pkt.BTH.DestQP(); got != toQPN {
			t.Errorf("%s frame %d: dest QP %#x, want the peer's advertised %#x", c.name, r.frame, got, toQPN)
		}
		if isRequest(r.pkt.BTH.Opcode()) && !firstReq[r.src] {
			firstReq[r.src] = true
			if got := r.pkt.BTH.PSN(); got != myPSN {
				t.Errorf("%s frame %d: first request PSN %#x, want the advertised %#x", c.name, r.frame, got, myPSN)
			}
		}
		var k uint32
		var va uint64
		switch {
		case r.pkt.RETH != nil:
			k, va = r.pkt.RETH.RKey(), r.pkt.RETH.VA()
		case r.pkt.AtomicETH != nil:
			k, va = r.pkt.AtomicETH.RKey(), r.pkt.AtomicETH.VA()
		default:
			continue
		}
		if k != rkey || va < vaddr || va >= vaddr+1<<24 {
			t.Errorf("%s frame %d: rkey %#x va %#x, want the peer's advertised rkey %#x at or above %#x", c.name, r.frame, k, va, rkey, vaddr)
		}
	}
	if n == 0 {
		t.Errorf("%s: no RoCE packets", c.name)
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
			if len(c.chunks) != 3 || !c.chunks[0].fromClient || c.chunks[1].fromClient || !c.chunks[2].fromClient {
				t.Fatalf("want client, server, client; got %v", c.chunks)
			}
			cm := messages(t, "client stream", c.toServer, PingpongMsgSize, len(doneMsg))
			sm := messages(t, "server stream", c.toClient, PingpongMsgSize)
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
			keys := map[string]int{kindBW: 5, kindSendBW: 5, kindLat: 4}[tc.kind]
			sizes := []int{PerftestVersionSize, 4, 4, 2}
			for range keys {
				sizes = append(sizes, PerftestKeySize)
			}
			if tc.kind == kindBW { // the report sits between the 4th and 5th handshake
				sizes = append(sizes[:len(sizes)-1], 8, 8, 8, 8, 8, PerftestKeySize)
			}
			if tc.kind != kindLat {
				sizes = append(sizes, len(doneMsg))
			}
			cm := messages(t, "client stream", c.toServer, sizes...)
			sm := messages(t, "server stream", c.toClient, sizes...)

			var reports [2]BWReport
			for side, ms := range [][][]byte{cm, sm} {
				who, want := "client", tc.client
				if side == 1 {
					who, want = "server", tc.server
				}
				if v := string(bytes.TrimRight(ms[0], "\x00")); v != PerftestVersion || len(ms[0]) != 16 {
					t.Errorf("%s version %s", who, quote(ms[0]))
				}
				if !bytes.Equal(ms[1], []byte{0, 0, 0x10, 0}) || !bytes.Equal(ms[2], []byte{0, 0, 0, 64}) {
					t.Errorf("%s sys data %s %s, want page 4096, cache line 64", who, quote(ms[1]), quote(ms[2]))
				}
				if !bytes.Equal(ms[3], []byte("3\x00")) {
					t.Errorf("%s MTU %s, want 3 (1024)", who, quote(ms[3]))
				}
				for i, m := range ms[4:] {
					switch len(m) {
					case PerftestKeySize:
						got, err := ParsePerftestDest(m)
						if err != nil {
							t.Fatalf("%s message %d: %v", who, 5+i, err)
						}
						if got != want {
							t.Errorf("%s message %d: decoded %+v, want %+v", who, 5+i, got, want)
						}
						if enc := want.AppendMsg(nil, true); !bytes.Equal(enc, m) {
							t.Errorf("%s: encoded %s, the tool sent %s", who, quote(enc), quote(m))
						}
					case len(doneMsg):
						if !bytes.Equal(m, doneMsg) {
							t.Errorf("%s: last message %s", who, quote(m))
						}
					}
				}
				if tc.kind == kindBW {
					r := ms[4+4 : 4+4+5]
					reports[side] = BWReport{Size: be64(r[0]), Iters: be64(r[1]),
						BWPeak: math.Float64frombits(be64(r[2])), BWAvg: math.Float64frombits(be64(r[3])), MsgRateAvg: math.Float64frombits(be64(r[4]))}
				}
			}
			if tc.kind == kindBW {
				r := reports[0] // the client's: the results; the server's is uninitialised memory
				if r.Size != tc.size || r.Iters != tc.iters {
					t.Errorf("client report size %d iters %d, want %d %d", r.Size, r.Iters, tc.size, tc.iters)
				}
				// MsgRate[Mpps] = BW[MB/s] · 2^20 / size / 10^6: the three
				// doubles decode as one consistent result.
				if want := r.BWAvg * 0x100000 / float64(r.Size) / 1e6; math.Abs(r.MsgRateAvg-want) > 1e-9*want || r.BWPeak < r.BWAvg || r.BWAvg <= 0 {
					t.Errorf("client report %+v: not a consistent result (msg rate for that average: %g)", r, want)
				}
			}
			checkRoCE(t, c, tc.client.QPN, tc.client.PSN, tc.client.GID, tc.server.QPN, tc.server.PSN, tc.server.GID, tc.client.RKey, tc.server.RKey, tc.client.VAddr, tc.server.VAddr)

			replay(t, c, true, func(ctx context.Context, conn *Conn) error {
				return drivePerftest(ctx, conn.Perftest(true), tc, tc.client, tc.server, reports[0], reports[1])
			})
			replay(t, c, false, func(ctx context.Context, conn *Conn) error {
				return drivePerftest(ctx, conn.Perftest(false), tc, tc.server, tc.client, reports[1], reports[0])
			})
		})
	}
}

func be64(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}

// drivePerftest makes the exchanges of the perftest main() behind tc.kind
// for one QP, checking each value received.
func drivePerftest(ctx context.Context, p *Perftest, tc perftestCase, me, peer PerftestDest, myRep, peerRep BWReport) error {
	fail := func(what string, got, want any) error {
		return &ProtocolError{Op: what, Why: "unexpected value", Msg: []byte(fmtAny(got) + " want " + fmtAny(want))}
	}
	v, err := p.ExchangeVersions(ctx, PerftestVersion)
	if err != nil {
		return err
	}
	if v != PerftestVersion {
		return fail("version", v, PerftestVersion)
	}
	cb, cl, err := p.ExchangeSysData(ctx, 4096, 64)
	if err != nil {
		return err
	}
	if cb != 4096 || cl != 64 {
		return fail("sys data", [2]int32{cb, cl}, [2]int32{4096, 64})
	}
	mtu, err := p.ExchangeMTU(ctx, 3)
	if err != nil {
		return err
	}
	if mtu != 3 || NegotiateMTU(3, mtu) != 3 {
		return fail("mtu", mtu, 3)
	}
	hs := func(n int) error {
		for range n {
			got, err := p.HandShake(ctx, me, 0)
			if err != nil {
				return err
			}
			if got != peer {
				return fail("address", got, peer)
			}
		}
		return nil
	}
	switch tc.kind {
	case kindBW:
		if err := hs(4); err != nil {
			return err
		}
		got, err := p.ExchangeBWReports(ctx, myRep, 0)
		if err != nil {
			return err
		}
		if math.Float64bits(got.BWAvg) != math.Float64bits(peerRep.BWAvg) || got.Size != peerRep.Size || got.Iters != peerRep.Iters {
			return fail("report", got, peerRep)
		}
		return p.Close(ctx, me, 0)
	case kindSendBW:
		if err := hs(4); err != nil {
			return err
		}
		return p.Close(ctx, me, 0)
	default:
		return hs(4)
	}
}

func fmtAny(v any) string { return fmt.Sprintf("%+v", v) }

func sprint(v any) string { return fmt.Sprint(v) }

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
		for _, ch := range c.chunks {
			if ch.fromClient != fakeServer {
				if _, err := nc.Write(ch.data); err != nil {
					return err
				}
				continue
			}
			got := make([]byte, len(ch.data))
			if n, err := io.ReadFull(nc, got); err != nil {
				return &ProtocolError{Op: "replay: reading " + ch.String(), Msg: got[:n], Why: err.Error()}
			}
			if !bytes.Equal(got, ch.data) {
				return &ProtocolError{Op: "replay: " + ch.String(), Msg: got, Why: "sent different bytes"}
			}
		}
		// Nothing more: the side under test closes.
		extra, err := io.ReadAll(nc)
		if len(extra) > 0 || err != nil {
			return &ProtocolError{Op: "replay: after the transcript", Msg: extra, Why: "more bytes or no clean close: " + sprint(err)}
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
		t.Errorf("%s: %s: %v", c.name, role, err)
	}
	conn.Close()
	if err := <-fakeErr; err != nil && !errors.Is(err, net.ErrClosed) {
		t.Errorf("%s: %s against the capture: %v", c.name, role, err)
	}
}
