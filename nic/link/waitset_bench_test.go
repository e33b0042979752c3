package link

import (
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkWaitSetWake measures what waking a sleeping datapath worker
// from another goroutine costs: the time from Wake to the sleeper's Wait
// returning, with the sleeper asleep in epoll_pwait2 for 50 us before each
// wake (a blocked thread, as a worker is). Beside it, in the same run, the
// same one-way wake of a goroutine parked on a channel (what a Go
// scheduler hand-off costs; the wait set's Wake is a thread's wake-up, the
// price of sleeping where the kernel can wake the worker directly for a
// frame or a doorbell). Medians, and the 99th percentile of the wake.
//
//	go test -run '^$' -bench WaitSetWake -benchtime 20000x ./nic/link/
func BenchmarkWaitSetWake(b *testing.B) {
	ws, err := NewWaitSet()
	if err != nil {
		b.Fatal(err)
	}
	defer ws.Close()
	wake := oneWay(b.N, func(woke func() bool) {
		for {
			if _, err := ws.Wait(-1, func(int, uint32) {}); err != nil || !woke() {
				return
			}
			// As worker.idle: the goroutine woke readied runs before
			// this thread blocks again with the P.
			runtime.Gosched()
		}
	}, ws.Wake)

	ch := make(chan struct{})
	park := oneWay(b.N, func(woke func() bool) {
		for range ch {
			if !woke() {
				return
			}
		}
	}, func() { ch <- struct{}{} })
	close(ch)
	b.ReportMetric(float64(wake[len(wake)/2]), "ns/wake")
	b.ReportMetric(float64(wake[len(wake)*99/100]), "ns/wake-p99")
	b.ReportMetric(float64(park[len(park)/2]), "ns/chan-wake")
}

// oneWay runs sleeper on a goroutine and n times: lets it fall asleep
// (50 us), stamps the time and calls wake; woke, called by the sleeper on
// each return, records the latency and says whether to go on. It returns
// the sorted latencies in nanoseconds.
func oneWay(n int, sleeper func(woke func() bool), wake func()) []int64 {
	var stamp atomic.Int64
	lat := make([]int64, 0, n)
	got := make(chan struct{})
	left := n
	go sleeper(func() bool {
		lat = append(lat, time.Now().UnixNano()-stamp.Load())
		left--
		got <- struct{}{}
		return left > 0
	})
	for range n {
		for t := time.Now(); time.Since(t) < 50*time.Microsecond; {
		}
		stamp.Store(time.Now().UnixNano())
		wake()
		<-got
	}
	slices.Sort(lat)
	return lat
}
