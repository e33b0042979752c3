package transport_test

import (
	"testing"

	"github.com/vrnic/vrnicd/transport"
	tt "github.com/vrnic/vrnicd/transport/transporttest"
)

// benchEngine runs b.N operations of one kind between two engines over the
// simulated link (no faults, ICRC sealed and checked on every packet), 32
// outstanding, and reports operations and bytes per second.
func benchEngine(b *testing.B, op transport.WROpcode, size int, mtu transport.MTU) {
	n := tt.NewNet(1)
	a, z, err := tt.Connect(n.AddNode(), n.AddNode(), tt.Options{MTU: mtu, Cap: transport.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		b.Fatal(err)
	}
	src, _ := a.RegBuffer(size, 0x1000_0000, rw)
	dst, _ := z.RegBuffer(size, 0x2000_0000, rw)
	wr := transport.SendWR{Opcode: op, SGL: []transport.SGE{src.SGE(0, size)}, RemoteAddr: dst.Addr, RKey: dst.RKey, Flags: transport.SendSignaled}
	recv := transport.RecvWR{SGL: []transport.SGE{dst.SGE(0, size)}}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	posted, done := 0, 0
	wcs := make([]transport.WC, 64)
	for done < b.N {
		for posted < b.N && posted-done < 32 {
			if op == transport.WRSend {
				if err := z.PostRecv(&recv); err != nil {
					b.Fatal(err)
				}
			}
			if err := a.PostSend(&wr); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		if !n.Step() {
			n.RunQPs()
		}
		n.RunQPs()
		done += a.SendCQ.Poll(wcs)
		z.RecvCQ.Poll(wcs)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkEngineRCWrite64K and BenchmarkEngineRCSend64 are the engine
// alone; BenchmarkMemcpy64K and BenchmarkMemcpy64 copy the same bytes once,
// the floor any data path pays.
func BenchmarkEngineRCWrite64K(b *testing.B) {
	benchEngine(b, transport.WRRDMAWrite, 64<<10, transport.MTU4096)
}

func BenchmarkEngineRCSend64(b *testing.B) { benchEngine(b, transport.WRSend, 64, transport.MTU1024) }

func benchMemcpy(b *testing.B, n int) {
	src, dst := make([]byte, n), make([]byte, n)
	b.SetBytes(int64(n))
	for b.Loop() {
		copy(dst, src)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

func BenchmarkMemcpy64K(b *testing.B) { benchMemcpy(b, 64<<10) }
func BenchmarkMemcpy64(b *testing.B)  { benchMemcpy(b, 64) }
