package main

import (
	"sync/atomic"

	"github.com/vrnic/vrnicd/nic/capture"
	"github.com/vrnic/vrnicd/nic/netstack"
	"github.com/vrnic/vrnicd/verbsock/server"
)

// teeTap is the netstack's one FrameTap: the --pcap file and the live
// capture hub (vrnicctl capture) each see every frame. Neither blocks: the
// pcap file is buffered, the hub drops for a full subscriber.
type teeTap struct {
	pcap *pcapTap
	hub  *capture.Hub
}

var _ netstack.FrameTap = teeTap{}

// WriteFrame implements netstack.FrameTap.
func (t teeTap) WriteFrame(frame []byte) error {
	t.hub.WriteFrame(frame)
	return t.pcap.WriteFrame(frame)
}

// withCapture adds the hub's counters (capture_frames,
// capture_dropped_frames) to the port's, for query_stats.
func withCapture(port server.CounterFunc, hub *capture.Hub) server.CounterFunc {
	return func(yield func(string, uint64)) {
		port(yield)
		hub.Each(yield)
	}
}

// captureGroup is who may capture besides root and the daemon's user: the
// socket's group (0 for the daemon's own). The signal loop sets it at
// start and on reload; client connections read it.
type captureGroup struct{ gid atomic.Int64 }

func (g *captureGroup) set(socketGID int) { g.gid.Store(int64(max(socketGID, 0))) }
func (g *captureGroup) get() int          { return int(g.gid.Load()) }
