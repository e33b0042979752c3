package mem

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkRemoteLookup measures responder lookups (Remote + Release) from
// b.RunParallel goroutines, with and without a concurrent send owner doing
// REG_MR / LOCAL_INV in a loop on another MR of the same table, beside the
// same workload on a global-RWMutex map (the obvious design this package
// avoids). Run with -cpu 2 (the project's machine): see the package report.
//
//	go test -run '^$' -bench RemoteLookup -cpu 2 ./transport/mem/
func BenchmarkRemoteLookup(b *testing.B) {
	const nMR = 64
	tab := NewTable(Config{})
	pd, _ := tab.AllocPD()
	mem := NewSliceBacking(make([]byte, 1<<16))
	keys := make([]uint32, nMR)
	for i := range keys {
		if i%2 == 0 {
			keys[i], _ = tab.RegMR(pd, mem, uint64(i)*1024, 1024, 0x100000+uint64(i)*1024, LocalWrite|RemoteRead|RemoteWrite)
		} else {
			k, _ := tab.AllocMR(pd, 4)
			k = NextKey(k)
			tab.FastReg(pd, k, []Page{{mem, uint64(i) * 1024}}, 1024, 0x200000, 1024, LocalWrite|RemoteRead|RemoteWrite)
			keys[i] = k
		}
	}
	churn, _ := tab.AllocMR(pd, 1)
	writer := func(stop <-chan struct{}, ops *atomic.Int64) {
		k := churn
		for {
			select {
			case <-stop:
				return
			default:
			}
			k = NextKey(k)
			if tab.FastReg(pd, k, []Page{{mem, 0}}, 4096, 0x300000, 4096, LocalWrite|RemoteRead) != nil ||
				tab.LocalInvalidate(pd, 1, k) != nil {
				panic("churn failed")
			}
			ops.Add(2)
		}
	}
	lookup := func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			k := keys[i%nMR]
			va := uint64(0x200000)
			if i%2 == 0 {
				va = 0x100000 + uint64(i%nMR)*1024
			}
			r, err := tab.Remote(pd, 1, k, va+64, 512, RemoteRead)
			if err != nil {
				panic(err)
			}
			r.Release()
			i++
		}
	}

	// The baseline: one RWMutex over a map, the same checks.
	type mrec struct {
		key          uint32
		pd           PD
		valid        bool
		access       Access
		iova, length uint64
		refs         atomic.Int64
	}
	var mu sync.RWMutex
	mp := map[uint32]*mrec{}
	for i, k := range keys {
		iova := uint64(0x200000)
		if i%2 == 0 {
			iova = 0x100000 + uint64(i)*1024
		}
		mp[KeyIndex(k)] = &mrec{key: k, pd: pd, valid: true, access: LocalWrite | RemoteRead | RemoteWrite, iova: iova, length: 1024}
	}
	mp[KeyIndex(churn)] = &mrec{key: churn, pd: pd}
	mapWriter := func(stop <-chan struct{}, ops *atomic.Int64) {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, v := range []bool{true, false} {
				mu.Lock()
				m := mp[KeyIndex(churn)]
				m.valid, m.key, m.iova, m.length = v, NextKey(m.key), 0x300000, 4096
				mu.Unlock()
			}
			ops.Add(2)
		}
	}
	mapLookup := func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			k := keys[i%nMR]
			va := uint64(0x200000)
			if i%2 == 0 {
				va = 0x100000 + uint64(i%nMR)*1024
			}
			mu.RLock()
			m := mp[KeyIndex(k)]
			if m == nil || m.key != k || !m.valid || m.pd != pd || m.access&RemoteRead == 0 || va+64 < m.iova || va+64+512 > m.iova+m.length {
				mu.RUnlock()
				panic("lookup failed")
			}
			m.refs.Add(1)
			mu.RUnlock()
			m.refs.Add(-1)
			i++
		}
	}

	run := func(name string, look func(*testing.PB), w func(<-chan struct{}, *atomic.Int64)) {
		b.Run(name, func(b *testing.B) {
			var ops atomic.Int64
			stop := make(chan struct{})
			done := make(chan struct{})
			if w != nil {
				go func() { w(stop, &ops); close(done) }()
			}
			start := time.Now()
			b.RunParallel(look)
			el := time.Since(start)
			if w != nil {
				close(stop)
				<-done
				b.ReportMetric(float64(ops.Load())/el.Seconds(), "writer-ops/s")
			}
			b.ReportMetric(float64(b.N)/el.Seconds(), "lookups/s")
		})
	}
	run("table/no-writer", lookup, nil)
	run("table/writer", lookup, writer)
	run("rwmutex-map/no-writer", mapLookup, nil)
	run("rwmutex-map/writer", mapLookup, mapWriter)
}
