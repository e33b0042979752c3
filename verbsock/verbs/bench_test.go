package verbs_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/mem"

	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// BenchmarkSendPoll measures a 64-byte RC SEND through the daemon between
// two QPs of one device (loopback): PostSend, then PollCQ until both the
// send and the receive completion are in, then repost the receive. Beside
// it, in the same run, the round trip of one request on the verbsock Unix
// socket (query_port) and of a bare 64-byte SOCK_SEQPACKET ping-pong (what
// the data path would cost if it went through the socket), and the same
// exchange on the same device without verbsock (device-only: the floor).
// Client and daemon share this process's Ps here; the client spins on Poll.
//
//	go test -run '^$' -bench SendPoll -benchtime 20000x ./verbsock/verbs/
func BenchmarkSendPoll(b *testing.B) {
	for _, depth := range []int{1, 16} {
		name := "serial"
		if depth > 1 {
			name = "pipelined16"
		}
		b.Run(name, func(b *testing.B) { benchSendPoll(b, depth) })
	}
}

func benchSendPoll(b *testing.B, depth int) {
	e := newEnv(b, verbsock.Limits{})
	d := e.client()
	a := newSide(b, d, e.host, verbs.QPTypeRC, nil, nil)
	r := newSide(b, d, e.host, verbs.QPTypeRC, nil, nil)
	connect(b, a, r)
	const msg = 64
	for i := range 128 {
		if err := r.qp.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{r.mr.SGE(uint64(i)*msg, msg)}}); err != nil {
			b.Fatal(err)
		}
	}
	wcs := make([]verbs.WC, 32)
	send := verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, msg)}}
	b.ResetTimer()
	start := time.Now()
	for done := 0; done < b.N; {
		k := min(depth, b.N-done)
		for range k {
			if err := a.qp.PostSend(send); err != nil {
				b.Fatal(err)
			}
		}
		for got := 0; got < k; {
			got += a.scq.Poll(wcs[:k-got])
		}
		for got := 0; got < k; {
			n := r.rcq.Poll(wcs[:k-got])
			for _, wc := range wcs[:n] {
				if wc.Status != verbs.WCSuccess {
					b.Fatalf("receive %v", wc.Status)
				}
				if err := r.qp.PostRecv(verbs.RecvWR{ID: wc.WRID, SGL: []verbs.SGE{r.mr.SGE(wc.WRID*msg, msg)}}); err != nil {
					b.Fatal(err)
				}
			}
			got += n
		}
		done += k
	}
	perOp := time.Since(start) / time.Duration(b.N)
	b.StopTimer()

	// Baselines in the same run, on the same machine state.
	n := min(b.N, 20000)
	t0 := time.Now()
	for range n {
		if _, err := d.QueryPort(1); err != nil {
			b.Fatal(err)
		}
	}
	rtt := time.Since(t0) / time.Duration(n)
	raw := seqpacketPingPong(b, n, msg)
	dev := deviceOnly(b, e, n, depth, msg)
	b.ReportMetric(float64(perOp.Nanoseconds()), "ns/send+poll")
	b.ReportMetric(float64(dev.Nanoseconds()), "ns/device-only")
	b.ReportMetric(float64(rtt.Nanoseconds()), "ns/verbsock-rtt")
	b.ReportMetric(float64(raw.Nanoseconds()), "ns/seqpacket-rtt")
	b.ReportMetric(float64(rtt)/float64(perOp), "x-faster-than-socket")
}

// deviceOnly is the same exchange on the same device without verbsock:
// nic.QP.PostSend/PostRecv (a call to the owner goroutine) and in-memory
// CQs. It is the device's own cost, the floor under the verbsock figure.
func deviceOnly(b *testing.B, e *env, n, depth, msg int) time.Duration {
	dev := e.host.Dev
	pd, err := dev.Mem().AllocPD()
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 1<<16)
	key, err := dev.Mem().RegMR(pd, mem.NewSliceBacking(buf), 0, uint64(len(buf)), 0, mem.LocalWrite)
	if err != nil {
		b.Fatal(err)
	}
	mk := func() (*nic.QP, *transport.MemCQ, *transport.MemCQ) {
		scq, rcq := transport.NewMemCQ(1024, nil), transport.NewMemCQ(1024, nil)
		q, err := dev.CreateQP(nic.QPConfig{Type: transport.QPTypeRC, PD: pd, SendCQ: scq, RecvCQ: rcq,
			Cap: transport.QPCap{MaxSendWR: 128, MaxRecvWR: 128, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			b.Fatal(err)
		}
		return q, scq, rcq
	}
	qa, scq, _ := mk()
	qb, _, rcq := mk()
	defer qa.Destroy()
	defer qb.Destroy()
	if err := nictest.ConnectRC(qa, qb, e.host, e.host, transport.QPTypeRC, transport.MTU1024); err != nil {
		b.Fatal(err)
	}
	sge := []transport.SGE{{Addr: 0, Length: uint32(msg), LKey: key}}
	for i := range 128 {
		if err := qb.PostRecv(&transport.RecvWR{ID: uint64(i), SGL: sge}); err != nil {
			b.Fatal(err)
		}
	}
	wcs := make([]transport.WC, 32)
	t0 := time.Now()
	for done := 0; done < n; {
		k := min(depth, n-done)
		for range k {
			if err := qa.PostSend(&transport.SendWR{Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: sge}); err != nil {
				b.Fatal(err)
			}
		}
		for got := 0; got < k; {
			m := scq.Poll(wcs[:k-got])
			if m == 0 {
				runtime.Gosched()
			}
			got += m
		}
		for got := 0; got < k; {
			m := rcq.Poll(wcs[:k-got])
			if m == 0 {
				runtime.Gosched()
			}
			for _, wc := range wcs[:m] {
				if err := qb.PostRecv(&transport.RecvWR{ID: wc.WRID, SGL: sge}); err != nil {
					b.Fatal(err)
				}
			}
			got += m
		}
		done += k
	}
	return time.Since(t0) / time.Duration(n)
}

// seqpacketPingPong is the round trip of msg bytes over a bare
// SOCK_SEQPACKET socketpair with an echoing goroutine.
func seqpacketPingPong(b *testing.B, n, msg int) time.Duration {
	x, y, err := verbsock.Socketpair()
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	defer y.Close()
	go func() {
		buf := make([]byte, msg)
		for {
			k, err := y.Read(buf)
			if err != nil {
				return
			}
			if _, err := y.Write(buf[:k]); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, msg)
	t0 := time.Now()
	for range n {
		if _, err := x.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := x.Read(buf); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(t0) / time.Duration(n)
}
