package transport

import (
	"unsafe"

	"github.com/vrnic/vrnicd/transport/mem"
)

// pow2 is the ring size sendSide.init, recvSide.init and SRQ.alloc round
// a depth up to.
func pow2(n uint32) uint64 {
	r := uint64(1)
	for r < uint64(n) {
		r <<= 1
	}
	return r
}

// QPHeapBytes is an upper bound of the private memory a QP of caps c costs
// the process that runs its engine: the send WQE ring with its SGE,
// inline and memory-reference backing (sendSide.init; a WQE holds at most
// one reference per SGE), the receive WQE ring with its SGEs
// (recvSide.init; none with an SRQ, whose cost is SRQHeapBytes) and the
// responder's RDMA READ/atomic resources (at most 255). It lets a server
// charge the client that asks for the caps, so its quota bounds what it
// costs the daemon (verbsock/server).
func QPHeapBytes(c QPCap, srq bool) uint64 {
	sq := pow2(max(c.MaxSendWR, 1))
	k := uint64(max(c.MaxSendSGE, 1))
	b := sq * (uint64(unsafe.Sizeof(swqe{})) + k*uint64(unsafe.Sizeof(SGE{})+unsafe.Sizeof(mem.Ref{})) + uint64(c.MaxInlineData))
	if !srq {
		b += recvRingBytes(c.MaxRecvWR, c.MaxRecvSGE)
	}
	b += 255 * uint64(unsafe.Sizeof(rdRes{}))
	b += uint64(unsafe.Sizeof(QP{}))
	return b
}

// SRQHeapBytes bounds an SRQ's private WQE ring (SRQ.alloc).
func SRQHeapBytes(maxWR, maxSGE uint32) uint64 {
	return recvRingBytes(maxWR, maxSGE) + uint64(unsafe.Sizeof(SRQ{}))
}

func recvRingBytes(wr, sge uint32) uint64 {
	n := pow2(max(wr, 1))
	k := uint64(max(sge, 1))
	return n * (uint64(unsafe.Sizeof(RecvWR{})+unsafe.Sizeof([]SGE{})) + k*uint64(unsafe.Sizeof(SGE{})))
}
