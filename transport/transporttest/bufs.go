package transporttest

// The simulated wire recycles what it carries: a frame's buffer (from the
// engine's Output.Alloc) and its Frame go back to the Net once the frame
// is delivered or lost, so that a benchmark of the engine on this harness
// counts the engine's allocations, not the wire's. A Frame and its bytes
// are therefore valid only during the Drop or Tap call that sees them;
// those copy what they keep.

// frameCap is the size of a recycled buffer: the largest RoCEv2 packet of
// a 4096 B path MTU (BTH, RETH/AtomicETH, ImmDt/IETH, payload, ICRC) with
// the IPv4 and UDP headers in front.
const frameCap = headroom + 4096 + 64

// alloc returns a buffer of n bytes, recycled when it fits frameCap.
func (n *Net) alloc(size int) []byte {
	if size > frameCap {
		return make([]byte, size)
	}
	if k := len(n.freeBufs); k > 0 {
		b := n.freeBufs[k-1]
		n.freeBufs[k-1] = nil
		n.freeBufs = n.freeBufs[:k-1]
		return b[:size]
	}
	return make([]byte, size, frameCap)
}

// newFrame returns a zeroed Frame, recycled if one is free.
func (n *Net) newFrame() *Frame {
	if k := len(n.freeFrames); k > 0 {
		f := n.freeFrames[k-1]
		n.freeFrames[k-1] = nil
		n.freeFrames = n.freeFrames[:k-1]
		return f
	}
	return &Frame{}
}

// release takes back a frame that has left the wire, and its buffer.
func (n *Net) release(f *Frame) {
	if cap(f.IP) == frameCap {
		n.freeBufs = append(n.freeBufs, f.IP[:0])
	}
	*f = Frame{}
	n.freeFrames = append(n.freeFrames, f)
}
