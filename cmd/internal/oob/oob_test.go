package oob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestGIDString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"::ffff:192.0.2.12", "::ffff:192.0.2.12"}, // what ibv_rc_pingpong prints for rxe's IPv4 GID
		{"::", "::"}, // no -g
		{"fe80::5054:ff:fe6a:a9f1", "fe80::5054:ff:fe6a:a9f1"},
		{"::192.0.2.11", "::192.0.2.11"}, // IPv4-compatible: dotted by glibc, not by netip
		{"::1", "::1"},
		{"::ffff:0.0.0.0", "::ffff:0.0.0.0"},
		{"2001:db8:0:1:0:0:0:1", "2001:db8:0:1::1"},
		{"1:0:0:2:0:0:3:4", "1::2:0:0:3:4"}, // a tie: the first run
		{"1:2:3:4:5:6:7:0", "1:2:3:4:5:6:7:0"},
		{"1:0:0:0:0:0:0:0", "1::"},
		{"2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"},
	} {
		if got := GIDString(netip.MustParseAddr(tc.in).As16()); got != tc.want {
			t.Errorf("GIDString(%s) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// Elsewhere glibc and RFC 5952 (netip) agree.
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var g [16]byte
		for i := range g {
			if r.IntN(3) > 0 { // plenty of zero groups
				g[i] = byte(r.IntN(256))
			}
		}
		a := netip.AddrFrom16(g)
		if compat := bytes.Equal(g[:12], make([]byte, 12)) && (g[12] != 0 || g[13] != 0); compat {
			continue
		}
		if got, want := GIDString(g), a.String(); got != want {
			t.Fatalf("GIDString(%x) = %q, netip %q", g, got, want)
		}
	}
}

func TestPingpongRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 1000 {
		d := PingpongDest{LID: uint16(r.Uint32()), QPN: r.Uint32() & 0xffffff, PSN: r.Uint32() & 0xffffff}
		for i := range d.GID {
			d.GID[i] = byte(r.Uint32())
		}
		m := d.AppendMsg(nil)
		if len(m) != PingpongMsgSize {
			t.Fatalf("%d bytes", len(m))
		}
		got, err := ParsePingpongDest(m)
		if err != nil || got != d {
			t.Fatalf("%+v -> %s -> %+v, %v", d, quote(m), got, err)
		}
	}
}

func TestPerftestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 1000 {
		d := PerftestDest{LID: uint16(r.Uint32()), OutReads: uint16(r.Uint32()), QPN: r.Uint32() & 0xffffff,
			PSN: r.Uint32() & 0xffffff, RKey: r.Uint32(), VAddr: r.Uint64(), SRQN: r.Uint32()}
		for i := range d.GID {
			d.GID[i] = byte(r.Uint32())
		}
		for _, withGID := range []bool{true, false} {
			m := d.AppendMsg(nil, withGID)
			want, size := d, PerftestKeySize
			if !withGID {
				want.GID, size = [16]byte{}, PerftestKeySizeNoGID
			}
			if len(m) != size {
				t.Fatalf("%d bytes, want %d", len(m), size)
			}
			got, err := ParsePerftestDest(m)
			if err != nil || got != want {
				t.Fatalf("%+v -> %s -> %+v, %v", d, quote(m), got, err)
			}
		}
	}
}

func TestParseRejects(t *testing.T) {
	good := PingpongDest{QPN: 0x11, PSN: 0x4ea098, GID: gid4(clientIP)}.AppendMsg(nil)
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for name, m := range map[string][]byte{
		"short":       good[:51],
		"long":        append(append([]byte(nil), good...), 0),
		"no NUL":      mut(func(b []byte) []byte { b[51] = '0'; return b }),
		"separator":   mut(func(b []byte) []byte { b[4] = '-'; return b }),
		"not hex":     mut(func(b []byte) []byte { b[7] = 'g'; return b }),
		"GID not hex": mut(func(b []byte) []byte { b[40] = ' '; return b }),
		"garbage":     bytes.Repeat([]byte{0xff}, 52),
	} {
		if _, err := ParsePingpongDest(m); err == nil {
			t.Errorf("%s: %s accepted", name, quote(m))
		} else if !strings.Contains(err.Error(), "pingpong address") {
			t.Errorf("%s: unclear error %v", name, err)
		}
	}
	pgood := PerftestDest{OutReads: 1, QPN: 0x19}.AppendMsg(nil, true)
	pmut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), pgood...)) }
	for name, m := range map[string][]byte{
		"100 bytes":  pgood[:100],
		"no NUL":     pmut(func(b []byte) []byte { b[107] = ':'; return b }),
		"separator":  pmut(func(b []byte) []byte { b[9] = ';'; return b }),
		"not hex":    pmut(func(b []byte) []byte { b[60] = 'x'; return b }),
		"no GID NUL": PerftestDest{}.AppendMsg(nil, false)[:58],
	} {
		if _, err := ParsePerftestDest(m); err == nil {
			t.Errorf("%s: %s accepted", name, quote(m))
		}
	}
}

// pair connects a client and a server Conn over TCP on 127.0.0.1.
func pair(t *testing.T) (client, server *Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	acc := make(chan *Conn, 1)
	go func() {
		c, err := l.Accept(ctx)
		if err != nil {
			t.Error(err)
		}
		acc <- c
	}()
	client, err = Dial(ctx, "tcp4", "127.0.0.1", l.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatal(err)
	}
	server = <-acc
	if server == nil {
		t.FailNow()
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func TestPingpongLoopback(t *testing.T) {
	for _, n := range []int{1, SRQPingpongSlots} {
		c, s := pair(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		mk := func(base uint32, ip netip.Addr) []PingpongDest {
			ds := make([]PingpongDest, n)
			for i := range ds {
				if i < 16 { // srq_pingpong's default -q; the rest stay zero
					ds[i] = ppd(base+uint32(i), base<<8+uint32(i), ip)
				}
			}
			return ds
		}
		cl, sl := mk(0x11, clientIP), mk(0x40, serverIP)
		var wg sync.WaitGroup
		wg.Add(1)
		var connectedWith []PingpongDest
		go func() {
			defer wg.Done()
			got, err := s.PingpongServer(ctx, sl, func(r []PingpongDest) error { connectedWith = r; return nil })
			if err != nil {
				t.Error("server:", err)
			}
			if !equalDests(got, cl) || !equalDests(connectedWith, cl) {
				t.Errorf("server got %v", got[:1])
			}
		}()
		got, err := c.PingpongClient(ctx, cl)
		if err != nil {
			t.Fatal("client:", err)
		}
		if !equalDests(got, sl) {
			t.Errorf("client got %v", got[:1])
		}
		wg.Wait()
	}
}

func equalDests[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestPerftestLoopback runs the write_bw sequence for two QPs between our
// client and our server.
func TestPerftestLoopback(t *testing.T) {
	c, s := pair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qps := func(ip netip.Addr, base uint32) []PerftestDest {
		return []PerftestDest{ptd(1, base, base*3, base*5, uint64(base)<<32, ip), ptd(1, base+1, base*7, base*9, uint64(base+1)<<32, ip)}
	}
	cq, sq := qps(clientIP, 0x20), qps(serverIP, 0x30)
	rep := BWReport{Size: 65536, Iters: 5000, BWPeak: 1234.5, BWAvg: 1000.25, MsgRateAvg: 0.016}
	side := func(p *Perftest, mine, theirs []PerftestDest, client bool) error {
		if _, err := p.ExchangeVersions(ctx, PerftestVersion); err != nil {
			return err
		}
		page := int32(4096)
		if client {
			page = 65536
		}
		cb, _, err := p.ExchangeSysData(ctx, page, 64)
		if err != nil {
			return err
		}
		if max(cb, page) != 65536 {
			t.Errorf("cycle buffer %d", cb)
		}
		mtu := 3
		if client {
			mtu = 5
		}
		rm, err := p.ExchangeMTU(ctx, mtu)
		if err != nil {
			return err
		}
		if NegotiateMTU(mtu, rm) != 3 {
			t.Errorf("negotiated MTU %d", NegotiateMTU(mtu, rm))
		}
		for round := range 2 {
			for i := range mine {
				got, err := p.HandShake(ctx, mine[i], 0)
				if err != nil {
					return err
				}
				if got != theirs[i] {
					t.Errorf("round %d QP %d: got %+v want %+v", round, i, got, theirs[i])
				}
			}
		}
		for range 2 { // after RTR; after the test
			if _, err := p.HandShake(ctx, mine[0], 0); err != nil {
				return err
			}
		}
		got, err := p.ExchangeBWReports(ctx, rep, 0)
		if err != nil {
			return err
		}
		if got != rep {
			t.Errorf("report %+v", got)
		}
		return p.Close(ctx, mine[0], 0)
	}
	errc := make(chan error, 1)
	go func() { errc <- side(s.Perftest(false), sq, cq, false) }()
	if err := side(c.Perftest(true), cq, sq, true); err != nil {
		t.Fatal("client:", err)
	}
	if err := <-errc; err != nil {
		t.Fatal("server:", err)
	}
}

// misbehave connects our client to a server that does f, and returns
// the client's error.
func misbehave(t *testing.T, timeout time.Duration, f func(nc net.Conn), client func(ctx context.Context, c *Conn) error) error {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		nc, err := l.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		f(nc)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, "tcp4", "127.0.0.1", l.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Timeout = timeout
	start := time.Now()
	err = client(ctx, c)
	if d := time.Since(start); d > timeout+2*time.Second {
		t.Errorf("took %v with a %v timeout", d, timeout)
	}
	c.Close()
	<-done
	return err
}

func TestPeerMisbehaves(t *testing.T) {
	local := []PingpongDest{ppd(0x11, 1, clientIP)}
	pingpong := func(ctx context.Context, c *Conn) error { _, err := c.PingpongClient(ctx, local); return err }
	perftest := func(ctx context.Context, c *Conn) error {
		_, err := c.Perftest(true).ExchangeVersions(ctx, PerftestVersion)
		return err
	}
	readMsg := func(nc net.Conn, n int) {
		b := make([]byte, n)
		nc.SetDeadline(time.Now().Add(5 * time.Second))
		nc.Read(b)
	}
	for _, tc := range []struct {
		name   string
		server func(nc net.Conn)
		client func(ctx context.Context, c *Conn) error
		want   string
	}{
		// The peer reads our message first: closing with it unread would reset.
		{"closes at once", func(nc net.Conn) { readMsg(nc, 52) }, pingpong, "the peer closed the connection"},
		{"short message", func(nc net.Conn) { readMsg(nc, 52); nc.Write([]byte("0000:000011:bc")) }, pingpong,
			"reading the server's address (52 bytes): the peer closed the connection after 14 bytes (a short message)"},
		{"garbage", func(nc net.Conn) { readMsg(nc, 52); nc.Write(append(bytes.Repeat([]byte("x"), 51), 0)) }, pingpong,
			`the server's address: want LLLL:QQQQQQ:PPPPPP:<32 hex digits>: got "xxxx`},
		{"silent", func(nc net.Conn) { readMsg(nc, 52); time.Sleep(1500 * time.Millisecond) }, pingpong,
			"nothing from the peer within 300ms"},
		{"old perftest", func(nc net.Conn) { readMsg(nc, 16); nc.Write(append([]byte("5.60"), make([]byte, 12)...)) }, perftest,
			`the peer runs perftest version "5.60"; perftest only talks to 5.70 and later`},
		{"not perftest", func(nc net.Conn) { readMsg(nc, 16); nc.Write([]byte("HTTP/1.1 400 Bad")) }, perftest,
			"not a version number"},
		{"perftest against pingpong", func(nc net.Conn) {
			readMsg(nc, 52)
			nc.Write(PerftestDest{}.AppendMsg(nil, true))
		}, pingpong, "the server's address: no NUL at the end"},
		{"bad done", func(nc net.Conn) {
			c := NewConn(nc)
			c.read(context.Background(), make([]byte, 16), "", time.Second)
			nc.Write(append([]byte(PerftestVersion), make([]byte, 12)...))
			c.read(context.Background(), make([]byte, 108), "", time.Second)
			nc.Write(PerftestDest{}.AppendMsg(nil, true))
			nc.Write([]byte("dome\x00"))
		}, func(ctx context.Context, c *Conn) error {
			p := c.Perftest(true)
			if _, err := p.ExchangeVersions(ctx, PerftestVersion); err != nil {
				return err
			}
			return p.Close(ctx, PerftestDest{}, 0)
		}, `the peer's "done": want "done" and a NUL: got "dome" + 1 NUL`},
		{"bad MTU", func(nc net.Conn) { readMsg(nc, 2); nc.Write([]byte("x\x00")) }, func(ctx context.Context, c *Conn) error {
			_, err := c.Perftest(true).ExchangeMTU(ctx, 3)
			return err
		}, "the peer's MTU: want one decimal digit and a NUL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := misbehave(t, 300*time.Millisecond, tc.server, tc.client)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v\nwant an error containing %q", err, tc.want)
			}
		})
	}
}

func TestCancel(t *testing.T) {
	c, _ := pair(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := c.PingpongClient(ctx, []PingpongDest{{}})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "cancelled") {
		t.Fatalf("got %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("cancel took %v", d)
	}
	// A context deadline reads as a timeout of the exchange.
	c2, _ := pair(t)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	_, err = c2.Perftest(true).ExchangeVersions(ctx2, PerftestVersion)
	if !errors.Is(err, context.DeadlineExceeded) || !regexp.MustCompile(`nothing from the peer within (9\d|100)ms`).MatchString(err.Error()) {
		t.Fatalf("got %v", err)
	}
}

func TestAcceptCancel(t *testing.T) {
	l, err := Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := l.Accept(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
}

// Connect pairs a server on a free port (onListen says which) with a
// client, and words its failures as the kernel tools do.
func TestConnect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	port := make(chan int, 1)
	srv := make(chan error, 1)
	go func() {
		c, err := Connect(ctx, "tcp4", "", 0, func(a net.Addr) { port <- a.(*net.TCPAddr).Port })
		if err == nil {
			c.Close()
		}
		srv <- err
	}()
	p := <-port
	c, err := Connect(ctx, "tcp4", "127.0.0.1", p, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := <-srv; err != nil {
		t.Fatal(err)
	}
	// Nothing listens on p any more: the server accepted its one client.
	if _, err := Connect(ctx, "tcp4", "127.0.0.1", p, nil); err == nil || !strings.HasPrefix(err.Error(), fmt.Sprintf("Couldn't connect to 127.0.0.1:%d: ", p)) {
		t.Errorf("dial nobody: %v", err)
	}
	short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
	defer stop()
	if _, err := Connect(short, "tcp4", "", 0, nil); err == nil || !strings.HasPrefix(err.Error(), "accept() failed: ") {
		t.Errorf("accept nobody: %v", err)
	}
}

func FuzzParsePingpongDest(f *testing.F) {
	f.Add(PingpongDest{QPN: 0x11, PSN: 0xbc0717, GID: gid4(clientIP)}.AppendMsg(nil))
	f.Add([]byte("done\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParsePingpongDest(b)
		if err != nil {
			return
		}
		if enc := d.AppendMsg(nil); !bytes.Equal(enc, bytes.ToLower(b)) {
			t.Fatalf("%s parsed as %+v, encodes as %s", quote(b), d, quote(enc))
		}
	})
}

func FuzzParsePerftestDest(f *testing.F) {
	f.Add(ptd(1, 0x19, 0xe6d357, 0x7b9, 0x55dfe6721000, clientIP).AppendMsg(nil, true))
	f.Add(ptd(1, 0x19, 0xe6d357, 0x7b9, 0x55dfe6721000, clientIP).AppendMsg(nil, false))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParsePerftestDest(b)
		if err != nil {
			return
		}
		if enc := d.AppendMsg(nil, len(b) == PerftestKeySize); !bytes.Equal(enc, bytes.ToLower(b)) {
			t.Fatalf("%s parsed as %+v, encodes as %s", quote(b), d, quote(enc))
		}
	})
}
