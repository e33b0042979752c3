package link_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"github.com/vrnic/vrnicd/header"
	"net"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link"
	"github.com/vrnic/vrnicd/nic/link/linktest"
)

// rocePacket builds a RoCEv2 frame to destQP whose payload after the BTH
// is id (4 bytes) then pad bytes; ihl is the IPv4 header length in words
// (5 or more), ignored for IPv6.
func rocePacket(v6 bool, ihl int, destQP, id uint32, pad int) []byte {
	bth := make([]byte, 12, 12+4+pad+4)
	bth[0] = 0x04 // RC SEND ONLY
	binary.BigEndian.PutUint16(bth[2:], 0xffff)
	bth[4] = 0xc0 // FECN, BECN: not part of DestQP
	bth[5], bth[6], bth[7] = byte(destQP>>16), byte(destQP>>8), byte(destQP)
	bth = binary.BigEndian.AppendUint32(bth, id)
	bth = append(bth, make([]byte, pad+4)...) // payload, ICRC
	f := roceProbe(v6, 17, 4791, 0x4000, bth...)
	if v6 || ihl <= 5 {
		return f
	}
	// Insert IPv4 options (NOPs) and fix lengths and checksum.
	opts := bytes.Repeat([]byte{1}, (ihl-5)*4)
	g := append(append(append([]byte(nil), f[:14+20]...), opts...), f[14+20:]...)
	ip := g[14:]
	ip[0] = 0x40 | byte(ihl)
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
	ip[10], ip[11] = 0, 0
	var sum uint32
	for i := 0; i < ihl*4; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	return g
}

// frameID finds the id rocePacket put after the BTH, -1 if f is not one.
func frameID(f []byte) int64 {
	if len(f) < 14+20 {
		return -1
	}
	off := 14 + 40
	if binary.BigEndian.Uint16(f[12:]) == 0x0800 {
		off = 14 + int(f[14]&0xf)*4
	}
	off += 8 + 12
	if len(f) < off+4 {
		return -1
	}
	return int64(binary.BigEndian.Uint32(f[off:]))
}

// rawPair opens a veth pair; a plain Raw on end A and whatever open builds
// on end B.
func rawPair(t *testing.T, open func(ifname string) error) (tx *link.Raw, a, b net.HardwareAddr) {
	t.Helper()
	nsA := linktest.NewNS(t, "rga")
	nsB := linktest.NewNS(t, "rgb")
	va, vb := linktest.UniqueName("va"), linktest.UniqueName("vb")
	linktest.VethPair(t, nsA, va, nsB, vb)
	if err := nsA.Do(func() (err error) {
		tx, err = link.OpenRaw(link.RawConfig{Interface: va})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Close() })
	if err := nsB.Do(func() error { return open(vb) }); err != nil {
		t.Fatal(err)
	}
	var mb net.HardwareAddr
	if err := nsB.Do(func() error {
		ifi, err := net.InterfaceByName(vb)
		if err == nil {
			mb = ifi.HardwareAddr
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return tx, tx.HardwareAddr(), mb
}

func addressed(f []byte, dst, src net.HardwareAddr) []byte {
	copy(f, dst)
	copy(f[6:], src)
	return f
}

// forVersions runs a test once per TPACKET version of the ring.
func forVersions(t *testing.T, test func(t *testing.T, version int)) {
	for _, v := range []int{2, 3} {
		t.Run(map[int]string{2: "TPACKET_V2", 3: "TPACKET_V3"}[v], func(t *testing.T) { test(t, v) })
	}
}

func TestRawRingReadAndReadRing(t *testing.T) {
	linktest.RequireRoot(t)
	forVersions(t, testRingRead)
}

func testRingRead(t *testing.T, version int) {
	var rx *link.Raw
	tx, ma, mb := rawPair(t, func(ifname string) (err error) {
		rx, err = link.OpenRaw(link.RawConfig{Interface: ifname, Filter: link.RoCEFilter(),
			Ring: &link.RingConfig{Version: version, BlockSize: 64 << 10, BlockCount: 4}})
		return err
	})
	defer rx.Close()

	// Nothing queued: TryRead and a short WaitReadable find nothing.
	bufs, sizes := make([][]byte, 8), make([]int, 8)
	for i := range bufs {
		bufs[i] = make([]byte, 2+1514)
	}
	if n, err := rx.TryRead(bufs, sizes, 2); n != 0 || err != nil {
		t.Fatalf("TryRead on an empty ring = %d, %v", n, err)
	}
	if ok, err := rx.WaitReadable(20 * time.Millisecond); ok || err != nil {
		t.Fatalf("WaitReadable on an empty ring = %v, %v", ok, err)
	}

	// More frames than a block holds (so the reader crosses blocks and
	// gives them back), of assorted sizes, sent in batches of 10; the next
	// batch goes once the last is read, so none can overrun the ring. A
	// frame still missing after a quiet spell is sent again under a new id
	// (the per-CPU backlog, shared with every namespace, drops frames when
	// another test floods it); an id must still arrive at most once.
	const total, batch = 300, 10
	type sentFrame struct {
		i int
		f []byte
	}
	sent := make(map[int64]sentFrame)
	nextID := 0
	build := func(i int) []byte {
		id := nextID
		nextID++
		f := addressed(rocePacket(i%3 == 0, 5, uint32(i), uint32(id), (i*37)%1400), mb, ma)
		sent[int64(id)] = sentFrame{i, f}
		return f
	}
	seen := make([]bool, total)
	seenID := make(map[int64]bool)
	got := 0
	check := func(f []byte) {
		id := frameID(f)
		s, ok := sent[id]
		switch {
		case !ok || !bytes.Equal(f, s.f):
			t.Errorf("frame (id %d) differs from the one sent: %x", id, f[:min(len(f), 64)])
		case seenID[id]:
			t.Errorf("frame id %d read twice", id)
		default:
			seenID[id] = true
			if !seen[s.i] {
				seen[s.i] = true
				got++
			}
		}
	}
	sendMissing := func(from, to int) {
		var fs [][]byte
		for i := from; i < to; i++ {
			if !seen[i] {
				fs = append(fs, build(i))
			}
		}
		if _, err := tx.Write(fs, 0); err != nil {
			t.Fatal(err)
		}
	}
	reads := 0
	for next := 0; next < total; next += batch {
		sendMissing(next, next+batch)
		for resends := 0; got < next+batch; {
			ok, err := rx.WaitReadable(300 * time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				if resends++; resends > 10 {
					t.Fatalf("frames %d..%d: %d never arrived", next, next+batch, next+batch-got)
				}
				sendMissing(next, next+batch)
				continue
			}
			// Readable: Read returns without blocking; alternate it with
			// ReadRing so both take frames from mid-block positions.
			var n int
			if reads++; reads%2 == 0 {
				n, err = rx.Read(bufs, sizes, 2)
				for i := range n {
					check(bufs[i][2 : 2+sizes[i]])
				}
			} else {
				_, err = rx.ReadRing(5, check)
			}
			if err != nil {
				t.Fatalf("after %d of %d frames: %v", got, total, err)
			}
		}
	}
}

// TestRawRingV2MaxPacket: a TPACKET_V2 ring whose slots hold packets of
// at most MaxPacket bytes hands short frames over whole and drops longer
// ones, which the kernel cut to the slot, counting them in
// RawStats.Truncated.
func TestRawRingV2MaxPacket(t *testing.T) {
	linktest.RequireRoot(t)
	var rx *link.Raw
	const maxPacket = 600
	tx, ma, mb := rawPair(t, func(ifname string) (err error) {
		rx, err = link.OpenRaw(link.RawConfig{Interface: ifname, Filter: link.RoCEFilter(),
			Ring: &link.RingConfig{Version: 2, MaxPacket: maxPacket, Frames: 64}})
		return err
	})
	defer rx.Close()
	// IPv4 + UDP + BTH + id: 44 bytes before the pad.
	short := addressed(rocePacket(false, 5, 1, 1, maxPacket-44-4), mb, ma)
	long := addressed(rocePacket(false, 5, 1, 2, maxPacket-44-4+64), mb, ma) // past the slot's alignment slack
	var got []int64
	for try := 0; try < 10 && len(got) == 0; try++ {
		if _, err := tx.Write([][]byte{long, short}, 0); err != nil {
			t.Fatal(err)
		}
		if ok, err := rx.WaitReadable(300 * time.Millisecond); err != nil || !ok {
			continue
		}
		time.Sleep(20 * time.Millisecond) // both are in the ring
		if _, err := rx.ReadRing(8, func(f []byte) {
			if !bytes.Equal(f, short) {
				t.Errorf("frame of %d bytes handed over, want only the %d-byte one", len(f), len(short))
			}
			got = append(got, frameID(f))
		}); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) == 0 {
		t.Fatal("the short frame never arrived")
	}
	st, err := rx.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Truncated == 0 || st.Truncated != uint64(len(got)) {
		t.Errorf("RawStats.Truncated %d, want one per long frame sent (%d)", st.Truncated, len(got))
	}
}

// TestRawRingVLANAndWake: a VLAN-tagged frame is not read from the ring
// (auxdata semantics), Wake ends a WaitReadable, Close ends another.
func TestRawRingVLANAndWake(t *testing.T) {
	linktest.RequireRoot(t)
	forVersions(t, testRingVLANAndWake)
}

func testRingVLANAndWake(t *testing.T, version int) {
	var rx *link.Raw
	tx, ma, mb := rawPair(t, func(ifname string) (err error) {
		// The filter sees the frame after the kernel moved the tag into
		// metadata (so it passes); the ring's status then says VLAN.
		rx, err = link.OpenRaw(link.RawConfig{Interface: ifname, Filter: link.RoCEFilter(),
			Ring: &link.RingConfig{Version: version}})
		return err
	})
	// Each round sends a tagged frame (odd id) and the same frame untagged
	// (even id); rounds repeat, under new ids, until an untagged one is
	// read (a loaded host's backlog can drop frames). No tagged frame may
	// be read, no untagged one twice.
	sentPlain := make(map[int64][]byte)
	seen := make(map[int64]int)
	var tagged []int64
	for round := 0; round < 10 && len(seen) == 0; round++ {
		id := int64(2 * round)
		plain := addressed(rocePacket(false, 5, 7, uint32(id), 10), mb, ma)
		tag := addressed(rocePacket(false, 5, 7, uint32(id+1), 10), mb, ma)
		tag = append(append(append([]byte(nil), tag[:12]...), 0x81, 0x00, 0x00, 0x05), tag[12:]...)
		sentPlain[id] = plain
		if _, err := tx.Write([][]byte{tag, plain}, 0); err != nil {
			t.Fatal(err)
		}
		// Wait out more than the retire timeout so a tagged frame would show.
		for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
			_, err := rx.ReadRing(8, func(f []byte) {
				id := frameID(f)
				switch want, ok := sentPlain[id]; {
				case id%2 == 1:
					tagged = append(tagged, id)
				case ok:
					seen[id]++
					if !bytes.Equal(f, want) {
						t.Errorf("untagged frame read as %x", f)
					}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			rx.WaitReadable(20 * time.Millisecond)
		}
	}
	if len(tagged) > 0 {
		t.Errorf("tagged frames read: ids %v", tagged)
	}
	if len(seen) == 0 {
		t.Fatal("no untagged frame read in 10 rounds")
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("untagged frame id %d read %d times", id, n)
		}
	}

	done := make(chan error, 1)
	go func() {
		ok, err := rx.WaitReadable(-1)
		if ok {
			err = errors.New("reported readable")
		}
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	rx.Wake()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("WaitReadable after Wake: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wake did not end WaitReadable")
	}
	go func() {
		_, err := rx.WaitReadable(-1)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	rx.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("WaitReadable after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end WaitReadable")
	}
	if _, err := rx.ReadRing(1, func([]byte) {}); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("ReadRing after Close: %v", err)
	}
}

func TestRingConfigLimits(t *testing.T) {
	linktest.RequireRoot(t)
	ns := linktest.NewNS(t, "rgl")
	for _, c := range []link.RingConfig{
		{BlockSize: 3000},
		{BlockSize: 4096}, // lo's MTU does not fit
		{BlockCount: 1},
		{BlockCount: 5000},
		{RetireTimeout: time.Microsecond},
		{BlockSize: 1 << 26, BlockCount: 32},
		{Version: 1},
		{Version: 2, BlockSize: 16 << 10}, // lo's 65536-byte MTU needs a larger slot
		{Version: 2, Frames: -1},
		{Version: 2, MaxPacket: 1500, Frames: 1 << 40}, // past 4096 blocks
		{Version: 2, MaxPacket: 1500, BlockSize: 1 << 20, Frames: 1 << 20}, // past 1 GiB
	} {
		err := ns.Do(func() error {
			l, err := link.OpenRaw(link.RawConfig{Interface: "lo", Ring: &c})
			if err == nil {
				l.Close()
			}
			return err
		})
		if err == nil {
			t.Errorf("OpenRaw with ring %+v: no error", c)
		}
	}
}

// TestRawFanoutSteersByDestQP sends RoCEv2 frames for many destination QPs
// (IPv4 with and without options, IPv6) and other frames into a fanout
// group of 3, and checks each arrives exactly once, on the link
// FanoutIndex picks (other frames on link 0).
// TestRawPollerRecvmmsg: the Poller methods on the recvmmsg path. A
// WaitReadable that timed out leaves TryRead and Read working.
// TestRawRingFinishesLocalSendersChecksums: a UDP datagram a local socket
// sends over a veth arrives CHECKSUM_PARTIAL (TP_STATUS_CSUMNOTREADY in the
// ring); ReadRing hands it over with the checksum finished.
func TestRawRingFinishesLocalSendersChecksums(t *testing.T) {
	linktest.RequireRoot(t)
	forVersions(t, func(t *testing.T, version int) {
		nsA := linktest.NewNS(t, "rca")
		nsB := linktest.NewNS(t, "rcb")
		va, vb := linktest.UniqueName("va"), linktest.UniqueName("vb")
		linktest.VethPair(t, nsA, va, nsB, vb)
		nsA.Exec(t, "ip", "addr", "add", "192.0.2.1/24", "dev", va)
		nsB.Exec(t, "ip", "addr", "add", "192.0.2.2/24", "dev", vb)
		var raw *link.Raw
		if err := nsB.Do(func() (err error) {
			raw, err = link.OpenRaw(link.RawConfig{Interface: vb, Filter: link.RoCEFilter(),
				Ring: &link.RingConfig{Version: version}})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		payload := bytes.Repeat([]byte{0xa5}, 201)
		var c net.Conn
		if err := nsA.Do(func() (err error) {
			c, err = net.Dial("udp", "192.0.2.2:4791")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// Sent again every 300 ms until read: a loaded host's backlog can
		// drop it.
		var f []byte
		for round := 0; f == nil && round < 15; round++ {
			if _, err := c.Write(payload); err != nil {
				t.Fatal(err)
			}
			for end := time.Now().Add(300 * time.Millisecond); f == nil && time.Now().Before(end); {
				raw.ReadRing(1, func(b []byte) { f = append([]byte(nil), b...) })
				if f == nil {
					raw.WaitReadable(50 * time.Millisecond)
				}
			}
		}
		if f == nil {
			t.Fatal("no frame")
		}
		src, to, udp, err := udpOf(f)
		if err != nil {
			t.Fatalf("%v: %x", err, f)
		}
		if !bytes.Equal(udp[8:], payload) {
			t.Fatalf("payload %x", udp[8:])
		}
		if binary.BigEndian.Uint16(udp[6:]) == 0 || header.L4Checksum(src, to, 17, udp) != 0 {
			t.Errorf("UDP checksum %#04x does not verify", binary.BigEndian.Uint16(udp[6:]))
		}
	})
}

// TestTAPPoller: the Poller methods of a TAP. A frame the kernel sends on
// the TAP (written here by an AF_PACKET socket on the kernel's side) makes
// it readable; a Wake's deadline does not break a later Read.
// TestRawWriteSegments: a frame gathered from pieces arrives as their
// concatenation; too many pieces, or too many bytes, are refused.
// TestRawStatsCountRingDrops fills a small ring nobody reads: the frames
// that find no room are counted as drops (and, with TPACKET_V3, the ring
// as frozen).
