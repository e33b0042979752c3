package rxepeer

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"
)

// impairRig: x0 -veth- x1 =Impair= y1 -veth- y0, in a fresh namespace;
// frames sent on x0 come out of y0 (AtoB) and back.
type impairRig struct {
	im     *Impair
	x0, y0 *PacketConn
}

func newImpairRig(t *testing.T) *impairRig {
	t.Helper()
	n := NewNetns(t)
	for _, p := range [][2]string{{"x0", "x1"}, {"y0", "y1"}} {
		if err := n.AddVeth(p[0], p[1], 0); err != nil {
			t.Fatal(err)
		}
	}
	im, err := n.NewImpair("x1", "y1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { im.Close() })
	r := &impairRig{im: im}
	if r.x0, err = n.PacketSocket("x0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.x0.Close() })
	if r.y0, err = n.PacketSocket("y0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.y0.Close() })
	return r
}

const testEtherType = 0x88b5 // IEEE local experimental

func testFrame(i int, marked bool) []byte {
	f := make([]byte, 60)
	copy(f, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 1})
	binary.BigEndian.PutUint16(f[12:], testEtherType)
	binary.BigEndian.PutUint32(f[14:], uint32(i))
	if marked {
		f[18] = 1
	}
	return f
}

func frameIndex(f []byte) (int, bool) {
	if len(f) < 19 || binary.BigEndian.Uint16(f[12:]) != testEtherType {
		return 0, false
	}
	return int(binary.BigEndian.Uint32(f[14:])), true
}

// send sends frames [from, to) on s, marked or not, in small bursts.
func send(t *testing.T, s *PacketConn, from, to int, marked bool) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := s.Send(testFrame(i, marked)); err != nil {
			t.Fatal(err)
		}
		if i%32 == 31 {
			time.Sleep(2 * time.Millisecond)
		}
	}
}

// collect reads test frames from s until quiet for 300 ms (or 10 s).
func collect(t *testing.T, s *PacketConn) []int {
	t.Helper()
	var got []int
	buf := make([]byte, 2048)
	end := time.Now().Add(10 * time.Second)
	for time.Now().Before(end) {
		n, outgoing, err := s.Recv(buf, 300*time.Millisecond)
		if err != nil {
			break
		}
		if i, ok := frameIndex(buf[:n]); ok && !outgoing {
			got = append(got, i)
		}
	}
	return got
}

func TestImpairDecide(t *testing.T) {
	r := newImpairRig(t)
	r.im.Set(AtoB, Impairment{Decide: func(i int, _ []byte) Action {
		switch i {
		case 1:
			return Drop
		case 3:
			return Hold
		case 5:
			return Duplicate
		}
		return Pass
	}})
	send(t, r.x0, 0, 8, false)
	got := collect(t, r.y0)
	if want := []int{0, 2, 4, 3, 5, 5, 6, 7}; !slices.Equal(got, want) {
		t.Errorf("received %v, want %v", got, want)
	}
	if s := r.im.Stats(AtoB); s != (ImpairStats{Seen: 8, Matched: 8, Dropped: 1, Duplicated: 1, Held: 1, Sent: 8}) {
		t.Errorf("stats %+v", s)
	}
	// The other direction is untouched.
	send(t, r.y0, 100, 104, false)
	if got := collect(t, r.x0); !slices.Equal(got, []int{100, 101, 102, 103}) {
		t.Errorf("B to A received %v", got)
	}
	if err := r.im.Err(); err != nil {
		t.Error(err)
	}
}

func TestImpairMatchAndSeededLoss(t *testing.T) {
	r := newImpairRig(t)
	marked := func(f []byte) bool { return len(f) > 18 && f[18] == 1 }
	dropped := func() []int {
		r.im.Set(AtoB, Impairment{Match: marked, Loss: 0.3, Seed: 42})
		send(t, r.x0, 0, 300, true)
		send(t, r.x0, 1000, 1050, false) // unmatched: all pass despite Loss
		got := collect(t, r.y0)
		var lost []int
		next := 0
		for _, i := range got {
			if i >= 1000 {
				continue
			}
			for ; next < i; next++ {
				lost = append(lost, next)
			}
			next = i + 1
		}
		for ; next < 300; next++ {
			lost = append(lost, next)
		}
		unmatched := 0
		for _, i := range got {
			if i >= 1000 {
				unmatched++
			}
		}
		if unmatched != 50 {
			t.Errorf("%d of 50 unmatched frames arrived", unmatched)
		}
		return lost
	}
	a := dropped()
	// Binomial(300, 0.3): mean 90, sd ~8; [50, 130] is 5 sd either way.
	if len(a) < 50 || len(a) > 130 {
		t.Errorf("lost %d of 300 at Loss 0.3", len(a))
	}
	if b := dropped(); !slices.Equal(a, b) {
		t.Errorf("same seed, different losses:\n%v\n%v", a, b)
	}
}

func TestImpairDelayAndHoldMax(t *testing.T) {
	r := newImpairRig(t)
	r.im.Set(AtoB, Impairment{Delay: 50 * time.Millisecond})
	buf := make([]byte, 2048)
	recvOne := func() (int, time.Duration) {
		t.Helper()
		start := time.Now()
		for time.Since(start) < 5*time.Second {
			n, out, err := r.y0.Recv(buf, time.Second)
			if err != nil {
				continue
			}
			if i, ok := frameIndex(buf[:n]); ok && !out {
				return i, time.Since(start)
			}
		}
		t.Fatal("no frame in 5 s")
		return 0, 0
	}
	send(t, r.x0, 7, 8, false)
	if i, d := recvOne(); i != 7 || d < 50*time.Millisecond {
		t.Errorf("delayed frame %d after %v, want frame 7 after >= 50ms", i, d)
	}
	// A held frame with no successor still goes out, HoldMax late.
	r.im.Set(AtoB, Impairment{Decide: func(int, []byte) Action { return Hold }, HoldMax: 80 * time.Millisecond})
	send(t, r.x0, 9, 10, false)
	if i, d := recvOne(); i != 9 || d < 80*time.Millisecond {
		t.Errorf("held frame %d after %v, want frame 9 after >= 80ms", i, d)
	}
}

func TestIsRoCEv2(t *testing.T) {
	f := make([]byte, 14+20+8+16)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	f[14], f[14+9] = 0x45, 17
	binary.BigEndian.PutUint16(f[14+20+2:], 4791)
	if !IsRoCEv2(f) {
		t.Error("IPv4 UDP 4791 not recognised")
	}
	binary.BigEndian.PutUint16(f[14+20+2:], 4790)
	if IsRoCEv2(f) {
		t.Error("UDP 4790 taken for RoCEv2")
	}
	if IsRoCEv2(f[:20]) {
		t.Error("truncated frame taken for RoCEv2")
	}
}
