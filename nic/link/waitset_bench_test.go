package link

import (
	"testing"
	"time"
)

// BenchmarkWaitSetWake measures what waking a sleeping datapath worker
// from another goroutine costs: Wake, the sleeper's Wait returning, and
// its answer on a channel. Beside it, in the same run, the same round
// trip over two channels (the floor a goroutine hand-off costs).
//
//	go test -run '^$' -bench WaitSetWake -benchtime 20000x ./nic/link/
func BenchmarkWaitSetWake(b *testing.B) {
	ws, err := NewWaitSet()
	if err != nil {
		b.Fatal(err)
	}
	defer ws.Close()
	back, stop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(back)
		for {
			if _, err := ws.Wait(-1, func(int, uint32) {}); err != nil {
				return
			}
			select {
			case <-stop:
				return
			case back <- struct{}{}:
			}
		}
	}()
	b.ResetTimer()
	t0 := time.Now()
	for range b.N {
		ws.Wake()
		<-back
	}
	perWake := time.Since(t0) / time.Duration(b.N)
	b.StopTimer()
	close(stop)
	ws.Wake()
	<-back

	wake, answer := make(chan struct{}), make(chan struct{})
	go func() {
		for range wake {
			answer <- struct{}{}
		}
	}()
	t0 = time.Now()
	for range b.N {
		wake <- struct{}{}
		<-answer
	}
	perChan := time.Since(t0) / time.Duration(b.N)
	close(wake)
	b.ReportMetric(float64(perWake.Nanoseconds()), "ns/wake")
	b.ReportMetric(float64(perChan.Nanoseconds()), "ns/chan-round-trip")
}
