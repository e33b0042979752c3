package main

import (
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"time"

	"github.com/vrnic/vrnicd/nic/link"
)

// latOpts configures a ping-pong run.
type latOpts struct {
	a, b     endpoint
	shape    shape
	payload  int
	v6       bool
	iters    int // round trips per sample
	samples  int
	spin     bool          // poll with TryRead instead of sleeping in WaitReadable
	ring     int           // receive with a TPACKET_V2 or V3 ring; 0: recvmmsg
	timeout  time.Duration // a round trip slower than this counts as lost
	progress io.Writer
}

// latSample is one sample's half round trips.
type latSample struct {
	lost                int
	min, p50, p99, mean time.Duration
	iters               int
}

// runLat bounces one frame at a time between a (the pinger) and b (the
// echoer) and returns each sample's half round trip times.
func runLat(o latOpts) ([]latSample, error) {
	open := func(e endpoint) (l *link.Raw, guards []int, err error) {
		err = e.do(func() (err error) {
			cfg := link.RawConfig{Interface: e.iface, Filter: link.RoCEFilter(), BatchSize: 8}
			if o.ring != 0 {
				cfg.Ring = &link.RingConfig{Version: o.ring}
			}
			if l, err = link.OpenRaw(cfg); err != nil {
				return err
			}
			if guards, err = openGuards(e.iface); err != nil {
				l.Close()
			}
			return err
		})
		return l, guards, err
	}
	a, ga, err := open(o.a)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	defer closeGuards(ga)
	b, gb, err := open(o.b)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	defer closeGuards(gb)
	if a.MTU() < frameLen(o.shape, o.payload, o.v6)-ethLen {
		return nil, fmt.Errorf("%s frames do not fit %s's MTU %d", describe(o.shape, o.payload, o.v6), o.a, a.MTU())
	}

	var stop atomic.Bool
	echoed := make(chan error, 1)
	go func() { echoed <- echo(b, o.spin, &stop) }()
	defer func() {
		stop.Store(true)
		b.Wake()
		<-echoed
	}()

	ping := buildFrame(o.shape, o.payload, o.v6, b.HardwareAddr(), a.HardwareAddr(), 17, 0)
	var out []latSample
	psn := uint32(0)
	// One unmeasured sample's worth of warm-up, shorter.
	if _, err := pingpong(a, ping, &psn, min(o.iters, 200), o); err != nil {
		return nil, err
	}
	for i := range o.samples {
		s, err := pingpong(a, ping, &psn, o.iters, o)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
		fmt.Fprintf(o.progress, "  sample %d/%d: half round trip mean %.2f us, median %.2f us, min %.2f us (%d lost)\n",
			i+1, o.samples, us(s.mean), us(s.p50), us(s.min), s.lost)
	}
	return out, nil
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

// pingpong runs iters round trips from a and returns their half times.
func pingpong(a *link.Raw, ping []byte, psn *uint32, iters int, o latOpts) (latSample, error) {
	bufs, sizes := [][]byte{make([]byte, a.MTU()+ethLen)}, []int{0}
	half := make([]time.Duration, 0, iters)
	s := latSample{iters: iters}
	for range iters {
		*psn = (*psn + 1) & 0xffffff
		setPSN(ping, *psn)
		t0 := time.Now()
		if _, err := a.Write([][]byte{ping}, 0); err != nil {
			return s, err
		}
		deadline := t0.Add(o.timeout)
		got := false
		for !got {
			n, err := waitFrame(a, o.spin, bufs, sizes, deadline)
			if err != nil {
				return s, err
			}
			if n == 0 {
				break // timed out
			}
			p, ok := framePSN(bufs[0][:sizes[0]])
			got = ok && p == *psn
		}
		if !got {
			s.lost++
			continue
		}
		half = append(half, time.Since(t0)/2)
	}
	if len(half) == 0 {
		return s, fmt.Errorf("every round trip was lost (%d)", iters)
	}
	slices.Sort(half)
	var sum time.Duration
	for _, h := range half {
		sum += h
	}
	s.min, s.p50, s.p99 = half[0], half[len(half)/2], half[len(half)*99/100]
	s.mean = sum / time.Duration(len(half))
	return s, nil
}

// setPSN rewrites the BTH PSN of a buildFrame frame.
func setPSN(f []byte, psn uint32) {
	off := ethLen + ipv6Len
	if f[12] == 0x08 && f[13] == 0x00 {
		off = ethLen + int(f[ethLen]&0xf)*4
	}
	b := f[off+udpLen+8:]
	b[1], b[2], b[3] = byte(psn>>16), byte(psn>>8), byte(psn)
}

// waitFrame reads at least one frame, or returns 0 at the deadline.
func waitFrame(l *link.Raw, spin bool, bufs [][]byte, sizes []int, deadline time.Time) (int, error) {
	for {
		n, err := l.TryRead(bufs, sizes, 0)
		if n > 0 || err != nil {
			return n, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return 0, nil
		}
		if !spin {
			if _, err := l.WaitReadable(left); err != nil {
				return 0, err
			}
		}
	}
}

// echo sends every frame b reads back to where it came from, until stop.
func echo(b *link.Raw, spin bool, stop *atomic.Bool) error {
	bufs, sizes := make([][]byte, b.BatchSize()), make([]int, b.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, b.MTU()+ethLen)
	}
	out := make([][]byte, 0, len(bufs))
	for !stop.Load() {
		n, err := waitFrame(b, spin, bufs, sizes, time.Now().Add(100*time.Millisecond))
		if err != nil {
			return err
		}
		out = out[:0]
		for i := range n {
			f := bufs[i][:sizes[i]]
			var m [6]byte
			copy(m[:], f[:6])
			copy(f[:6], f[6:12])
			copy(f[6:12], m[:])
			out = append(out, f)
		}
		if len(out) > 0 {
			if _, err := b.Write(out, 0); err != nil {
				return err
			}
		}
	}
	return nil
}
