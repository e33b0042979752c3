package link_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"golang.org/x/net/bpf"

	"github.com/vrnic/vrnicd/nic/link"
	"github.com/vrnic/vrnicd/nic/link/linktest"
)

func TestFanoutProgram(t *testing.T) {
	var ins []bpf.Instruction
	for _, r := range link.FanoutProgram(5) {
		ins = append(ins, r.Disassemble())
	}
	// The VM has no SKF_NET_OFF; check the program's shape by hand
	// instead: the kernel runs it in TestRawFanoutSteersByDestQP.
	if len(ins) == 0 {
		t.Fatal("empty program")
	}
	for qp, want := range map[uint32]int{0: 0, 1: 1, 4: 4, 5: 0, 0xffffff: 0xffffff % 5} {
		if got := link.FanoutIndex(qp, 5); got != want {
			t.Errorf("FanoutIndex(%#x, 5) = %d, want %d", qp, got, want)
		}
	}
}

func TestRawFanoutSteersByDestQP(t *testing.T) {
	linktest.RequireRoot(t)
	for _, ring := range []int{0, 2, 3} {
		t.Run(map[int]string{0: "recvmmsg", 2: "TPACKET_V2", 3: "TPACKET_V3"}[ring], func(t *testing.T) {
			testFanout(t, ring)
		})
	}
}

func testFanout(t *testing.T, ring int) {
	const n = 3
	var links []*link.Raw
	tx, ma, mb := rawPair(t, func(ifname string) (err error) {
		cfg := link.RawConfig{Interface: ifname}
		if ring != 0 {
			cfg.Ring = &link.RingConfig{Version: ring}
		}
		links, err = link.OpenRawFanout(cfg, n)
		return err
	})
	defer func() {
		for _, l := range links {
			l.Close()
		}
	}()
	if len(links) != n {
		t.Fatalf("OpenRawFanout returned %d links", len(links))
	}
	// Frame i (of 120) is one of four kinds for QP i×7919; a frame not seen
	// after a quiet spell is sent again under a new id (the kernel drops
	// frames when the per-CPU backlog, shared by every namespace, is full
	// of another test's traffic), so every id must still arrive at most
	// once and every frame at least once.
	const frames = 120
	type want struct {
		frame, link int
		f           []byte
	}
	sent := make(map[int64]want)
	nextID := 0
	build := func(i int) []byte {
		id := uint32(nextID)
		nextID++
		qp := uint32(i*7919) & 0xffffff
		var f []byte
		to := link.FanoutIndex(qp, n)
		switch i % 4 {
		case 0:
			f = rocePacket(false, 5, qp, id, 20)
		case 1:
			f = rocePacket(false, 7, qp, id, 20)
		case 2:
			f = rocePacket(true, 5, qp, id, 20)
		case 3: // UDP to another port: not RoCE, link 0
			f = rocePacket(false, 5, qp, id, 20)
			binary.BigEndian.PutUint16(f[14+20+2:], 4792)
			to = 0
		}
		f = addressed(f, mb, ma)
		sent[int64(id)] = want{i, to, f}
		return f
	}
	seenFrame := make([]int, frames)
	seenID := make(map[int64]int)
	send := func() {
		var batch [][]byte
		for i := range frames {
			if seenFrame[i] == 0 {
				batch = append(batch, build(i))
			}
		}
		for len(batch) > 0 {
			k := min(8, len(batch))
			if _, err := tx.Write(batch[:k], 0); err != nil {
				t.Fatal(err)
			}
			batch = batch[k:]
		}
	}
	send()
	got, others, sends := 0, 0, 1
	var otherHex []string
	quiet := time.Now()
	deadline := time.Now().Add(10 * time.Second)
	bufs, sizes := [][]byte{make([]byte, 1600), make([]byte, 1600)}, make([]int, 2)
	for got < frames && time.Now().Before(deadline) {
		progress := false
		for li, l := range links {
			m, err := l.TryRead(bufs, sizes, 0)
			if err != nil {
				t.Fatal(err)
			}
			for k := range m {
				f := bufs[k][:sizes[k]]
				id := frameID(f)
				w, ok := sent[id]
				if !ok || !bytes.Equal(f, w.f) {
					others++ // not one of ours (IPv6 neighbour traffic, ...)
					if len(otherHex) < 3 {
						otherHex = append(otherHex, fmt.Sprintf("%x", f[:min(len(f), 60)]))
					}
					continue
				}
				if seenID[id]++; seenID[id] > 1 {
					t.Errorf("frame id %d arrived %d times", id, seenID[id])
				}
				if seenFrame[w.frame]++; seenFrame[w.frame] == 1 {
					got++
				}
				if w.link != li {
					t.Errorf("frame %d (id %d) arrived on link %d, want %d", w.frame, id, li, w.link)
				}
			}
			progress = progress || m > 0
		}
		switch {
		case progress:
			quiet = time.Now()
		case time.Since(quiet) > 300*time.Millisecond && sends < 10:
			send()
			sends++
			quiet = time.Now()
		default:
			time.Sleep(time.Millisecond)
		}
	}
	if got < frames {
		t.Errorf("%d of %d frames never arrived in %d sends; %d other frames read, e.g. %q", frames-got, frames, sends, others, otherHex)
	}
}
