package main

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vrnic/vrnicd/nic/link"
	"golang.org/x/sys/unix"
)

// bwOpts configures a throughput run.
type bwOpts struct {
	tx, rx   endpoint
	shape    shape
	payload  int
	v6       bool
	dur      time.Duration // one sample
	warm     time.Duration
	samples  int
	batch    int  // frames per sendmmsg
	qps      int  // distinct destination QPs in a batch
	bypass   bool // PACKET_QDISC_BYPASS on the sender
	rxRing   bool // receive with the TPACKET_V3 ring (else recvmmsg)
	spin     bool // the receiver polls, yielding the CPU, instead of sleeping (as vrnicd's busy worker)
	ring     link.RingConfig
	workers  int // receiving links in a fanout group steering by DestQP
	progress io.Writer
}

// bwSample is what one sample measured at the receiver (and the sender).
type bwSample struct {
	secs           float64
	rxFrames, rxB  uint64
	txFrames       uint64
	mpps, gbps     float64
	txMpps, lossPc float64
}

// rxSide counts what the receiving link delivers.
type rxSide struct {
	frames, bytes atomic.Uint64
}

// runBW opens a sender on o.tx and a receiver on o.rx, streams frames for
// o.samples × o.dur after a warm-up, and returns each sample's figures.
func runBW(o bwOpts) ([]bwSample, error) {
	var tx *link.Raw
	var guards []int
	err := o.tx.do(func() (err error) {
		tx, err = link.OpenRaw(link.RawConfig{Interface: o.tx.iface, BatchSize: o.batch, QdiscBypass: o.bypass,
			Filter: dropAll()})
		return err
	})
	if err != nil {
		return nil, err
	}
	defer tx.Close()
	var rxs []*link.Raw
	err = o.rx.do(func() (err error) {
		cfg := link.RawConfig{Interface: o.rx.iface, Filter: link.RoCEFilter(), BatchSize: 64}
		if o.rxRing {
			cfg.Ring = &o.ring
		}
		if o.workers > 1 {
			rxs, err = link.OpenRawFanout(cfg, o.workers)
		} else {
			var l *link.Raw
			l, err = link.OpenRaw(cfg)
			rxs = []*link.Raw{l}
		}
		if err != nil {
			return err
		}
		guards, err = openGuards(o.rx.iface)
		return err
	})
	for _, l := range rxs {
		if l != nil {
			defer l.Close()
		}
	}
	if err != nil {
		return nil, err
	}
	defer closeGuards(guards)
	rx := rxs[0]
	if tx.MTU() < frameLen(o.shape, o.payload, o.v6)-ethLen {
		return nil, fmt.Errorf("%s frames do not fit %s's MTU %d", describe(o.shape, o.payload, o.v6), o.tx, tx.MTU())
	}
	frames := make([][]byte, o.batch)
	for i := range frames {
		frames[i] = buildFrame(o.shape, o.payload, o.v6, rx.HardwareAddr(), tx.HardwareAddr(), uint32(17+i%o.qps), uint32(i))
	}

	var stop atomic.Bool
	var sent atomic.Uint64
	var rs rxSide
	var wg sync.WaitGroup
	errc := make(chan error, 1+len(rxs))
	for _, l := range rxs {
		wg.Add(1)
		go func() { defer wg.Done(); errc <- receive(l, o, &rs, &stop) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); errc <- transmit(tx, frames, &sent, &stop) }()
	finish := func() error {
		stop.Store(true)
		for _, l := range rxs {
			l.Wake()
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			if err != nil {
				return err
			}
		}
		return nil
	}

	time.Sleep(o.warm)
	var out []bwSample
	for i := range o.samples {
		t0, f0, b0, s0 := time.Now(), rs.frames.Load(), rs.bytes.Load(), sent.Load()
		time.Sleep(o.dur)
		t1, f1, b1, s1 := time.Now(), rs.frames.Load(), rs.bytes.Load(), sent.Load()
		s := bwSample{secs: t1.Sub(t0).Seconds(), rxFrames: f1 - f0, rxB: b1 - b0, txFrames: s1 - s0}
		s.mpps = float64(s.rxFrames) / s.secs / 1e6
		s.gbps = float64(s.rxB) * 8 / s.secs / 1e9
		s.txMpps = float64(s.txFrames) / s.secs / 1e6
		if s.txFrames > 0 && s.txFrames > s.rxFrames {
			s.lossPc = 100 * float64(s.txFrames-s.rxFrames) / float64(s.txFrames)
		}
		out = append(out, s)
		fmt.Fprintf(o.progress, "  sample %d/%d: %.3f Mpps %.2f Gb/s received (sent %.3f Mpps, %.1f %% not received)\n",
			i+1, o.samples, s.mpps, s.gbps, s.txMpps, s.lossPc)
	}
	err = finish()
	var drops, freezes uint64
	for _, l := range rxs {
		if st, serr := l.Stats(); serr == nil {
			drops, freezes = drops+st.Drops, freezes+st.Freezes
		}
	}
	fmt.Fprintf(o.progress, "  receiver: %d frames dropped by the kernel for want of room (ring or buffer), ring frozen %d times\n", drops, freezes)
	return out, err
}

// transmit writes the batch over and over until stop.
func transmit(tx *link.Raw, frames [][]byte, sent *atomic.Uint64, stop *atomic.Bool) error {
	for !stop.Load() {
		n, err := tx.Write(frames, 0)
		sent.Add(uint64(n))
		if err != nil {
			return fmt.Errorf("send: %w", err)
		}
	}
	return nil
}

// receive counts frames until stop: from the ring in place, or with
// recvmmsg into buffers. Finding nothing, it sleeps until the link is
// readable, or with o.spin yields the CPU and looks again, as a busy
// vrnicd worker does: a sleeping reader of a TPACKET_V2 ring is woken for
// every frame, and on a veth that wake-up is the sender's cost.
func receive(rx *link.Raw, o bwOpts, rs *rxSide, stop *atomic.Bool) error {
	bufs, sizes := make([][]byte, rx.BatchSize()), make([]int, rx.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, rx.MTU()+ethLen)
	}
	for !stop.Load() {
		var frames, bytes uint64
		var n int
		var err error
		if o.rxRing {
			n, err = rx.ReadRing(1<<16, func(f []byte) { frames++; bytes += uint64(len(f)) })
		} else {
			n, err = rx.TryRead(bufs, sizes, 0)
			for _, s := range sizes[:n] {
				frames++
				bytes += uint64(s)
			}
		}
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		if n == 0 {
			if err := idle(rx, o.spin); err != nil {
				return fmt.Errorf("receive: %w", err)
			}
			continue
		}
		rs.frames.Add(frames)
		rs.bytes.Add(bytes)
	}
	return nil
}

// idle is receive's wait for more: a sleep until the link is readable (at
// most 100 ms, so that stop is seen), or with spin a sched_yield.
func idle(rx *link.Raw, spin bool) error {
	if spin {
		_, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		return nil
	}
	_, err := rx.WaitReadable(100 * time.Millisecond)
	return err
}

// best is the sample with the highest receive rate.
func best(s []bwSample) bwSample {
	var b bwSample
	for _, x := range s {
		if x.mpps > b.mpps {
			b = x
		}
	}
	return b
}
