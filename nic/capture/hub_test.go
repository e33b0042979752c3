package capture

import (
	"encoding/binary"
	"sync"
	"testing"

	"github.com/vrnic/vrnicd/transport/wire"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/rocetest"
)

// rcSend is the frame of a RoCEv2 RC SEND ONLY to dqpn with payload bytes.
func rcSend(dqpn uint32, v6 bool, payload int) []byte {
	return rocetest.BuildFrame(&rocetest.FrameSpec{V6: v6, Packet: wire.PacketFields{
		BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: dqpn}, Payload: make([]byte, payload)}})
}

func TestDestQP(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		if q, ok := DestQP(rcSend(0x123456, v6, 0)); !ok || q != 0x123456 {
			t.Errorf("v6=%v: %#x %v", v6, q, ok)
		}
	}
	other := rcSend(0x11, false, 0)
	binary.BigEndian.PutUint16(other[14+20+2:], 53) // DNS, not RoCEv2
	for _, f := range [][]byte{nil, make([]byte, 13), rcSend(0x11, false, 0)[:40], other} {
		if _, ok := DestQP(f); ok {
			t.Errorf("DestQP(%x) took a frame that is no RoCEv2 packet", f)
		}
	}
	pick := QPFilter(0x11, 0x12)
	if !pick(rcSend(0x12, true, 8)) || pick(rcSend(0x13, false, 8)) {
		t.Error("QPFilter")
	}
}

// A subscriber that never reads gets its queue's worth of frames and the
// rest are counted dropped; WriteFrame never waits for it, and another
// subscriber is not affected.
func TestSlowSubscriberDrops(t *testing.T) {
	var h Hub
	stuck, err := h.Subscribe(8, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	reader, err := h.Subscribe(1000, 60, QPFilter(0x11))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if err := h.WriteFrame(rcSend(uint32(0x11+i%2), false, 100)); err != nil {
			t.Fatal(err)
		}
	}
	if f, d := stuck.Stats(); f != 8 || d != 92 {
		t.Errorf("stuck subscriber: %d queued, %d dropped; want 8 and 92", f, d)
	}
	if f, d := reader.Stats(); f != 50 || d != 0 {
		t.Errorf("filtering subscriber: %d queued, %d dropped; want 50 and 0", f, d)
	}
	fr, _ := reader.Next()
	if len(fr.Data) != 60 || fr.Len != len(rcSend(0x11, false, 100)) || fr.Time.IsZero() {
		t.Errorf("snapped frame: %d bytes of %d at %v", len(fr.Data), fr.Len, fr.Time)
	}
	got := map[string]uint64{}
	h.Each(func(n string, v uint64) { got[n] = v })
	if got["capture_frames"] != 58 || got["capture_dropped_frames"] != 92 {
		t.Errorf("hub counters %v", got)
	}
	stuck.Close()
	stuck.Close()
	if h.Active() != 1 {
		t.Errorf("%d active after a Close", h.Active())
	}
	<-stuck.Done()
	h.WriteFrame(rcSend(0x11, false, 1))
	if f, _ := stuck.Stats(); f != 8 || stuck.Queued() != 8 {
		t.Errorf("after Close: %d queued, %d waiting; want the 8 queued before", f, stuck.Queued())
	}
	if _, ok := stuck.Next(); ok {
		t.Error("Next after Close returned a frame")
	}
}

func TestSubscriberLimit(t *testing.T) {
	h := Hub{MaxSubs: 2}
	a, _ := h.Subscribe(1, 0, nil)
	if _, err := h.Subscribe(1, 0, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Subscribe(1, 0, nil); err != ErrTooMany {
		t.Fatalf("third subscriber: %v", err)
	}
	a.Close()
	if _, err := h.Subscribe(1, 0, nil); err != nil {
		t.Fatalf("after a Close: %v", err)
	}
}

// Subscribers come and go while frames flow (run with -race).
func TestConcurrentSubscribe(t *testing.T) {
	var h Hub
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		f := rcSend(0x11, false, 64)
		for {
			select {
			case <-stop:
				return
			default:
				h.WriteFrame(f)
			}
		}
	}()
	for range 200 {
		s, err := h.Subscribe(4, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				if _, ok := s.Next(); !ok {
					return
				}
			}
		}()
		s.Close()
	}
	close(stop)
	wg.Wait()
}

// A subscriber's queue is bounded in bytes as well as in frames.
func TestByteBound(t *testing.T) {
	h := Hub{MaxBytes: 10000}
	s, _ := h.Subscribe(1000, 0, nil)
	big := rcSend(0x11, false, 3000)
	for range 10 {
		h.WriteFrame(big)
	}
	want := uint64(10000 / len(big))
	if f, d := s.Stats(); f != want || d != 10-want {
		t.Fatalf("%d-byte frames into 10000 bytes: %d queued, %d dropped; want %d and %d", len(big), f, d, want, 10-want)
	}
	s.Next()
	h.WriteFrame(big) // room for one again
	if f, _ := s.Stats(); f != want+1 {
		t.Fatalf("after one was read: %d queued in all, want %d", f, want+1)
	}
}
