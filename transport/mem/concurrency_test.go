package mem

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrent_LookupsDuringFastRegAndInvalidate runs responders looking
// keys up while one QP's send owner re-registers a fast-reg MR with a new
// key and fresh memory each round, and another binds and invalidates a type
// 2B window. Each registration's memory is filled with its key byte, and is
// scribbled over when "unmapped" (its last reference goes): a reader that
// ever sees another registration's bytes, or memory released under it,
// fails (the race detector also flags the scribble if it overlaps a read).
func TestConcurrent_LookupsDuringFastRegAndInvalidate(t *testing.T) {
	rounds := 3000
	if raceEnabled || testing.Short() {
		rounds = 800
	}
	tab := NewTable(Config{})
	pd, _ := tab.AllocPD()
	mr, _ := tab.AllocMR(pd, 2)
	const ps = 256
	var cur atomic.Uint32 // the fast-reg key currently registered (0: none yet)

	base := NewSliceBacking(make([]byte, 4096))
	user, _ := tab.RegMR(pd, base, 0, 4096, 0x100000, LocalWrite|MWBind)
	mw, _ := tab.AllocMW(pd, MWType2B)
	var curMW atomic.Uint32

	stop := make(chan struct{})
	var writers, readers sync.WaitGroup
	var lookups, hits, mwHits atomic.Int64
	errc := make(chan string, 8)
	report := func(s string) {
		select {
		case errc <- s:
		default:
		}
	}

	writers.Add(2)
	go func() { // send owner of QP 1: REG_MR / LOCAL_INV
		defer writers.Done()
		key := mr
		deadline := time.Now().Add(time.Second)
		for i := 0; i < rounds && time.Now().Before(deadline); i++ {
			key = NextKey(key)
			mem := make([]byte, 2*ps)
			for j := range mem {
				mem[j] = KeyByte(key)
			}
			b := NewSliceBacking(mem)
			b.OnRelease = func() {
				for j := range mem {
					mem[j] = 0xEE // "unmapped"
				}
			}
			if err := tab.FastReg(pd, key, []Page{{b, ps}, {b, 0}}, ps, 0x5000, 2*ps, LocalWrite|RemoteRead|RemoteWrite); err != nil {
				report("FastReg: " + err.Error())
				return
			}
			b.Close()
			cur.Store(key)
			runtime.Gosched() // let responders find it VALID
			if err := tab.LocalInvalidate(pd, 1, key); err != nil {
				report("LocalInvalidate: " + err.Error())
				return
			}
		}
	}()
	go func() { // send owner of QP 2: BIND_MW / LOCAL_INV of a 2B window
		defer writers.Done()
		key := mw
		deadline := time.Now().Add(time.Second)
		for i := 0; i < rounds && time.Now().Before(deadline); i++ {
			key = NextKey(key)
			if err := tab.BindMWWR(pd, 2, key, user, 0x100000+uint64(i%2)*512, 1024, RemoteRead); err != nil {
				report("BindMWWR: " + err.Error())
				return
			}
			curMW.Store(key)
			runtime.Gosched()
			if err := tab.LocalInvalidate(pd, 2, key); err != nil {
				report("LocalInvalidate MW: " + err.Error())
				return
			}
		}
	}()

	for g := range 3 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			buf := make([]byte, 2*ps)
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				k := cur.Load()
				if n%3 == g%3 {
					k = NextKey(k) // sometimes the key of the next registration
				}
				lookups.Add(1)
				r, err := tab.Remote(pd, 1, k, 0x5000, 2*ps, RemoteRead)
				if err == nil {
					hits.Add(1)
					r.ReadAt(buf, 0)
					for _, c := range buf {
						if c != KeyByte(k) {
							report("read another registration's (or released) memory through a valid key")
							r.Release()
							return
						}
					}
					// One load of cur: two could straddle the writer's store
					// of k itself and see k neither current nor next.
					if now := cur.Load(); now != k && KeyByte(now) != KeyByte(k)-1 && !r.Changed() {
						report("registration replaced but Ref.Changed is false")
					}
					r.Release()
				}
				wk := curMW.Load()
				if r, err := tab.Remote(pd, 2, wk, 0, 0, RemoteRead); err == nil {
					r.Release() // zero-length: no key check
				}
				if r, err := tab.Remote(pd, 2, wk, 0x100000+512+uint64(n%64)*8, 8, RemoteRead); err == nil {
					mwHits.Add(1)
					r.Release()
				}
			}
		}()
	}
	writers.Wait()
	close(stop)
	readers.Wait()
	close(errc)
	for e := range errc {
		t.Error(e)
	}
	t.Logf("%d lookups, %d hits on the fast-reg MR, %d on the window", lookups.Load(), hits.Load(), mwHits.Load())
	if in, _ := tab.Query(user); in.BoundMWs != 0 {
		t.Fatalf("window count %d after the last invalidate", in.BoundMWs)
	}
}
