package link

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// RawStats is what the kernel counted for a Raw's socket since OpenRaw
// (PACKET_STATISTICS): frames that passed the filter, and of those the
// ones dropped because the receive buffer or ring was full.
type RawStats struct {
	// Packets the socket received, dropped ones included.
	Packets uint64
	// Drops: frames lost for want of room (ring or receive buffer full).
	Drops uint64
	// Freezes (TPACKET_V3 only): times the ring filled and the kernel
	// stopped filling it until the reader gave a block back.
	Freezes uint64
	// Truncated (TPACKET_V2 only): frames longer than the ring's
	// MaxPacket, which arrived cut and were dropped by the reader.
	Truncated uint64
}

// Stats returns the socket's counters. The kernel resets its own on each
// read; Raw keeps the running totals. Safe from any goroutine.
func (r *Raw) Stats() (RawStats, error) {
	r.statsMu.Lock()
	defer r.statsMu.Unlock()
	var err error
	cerr := r.rc.Control(func(fd uintptr) {
		if v3, ok := r.ring.(*v3Ring); ok && v3 != nil {
			var s *unix.TpacketStatsV3
			if s, err = unix.GetsockoptTpacketStatsV3(int(fd), unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
				r.stats.Packets += uint64(s.Packets)
				r.stats.Drops += uint64(s.Drops)
				r.stats.Freezes += uint64(s.Freeze_q_cnt)
			}
			return
		}
		var s *unix.TpacketStats
		if s, err = unix.GetsockoptTpacketStats(int(fd), unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
			r.stats.Packets += uint64(s.Packets)
			r.stats.Drops += uint64(s.Drops)
		}
	})
	if v2, ok := r.ring.(*v2Ring); ok && v2 != nil {
		r.stats.Truncated = v2.truncated.Load()
	}
	if cerr != nil {
		return r.stats, r.fdErr(cerr)
	}
	if err != nil {
		return r.stats, fmt.Errorf("link %s: PACKET_STATISTICS: %w", r.name, err)
	}
	return r.stats, nil
}

// RingSlots is the number of frames the TPACKET_V2 receive ring holds (0
// without one, or with TPACKET_V3, whose blocks hold frames packed by size).
func (r *Raw) RingSlots() int {
	if v2, ok := r.ring.(*v2Ring); ok && v2 != nil {
		return v2.frameNr
	}
	return 0
}
