package verbsock

// Live capture (op capture, PROTOCOL.md §4.2): the daemon answers with one
// end of a new SOCK_STREAM socket pair on which it writes a classic pcap
// stream (Ethernet, nanosecond timestamps) of the RoCEv2 frames it sends and
// receives. The client writes one byte on the stream once it holds the
// descriptor; the daemon starts only then, and stops when the client closes
// the stream, the verbsock connection ends, or the daemon stops. A reader
// that falls behind loses frames (counted by the daemon); it never slows the
// daemon.

// CaptureQP in CaptureReq.Flags: only frames whose BTH names QPN or its
// peer (the QP's dest_qpn when the capture starts) as destination.
const CaptureQP = 1

// Bounds of a capture request.
const (
	MaxCaptureDepth   = 65536 // frames the daemon queues for a reader
	MaxCaptureSnapLen = 65535
)

// CaptureReq asks for a capture stream. Depth 0 and SnapLen 0 take the
// daemon's defaults.
type CaptureReq struct {
	Flags   uint32
	QPN     uint32
	Depth   uint32
	SnapLen uint32
}

// CaptureResp is what the daemon granted.
type CaptureResp struct {
	Depth   uint32
	SnapLen uint32
}
