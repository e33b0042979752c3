package verbs

import (
	"net"
	"os"
	"syscall"

	"github.com/vrnic/vrnicd/verbsock"
)

// CaptureOptions select what a live capture carries.
type CaptureOptions struct {
	// FilterQP: only the frames to QP QPN and to its peer (the QP's
	// destination QPN when the capture starts).
	FilterQP bool
	QPN      uint32
	Depth    int // frames the daemon queues for this reader (0: its default)
	SnapLen  int // bytes kept of each frame (0: all)
}

// Capture is a live capture stream: a classic pcap stream (Ethernet,
// nanosecond timestamps) of the RoCEv2 frames the daemon sends and
// receives, from the moment Capture returns. Read it as it comes; frames
// the daemon could not queue while the reader was behind are lost (the
// daemon counts them). Close ends the capture.
type Capture struct {
	net.Conn
	Depth, SnapLen int // what the daemon granted
}

// Capture starts a live capture (op capture). The daemon allows it to
// root, its own user and the members of its socket's group.
func (d *Device) Capture(o CaptureOptions) (*Capture, error) {
	const op = verbsock.OpCapture
	req := &verbsock.CaptureReq{QPN: o.QPN, Depth: uint32(max(o.Depth, 0)), SnapLen: uint32(max(o.SnapLen, 0))}
	if o.FilterQP {
		req.Flags |= verbsock.CaptureQP
	}
	var r verbsock.CaptureResp
	fds, err := d.call(op, req, nil, &r)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fds[0]), "vrnic-capture")
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, verr(op, syscall.EPROTO, "capture stream: %v", err)
	}
	// The start byte: the daemon begins once it knows the descriptor arrived.
	if _, err := nc.Write([]byte{1}); err != nil {
		nc.Close()
		return nil, verr(op, syscall.EPIPE, "capture stream: %v", err)
	}
	return &Capture{Conn: nc, Depth: int(r.Depth), SnapLen: int(r.SnapLen)}, nil
}
