package nic_test

import (
	"github.com/vrnic/vrnicd/nic"
	"runtime"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link"
	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/transport"
)

// BenchmarkDeviceRCWrite64K is RC WRITE of 64 KiB between two devices over
// an in-memory link (MTU 9000, path MTU 4096), through the real owner
// goroutines and netstack; BenchmarkPipeFrames4K is the same link moving
// prebuilt 4 KiB frames, the ceiling the device can reach on it.
func BenchmarkDeviceRCWrite64K(b *testing.B) {
	ha, hb := nictest.Pair(b, 9000)
	a := newSide(b, ha, transport.QPTypeRC, 0x10000000)
	z := newSide(b, hb, transport.QPTypeRC, 0x20000000)
	if err := nictest.ConnectRC(a.qp, z.qp, ha, hb, transport.QPTypeRC, transport.MTU4096); err != nil {
		b.Fatal(err)
	}
	const size = 64 << 10
	wr := transport.SendWR{Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled, SGL: a.sge(0, size), RemoteAddr: z.addr, RKey: z.key}
	b.SetBytes(size)
	b.ResetTimer()
	posted, done := 0, 0
	wcs := make([]transport.WC, 64)
	for done < b.N {
		for posted < b.N && posted-done < 32 {
			if err := a.qp.PostSend(&wr); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		k := a.scq.Poll(wcs)
		for _, wc := range wcs[:k] {
			if wc.Status != transport.WCSuccess {
				b.Fatal(wc.Status)
			}
		}
		if k == 0 {
			time.Sleep(20 * time.Microsecond)
		}
		done += k
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

func BenchmarkPipeFrames4K(b *testing.B) {
	ea, eb := link.Pipe(9000)
	const size = 4096 + 62 + 16
	frame := make([]byte, size)
	b.SetBytes(4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		bufs := make([][]byte, 64)
		for i := range bufs {
			bufs[i] = make([]byte, 9100)
		}
		sizes := make([]int, 64)
		got := 0
		for got < b.N {
			n, err := eb.Read(bufs, sizes, 0)
			if err != nil {
				return
			}
			got += n
		}
	}()
	batch := make([][]byte, 16)
	for i := range batch {
		batch[i] = frame
	}
	b.ResetTimer()
	for sent := 0; sent < b.N; {
		k := min(len(batch), b.N-sent)
		n, err := ea.Write(batch[:k], 0)
		if err != nil {
			b.Fatal(err)
		}
		sent += n
	}
	<-done
}

// BenchmarkIdleQPMemory reports what an idle RC QP at perftest's default
// caps (ib_write_bw: tx_depth 128, rx_depth 512, one SGE each way, no
// inline) costs the device's heap, over 1000 of them, beside the caps'
// own measure: the bytes of the WQEs those depths can hold.
//
//	go test -run '^$' -bench IdleQPMemory ./nic/
func BenchmarkIdleQPMemory(b *testing.B) {
	const n = 1000
	ha, _ := nictest.Pair(b, 9000)
	pd, err := ha.Dev.Mem().AllocPD()
	if err != nil {
		b.Fatal(err)
	}
	cq := transport.NewMemCQ(16, nil)
	caps := transport.QPCap{MaxSendWR: 128, MaxRecvWR: 512, MaxSendSGE: 1, MaxRecvSGE: 1}
	var perQP float64
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		qps := make([]*nic.QP, 0, n)
		for range n {
			q, err := ha.Dev.CreateQP(nic.QPConfig{Type: transport.QPTypeRC, PD: pd, SendCQ: cq, RecvCQ: cq, Cap: caps})
			if err != nil {
				b.Fatal(err)
			}
			qps = append(qps, q)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perQP = float64(after.HeapAlloc-before.HeapAlloc) / n
		for _, q := range qps {
			q.Destroy()
		}
	}
	b.ReportMetric(perQP, "heap-bytes/QP")
	b.ReportMetric(float64((caps.MaxSendWR+caps.MaxRecvWR)*16), "sge-bytes/QP")
}
