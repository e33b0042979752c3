package server_test

import (
	"bytes"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/vrnic/vrnicd/nic/capture"
	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/server"
)

func newCaptureServer(t *testing.T, hub *capture.Hub) *server.Server {
	t.Helper()
	h, _ := nictest.Pair(t, 1500)
	s, err := server.New(server.Config{Device: h.Dev, WriteTimeout: time.Second, Capture: hub})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// startCapture asks for a capture and returns the client's end, the start
// byte written.
func startCapture(t *testing.T, r *raw, req *verbsock.CaptureReq) (net.Conn, verbsock.CaptureResp) {
	t.Helper()
	var resp verbsock.CaptureResp
	fds, err := r.doFDs(verbsock.OpCapture, req, nil, &resp)
	if err != nil {
		t.Fatal(err)
	}
	if len(fds) != 1 {
		t.Fatalf("capture reply with %d descriptors", len(fds))
	}
	f := os.NewFile(uintptr(fds[0]), "capture")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	return c, resp
}

// The stream is a pcap file (Ethernet link type) of the frames the tap
// sees from the request on, each frame whole; a reader that stops reading
// makes frames drop, counted, and never makes the tap wait; closing the
// stream ends the subscription and leaks no descriptor.
func TestCaptureStream(t *testing.T) {
	hub := &capture.Hub{}
	s := newCaptureServer(t, hub)
	fdsBefore := openFDCount(t)
	r := dialRaw(t, s, true)
	c, resp := startCapture(t, r, &verbsock.CaptureReq{Depth: 32})
	if resp.Depth != 32 || resp.SnapLen != verbsock.MaxCaptureSnapLen {
		t.Fatalf("granted %+v", resp)
	}
	frames := [][]byte{bytes.Repeat([]byte{0xaa}, 60), bytes.Repeat([]byte{0xbb}, 1500), bytes.Repeat([]byte{0xcc}, 9000)}
	for _, f := range frames {
		hub.WriteFrame(f)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	pr, err := pcapgo.NewReader(c)
	if err != nil {
		t.Fatal(err)
	}
	if pr.LinkType() != layers.LinkTypeEthernet || pr.Snaplen() != verbsock.MaxCaptureSnapLen {
		t.Fatalf("pcap header: link type %v, snap length %d", pr.LinkType(), pr.Snaplen())
	}
	for i, want := range frames {
		data, ci, err := pr.ReadPacketData()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !bytes.Equal(data, want) || ci.Length != len(want) || ci.Timestamp.IsZero() {
			t.Fatalf("frame %d: %d bytes (length %d), want %d", i, len(data), ci.Length, len(want))
		}
	}

	// The reader stops; the tap goes on at full speed.
	for range 20000 {
		hub.WriteFrame(frames[1])
	}
	var dropped uint64
	hub.Each(func(n string, v uint64) {
		if n == "capture_dropped_frames" {
			dropped = v
		}
	})
	if dropped == 0 {
		t.Fatal("20000 frames to a reader that does not read: none dropped")
	}
	r.alive() // the request loop is not held up either

	c.Close()
	waitUntil(t, "the subscription to end after the client closed the stream", func() bool { return hub.Active() == 0 })
	r.c.Close()
	waitUntil(t, "the daemon's descriptors to be closed", func() bool { return openFDCount(t) <= fdsBefore })
}

// A capture requested but never started (no start byte), and one running
// when its verbsock connection goes, both end with the connection.
func TestCaptureEndsWithConnection(t *testing.T) {
	hub := &capture.Hub{}
	s := newCaptureServer(t, hub)
	r := dialRaw(t, s, true)
	var resp verbsock.CaptureResp
	fds, err := r.doFDs(verbsock.OpCapture, &verbsock.CaptureReq{}, nil, &resp)
	if err != nil {
		t.Fatal(err)
	}
	defer verbsock.CloseFDs(fds)
	r2 := dialRaw(t, s, true)
	c, _ := startCapture(t, r2, &verbsock.CaptureReq{})
	if hub.Active() != 2 {
		t.Fatalf("%d subscribers, want 2", hub.Active())
	}
	r.c.Close()
	r2.c.Close()
	waitUntil(t, "both captures to end", func() bool { return hub.Active() == 0 })
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("stream after the connection went: %v, want EOF", err)
	}
}

func TestCaptureErrors(t *testing.T) {
	hub := &capture.Hub{MaxSubs: 1}
	s := newCaptureServer(t, hub)
	r := dialRaw(t, s, true)
	for _, tt := range []struct {
		name  string
		req   verbsock.CaptureReq
		errno syscall.Errno
	}{
		{"unknown flag", verbsock.CaptureReq{Flags: 2}, syscall.EINVAL},
		{"depth", verbsock.CaptureReq{Depth: verbsock.MaxCaptureDepth + 1}, syscall.EINVAL},
		{"snap length", verbsock.CaptureReq{SnapLen: verbsock.MaxCaptureSnapLen + 1}, syscall.EINVAL},
		{"no such QP", verbsock.CaptureReq{Flags: verbsock.CaptureQP, QPN: 0x999}, syscall.ENOENT},
	} {
		_, err := r.doFDs(verbsock.OpCapture, &tt.req, nil, nil)
		wantErrno(t, tt.name, err, tt.errno)
	}
	startCapture(t, r, &verbsock.CaptureReq{})
	_, err := r.doFDs(verbsock.OpCapture, &verbsock.CaptureReq{}, nil, nil)
	wantErrno(t, "a capture beyond the hub's limit", err, syscall.EBUSY)

	plain, _ := newServer(t, verbsock.Limits{})
	_, err = dialRaw(t, plain, true).doFDs(verbsock.OpCapture, &verbsock.CaptureReq{}, nil, nil)
	wantErrno(t, "capture on a server without a hub", err, syscall.EOPNOTSUPP)
	r.alive()
}
