package link_test

import (
	"bytes"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link"
	"github.com/vrnic/vrnicd/nic/link/linktest"
)

func TestRawPollerRecvmmsg(t *testing.T) {
	linktest.RequireRoot(t)
	var rx *link.Raw
	tx, ma, mb := rawPair(t, func(ifname string) (err error) {
		rx, err = link.OpenRaw(link.RawConfig{Interface: ifname, Filter: link.RoCEFilter()})
		return err
	})
	defer rx.Close()
	bufs, sizes := [][]byte{make([]byte, 1514)}, []int{0}
	if ok, err := rx.WaitReadable(10 * time.Millisecond); ok || err != nil {
		t.Fatalf("WaitReadable with nothing queued = %v, %v", ok, err)
	}
	if n, err := rx.TryRead(bufs, sizes, 0); n != 0 || err != nil {
		t.Fatalf("TryRead with nothing queued = %d, %v", n, err)
	}
	f1 := addressed(rocePacket(false, 5, 3, 1, 10), mb, ma)
	f2 := addressed(rocePacket(false, 5, 3, 2, 10), mb, ma)
	// f1 is sent again every 300 ms until it is readable (a loaded host's
	// backlog can drop it).
	ready := false
	for round := 0; !ready && round < 15; round++ {
		if _, err := tx.Write([][]byte{f1}, 0); err != nil {
			t.Fatal(err)
		}
		var err error
		if ready, err = rx.WaitReadable(300 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if !ready {
		t.Fatal("WaitReadable never reported the frame sent")
	}
	if n, err := rx.TryRead(bufs, sizes, 0); n != 1 || err != nil || !bytes.Equal(bufs[0][:sizes[0]], f1) {
		t.Fatalf("TryRead = %d, %v", n, err)
	}
	for { // copies of f1 from later rounds
		if n, _ := rx.TryRead(bufs, sizes, 0); n == 0 {
			break
		}
	}
	rx.Wake() // leaves a deadline in the past behind
	done := make(chan error, 1)
	go func() {
		n, err := rx.Read(bufs, sizes, 0)
		if err == nil && (n < 1 || !bytes.Equal(bufs[0][:sizes[0]], f2)) {
			err = errors.New("read another frame")
		}
		done <- err
	}()
	tick := time.NewTicker(300 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(5 * time.Second)
	for {
		if _, err := tx.Write([][]byte{f2}, 0); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Read after Wake: %v", err)
			}
			return
		case <-timeout:
			t.Fatal("Read after Wake blocked")
		case <-tick.C:
		}
	}
}

func TestTAPPoller(t *testing.T) {
	linktest.RequireRoot(t)
	ns := linktest.NewNS(t, "tpp")
	name := linktest.UniqueName("tp")
	var tap *link.TAP
	var kside *link.Raw
	if err := ns.Do(func() (err error) {
		if tap, err = link.OpenTAP(link.TAPConfig{Name: name}); err != nil {
			return err
		}
		kside, err = link.OpenRaw(link.RawConfig{Interface: name})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	defer kside.Close()
	// Drain what the kernel sent by itself when the TAP came up.
	bufs, sizes := make([][]byte, 8), make([]int, 8)
	for i := range bufs {
		bufs[i] = make([]byte, 1514)
	}
	for n := 1; n > 0; {
		var err error
		if n, err = tap.TryRead(bufs, sizes, 0); err != nil {
			t.Fatal(err)
		}
	}
	want := addressed(rocePacket(false, 5, 9, 42, 30), tap.HardwareAddr(), kside.HardwareAddr())
	if _, err := kside.Write([][]byte{want}, 0); err != nil {
		t.Fatal(err)
	}
	if ok, err := tap.WaitReadable(5 * time.Second); !ok || err != nil {
		t.Fatalf("WaitReadable with a frame queued = %v, %v", ok, err)
	}
	found := false
	for end := time.Now().Add(5 * time.Second); !found && time.Now().Before(end); {
		n, err := tap.TryRead(bufs, sizes, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			found = found || bytes.Equal(bufs[i][:sizes[i]], want)
		}
		if n == 0 {
			tap.WaitReadable(100 * time.Millisecond)
		}
	}
	if !found {
		t.Fatal("the frame sent on the TAP was not read")
	}
	tap.Wake()
	if ok, err := tap.WaitReadable(-1); ok || err != nil {
		t.Fatalf("WaitReadable after Wake = %v, %v; want false, nil at once", ok, err)
	}
	if _, err := kside.Write([][]byte{want}, 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := tap.Read(bufs, sizes, 0)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Read after Wake: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Read after Wake blocked")
	}
	tap.Close()
	if _, err := tap.WaitReadable(time.Second); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("WaitReadable after Close: %v", err)
	}
}

func TestRawWriteSegments(t *testing.T) {
	linktest.RequireRoot(t)
	var rx *link.Raw
	tx, ma, mb := rawPair(t, func(ifname string) (err error) {
		rx, err = link.OpenRaw(link.RawConfig{Interface: ifname, Filter: link.RoCEFilter()})
		return err
	})
	defer rx.Close()
	sent := make(map[int64][]byte)
	split := func(id int) [][]byte {
		f := addressed(rocePacket(false, 5, 1, uint32(id), 100+id), mb, ma)
		sent[int64(id)] = f
		// Headers, an empty piece, the payload, the last 4 bytes (ICRC).
		h := 14 + 20 + 8 + 12
		return [][]byte{f[:h], nil, f[h : len(f)-4], f[len(f)-4:]}
	}
	seen := make(map[int64]bool)
	bufs, sizes := make([][]byte, 8), make([]int, 8)
	for i := range bufs {
		bufs[i] = make([]byte, 1514)
	}
	// Sent again under new ids while nothing arrives (a loaded host's
	// backlog can drop frames).
	for round := 0; len(seen) < 5 && round < 10; round++ {
		var frames [][][]byte
		for k := range 5 {
			frames = append(frames, split(10*round+k))
		}
		if n, err := tx.WriteSegments(frames); n != 5 || err != nil {
			t.Fatalf("WriteSegments = %d, %v", n, err)
		}
		for end := time.Now().Add(300 * time.Millisecond); len(seen) < 5 && time.Now().Before(end); {
			n, err := rx.TryRead(bufs, sizes, 0)
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				f := bufs[i][:sizes[i]]
				id := frameID(f)
				if want, ok := sent[id]; ok {
					if !bytes.Equal(f, want) {
						t.Errorf("frame %d read as %x, want %x", id, f, want)
					}
					seen[id] = true
				}
			}
			if n == 0 {
				rx.WaitReadable(20 * time.Millisecond)
			}
		}
	}
	if len(seen) < 5 {
		t.Fatalf("%d of 5 gathered frames read", len(seen))
	}
	many := make([][]byte, link.MaxSegments+1)
	for i := range many {
		many[i] = make([]byte, 10)
	}
	if _, err := tx.WriteSegments([][][]byte{many}); err == nil {
		t.Error("a frame in MaxSegments+1 pieces: no error")
	}
	if _, err := tx.WriteSegments([][][]byte{{make([]byte, 14), make([]byte, tx.MTU()+1)}}); !errors.Is(err, link.ErrFrameTooBig) {
		t.Errorf("an oversized gathered frame: %v, want ErrFrameTooBig", err)
	}
	if _, err := tx.WriteSegments([][][]byte{{make([]byte, 6), make([]byte, 7)}}); !errors.Is(err, link.ErrFrameTooShort) {
		t.Errorf("a 13-byte gathered frame: %v, want ErrFrameTooShort", err)
	}
}

func TestRawStatsCountRingDrops(t *testing.T) {
	linktest.RequireRoot(t)
	forVersions(t, func(t *testing.T, version int) {
		var rx *link.Raw
		tx, ma, mb := rawPair(t, func(ifname string) (err error) {
			rx, err = link.OpenRaw(link.RawConfig{Interface: ifname, Filter: link.RoCEFilter(),
				Ring: &link.RingConfig{Version: version, BlockSize: 16 << 10, BlockCount: 2}})
			return err
		})
		defer rx.Close()
		var fs [][]byte
		for i := range 200 {
			fs = append(fs, addressed(rocePacket(false, 5, 1, uint32(i), 1300), mb, ma))
		}
		for i := 0; i < len(fs); i += 20 {
			if _, err := tx.Write(fs[i:i+20], 0); err != nil {
				t.Fatal(err)
			}
		}
		var st link.RawStats
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			var err error
			if st, err = rx.Stats(); err != nil {
				t.Fatal(err)
			}
			if st.Drops > 0 && (version == 2 || st.Freezes > 0) {
				break
			}
		}
		// 200 frames of 1358 bytes cannot fit 32 KiB of ring.
		if st.Drops == 0 || st.Packets < st.Drops || (version == 3 && st.Freezes == 0) {
			t.Fatalf("Stats = %+v after overfilling the ring", st)
		}
	})
}
