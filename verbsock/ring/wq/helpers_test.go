package wq

import (
	"sync/atomic"
	"unsafe"

	"github.com/vrnic/vrnicd/verbsock/ring"
)

// index is the ring header's index word named in ring.CLayout (a hostile
// producer's view of the header: the tests write it as a client could).
func index(m []byte, name string) *uint64 {
	for _, c := range ring.CLayout() {
		if c.Name == name {
			return (*uint64)(unsafe.Pointer(&m[c.Value]))
		}
	}
	panic("no ring layout constant " + name)
}

func loadCons(m []byte) uint64     { return atomic.LoadUint64(index(m, "RING_OFF_CONS")) }
func storeProd(m []byte, v uint64) { atomic.StoreUint64(index(m, "RING_OFF_PROD"), v) }
func storeCons(m []byte, v uint64) { atomic.StoreUint64(index(m, "RING_OFF_CONS"), v) }
