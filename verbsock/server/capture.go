package server

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"golang.org/x/sys/unix"

	"github.com/vrnic/vrnicd/nic/capture"
	"github.com/vrnic/vrnicd/verbsock"
)

// Live capture (op capture). The daemon makes a SOCK_STREAM socket pair,
// hands one end to the client and writes a pcap stream on the other, which
// no client ever holds: its writes park only the stream's goroutine, never
// the datapath (the hub's queue takes the frames, and drops them when full)
// nor the request loop.
const (
	captureHandshake = 10 * time.Second // for the client's start byte
	captureSndBuf    = 1 << 20          // socket buffer of the daemon's end
	captureBufSize   = 64 << 10         // pcap bytes gathered per write
)

// capture answers op capture: checks who asks, subscribes to the hub and
// starts the stream's goroutine; the reply carries the client's end.
func (c *conn) capture(r *verbsock.CaptureReq) (any, []int, error) {
	hub := c.s.cfg.Capture
	if hub == nil {
		return nil, nil, errf(syscall.EOPNOTSUPP, "capture: this daemon serves no live capture")
	}
	if err := c.mayCapture(); err != nil {
		return nil, nil, err
	}
	switch {
	case r.Flags&^verbsock.CaptureQP != 0:
		return nil, nil, errf(syscall.EINVAL, "capture: unknown flags %#x", r.Flags&^verbsock.CaptureQP)
	case r.Depth > verbsock.MaxCaptureDepth:
		return nil, nil, errf(syscall.EINVAL, "capture: depth %d (at most %d frames)", r.Depth, verbsock.MaxCaptureDepth)
	case r.SnapLen > verbsock.MaxCaptureSnapLen:
		return nil, nil, errf(syscall.EINVAL, "capture: snap length %d (at most %d)", r.SnapLen, verbsock.MaxCaptureSnapLen)
	}
	depth, snap := int(r.Depth), int(r.SnapLen)
	if depth == 0 {
		depth = capture.DefaultDepth
	}
	if snap == 0 {
		snap = verbsock.MaxCaptureSnapLen
	}
	filter, err := c.captureFilter(r)
	if err != nil {
		return nil, nil, err
	}
	sub, err := hub.Subscribe(depth, snap, filter)
	if errors.Is(err, capture.ErrTooMany) {
		return nil, nil, errf(syscall.EBUSY, "capture: as many live captures as the daemon allows are running")
	} else if err != nil {
		return nil, nil, err
	}
	ours, theirs, err := captureSocketpair()
	if err != nil {
		sub.Close()
		return nil, nil, err
	}
	c.wg.Add(1)
	go c.streamCapture(sub, ours, snap) // theirs is closed once sent (conn.handle)
	return &verbsock.CaptureResp{Depth: uint32(depth), SnapLen: uint32(snap)}, []int{theirs}, nil
}

// mayCapture: root, the daemon's user, and members of CaptureGID (the
// socket's group; 0: the daemon's) may watch every client's traffic.
func (c *conn) mayCapture() error {
	cred, err := verbsock.PeerCred(c.sock.UnixConn())
	if err != nil {
		return err
	}
	gid := 0
	if f := c.s.cfg.CaptureGID; f != nil {
		gid = f()
	}
	if gid <= 0 {
		gid = os.Getegid()
	}
	if cred.Uid == 0 || int(cred.Uid) == os.Geteuid() || int(cred.Gid) == gid || inGroup(cred.Pid, gid) {
		return nil
	}
	return errf(syscall.EPERM, "capture: uid %d is neither root nor in group %d", cred.Uid, gid)
}

// inGroup reads a process's supplementary groups (SO_PEERCRED has only the
// primary one).
func inGroup(pid int32, gid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if g, ok := bytes.CutPrefix(line, []byte("Groups:")); ok {
			for _, f := range bytes.Fields(g) {
				if n, err := strconv.Atoi(string(f)); err == nil && n == gid {
					return true
				}
			}
		}
	}
	return false
}

// captureFilter: with CaptureQP, the frames to the QP and to its peer.
func (c *conn) captureFilter(r *verbsock.CaptureReq) (func([]byte) bool, error) {
	if r.Flags&verbsock.CaptureQP == 0 {
		return nil, nil
	}
	ad, err := c.adminDevice(verbsock.OpCapture)
	if err != nil {
		return nil, err
	}
	q, ok := ad.QP(r.QPN)
	if !ok {
		return nil, errf(syscall.ENOENT, "capture: no QP %#x", r.QPN)
	}
	qpns := []uint32{r.QPN}
	if peer := q.Info().DestQPN; peer != 0 && peer != r.QPN {
		qpns = append(qpns, peer)
	}
	return capture.QPFilter(qpns...), nil
}

// captureSocketpair returns the daemon's end as a net.Conn (non-blocking,
// on the runtime poller) and the client's end as a descriptor.
func captureSocketpair() (net.Conn, int, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, -1, errf(syscall.ENOMEM, "capture: socketpair: %v", err)
	}
	_ = unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUF, captureSndBuf)
	f := os.NewFile(uintptr(fds[0]), "vrnic-capture")
	nc, err := net.FileConn(f) // dups fds[0] and makes it non-blocking
	f.Close()
	if err != nil {
		unix.Close(fds[1])
		return nil, -1, errf(syscall.ENOMEM, "capture: %v", err)
	}
	return nc, fds[1], nil
}

// streamCapture runs one capture: it waits for the client's start byte
// (proof that the reply, and with it the client's end, was delivered; the
// daemon's copy of that end is closed once the reply is written, so the
// client's close is seen as EOF), then writes the pcap header and every frame the hub queues,
// flushing whenever the queue is empty. It ends when the client closes the
// stream, the verbsock connection ends, or a write fails.
func (c *conn) streamCapture(sub *capture.Sub, nc net.Conn, snap int) {
	defer c.wg.Done()
	defer sub.Close()
	gone := make(chan struct{}) // the client closed its end
	quit := make(chan struct{})
	defer close(quit)
	go func() { // ends the writes when the client or the connection goes
		select {
		case <-c.done:
		case <-gone:
		case <-quit:
		}
		nc.Close()
		sub.Close() // ends writeCapture when no frame comes
	}()

	var start [1]byte
	nc.SetReadDeadline(time.Now().Add(captureHandshake))
	if _, err := nc.Read(start[:]); err != nil {
		c.log.Debug("live capture not started", "err", err)
		return
	}
	nc.SetReadDeadline(time.Time{})
	go func() { // the client writes nothing more: a read returns at its close
		var b [64]byte
		for {
			if _, err := nc.Read(b[:]); err != nil {
				close(gone)
				return
			}
		}
	}()
	c.log.Info("live capture started", "snaplen", snap)
	err := writeCapture(sub, nc, snap)
	frames, dropped := sub.Stats()
	c.log.Info("live capture ended", "frames", frames, "dropped", dropped, "reason", captureEnd(err))
}

func captureEnd(err error) string {
	if err == nil || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.EPIPE) {
		return "closed"
	}
	return err.Error()
}

// writeCapture writes the pcap stream until the subscription ends or a
// write fails.
func writeCapture(sub *capture.Sub, w net.Conn, snap int) error {
	bw := bufio.NewWriterSize(w, captureBufSize)
	pw := pcapgo.NewWriterNanos(bw)
	if err := pw.WriteFileHeader(uint32(snap), layers.LinkTypeEthernet); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	for {
		f, ok := sub.Next()
		if !ok {
			return bw.Flush()
		}
		ci := gopacket.CaptureInfo{Timestamp: f.Time, CaptureLength: len(f.Data), Length: f.Len}
		if err := pw.WritePacket(ci, f.Data); err != nil {
			return err
		}
		if sub.Queued() == 0 {
			if err := bw.Flush(); err != nil {
				return err
			}
		}
	}
}
