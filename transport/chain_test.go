package transport_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/mem"
	tt "github.com/vrnic/vrnicd/transport/transporttest"
	"github.com/vrnic/vrnicd/transport/wire"
)

// chain is a random send queue of the kind storage stacks post (o2iblnd,
// NFS/RDMA): fast-registrations and invalidations between WRITEs, SENDs,
// READs and atomics, some fenced, with a model of what each must do. The
// harness wakes the engine only on a post, a packet or a deadline it asked
// for, so a wait at the head of the send queue that is not resumed by one
// of those stalls the run.
type chain struct {
	p      *pair
	rng    *rand.Rand
	src    *tt.Buffer // a: what WRITE and SEND gather
	res    *tt.Buffer // a: where READs and atomics land, a region per WR
	wdst   *tt.Buffer // b: what WRITEs target
	rsrc   *tt.Buffer // b: what READs read (never written)
	atom   *tt.Buffer // b: the atomics' counter
	rbuf   *tt.Buffer // b: receive buffers, one slot per SEND
	frKey  uint32     // a's fast-reg MR, registered when frValid
	frPage []byte
	frOK   bool

	wrs      []transport.SendWR
	want     []transport.WCStatus
	wcOp     []transport.WCOpcode
	model    []byte // wdst as the WRITEs leave it, in order
	checks   []func() error
	resOff   int
	sends    int
	sendData [][]byte
	counter  uint64
	localOps int
	failAt   int // index of the WR that must fail; -1: none
}

const (
	chainSlot    = 4096
	chainMaxSend = 3000
	frIOVA       = 0x7000_0000
)

func newChain(t *testing.T, seed uint64, o tt.Options) *chain {
	p := newPair(t, seed, o)
	c := &chain{p: p, rng: rand.New(rand.NewPCG(seed, 77)), failAt: -1}
	c.src = p.buf(t, p.a, 1<<17, 0x1000_0000)
	c.res = p.buf(t, p.a, 1<<20, 0x2000_0000)
	c.wdst = p.buf(t, p.b, 1<<17, 0x3000_0000)
	c.rsrc = p.buf(t, p.b, 1<<17, 0x4000_0000)
	c.atom = p.buf(t, p.b, 64, 0x5000_0000)
	c.rbuf = p.buf(t, p.b, 512*chainSlot, 0x6000_0000)
	fill(c.src.Bytes, 1)
	fill(c.rsrc.Bytes, 2)
	c.model = make([]byte, len(c.wdst.Bytes))
	key, err := p.a.Node.Mem.AllocMR(p.a.PD, 1)
	if err != nil {
		t.Fatal(err)
	}
	c.frKey = key
	c.frPage = make([]byte, 4096)
	return c
}

func (c *chain) add(wr transport.SendWR, op transport.WCOpcode) {
	wr.ID = uint64(len(c.wrs))
	wr.Flags |= transport.SendSignaled
	if c.rng.IntN(5) == 0 {
		wr.Flags |= transport.SendFence
	}
	c.wrs = append(c.wrs, wr)
	c.want = append(c.want, transport.WCSuccess)
	c.wcOp = append(c.wcOp, op)
}

// gen appends one random WR (or a REG_MR/LOCAL_INV step) to the chain.
func (c *chain) gen() {
	r := c.rng
	switch k := r.IntN(10); {
	case k < 2:
		c.genWrite(1 + r.IntN(70_000))
	case k < 4:
		c.genSend(r.IntN(chainMaxSend + 1))
	case k < 6:
		c.genRead(1 + r.IntN(20_000))
	case k < 7:
		c.genAtomic(r.IntN(2) == 0)
	default:
		c.genFastReg()
	}
}

func (c *chain) genWrite(n int) {
	off := c.rng.IntN(len(c.wdst.Bytes) - n + 1)
	soff := c.rng.IntN(len(c.src.Bytes) - n + 1)
	copy(c.model[off:], c.src.Bytes[soff:soff+n])
	c.add(transport.SendWR{Opcode: transport.WRRDMAWrite, SGL: []transport.SGE{c.src.SGE(soff, n)},
		RemoteAddr: c.wdst.Addr + uint64(off), RKey: c.wdst.RKey}, transport.WCRDMAWrite)
}

func (c *chain) genSend(n int) {
	soff := c.rng.IntN(len(c.src.Bytes) - n + 1)
	c.sendData = append(c.sendData, append([]byte(nil), c.src.Bytes[soff:soff+n]...))
	c.sends++
	c.add(transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{c.src.SGE(soff, n)}}, transport.WCSend)
}

func (c *chain) genRead(n int) {
	off := c.rng.IntN(len(c.rsrc.Bytes) - n + 1)
	dst := c.takeRes(n)
	want := c.rsrc.Bytes[off : off+n]
	c.checks = append(c.checks, func() error {
		if !bytes.Equal(c.res.Bytes[dst:dst+n], want) {
			return fmt.Errorf("READ of %d bytes at %#x landed wrong", n, off)
		}
		return nil
	})
	c.add(transport.SendWR{Opcode: transport.WRRDMARead, SGL: []transport.SGE{c.res.SGE(dst, n)},
		RemoteAddr: c.rsrc.Addr + uint64(off), RKey: c.rsrc.RKey}, transport.WCRDMARead)
}

// genAtomic adds one to the counter, by FETCH_ADD or by a CMP_SWP that
// expects the value every earlier atomic left: each returns the counter as
// it was, so one executed twice or out of order shows.
func (c *chain) genAtomic(fetchAdd bool) {
	dst := c.takeRes(8)
	old := c.counter
	c.counter++
	c.checks = append(c.checks, func() error {
		if got := binary.LittleEndian.Uint64(c.res.Bytes[dst:]); got != old {
			return fmt.Errorf("atomic returned %d, want %d", got, old)
		}
		return nil
	})
	wr := transport.SendWR{SGL: []transport.SGE{c.res.SGE(dst, 8)}, RemoteAddr: c.atom.Addr, RKey: c.atom.RKey}
	if fetchAdd {
		wr.Opcode, wr.CompareAdd = transport.WRAtomicFetchAdd, 1
		c.add(wr, transport.WCFetchAdd)
		return
	}
	wr.Opcode, wr.CompareAdd, wr.Swap = transport.WRAtomicCmpAndSwp, old, old+1
	c.add(wr, transport.WCCompSwap)
}

// genFastReg registers a's fast-reg MR under the next key, WRITEs through
// it, or invalidates it, as o2iblnd cycles its FMR pool.
func (c *chain) genFastReg() {
	r := c.rng
	switch {
	case !c.frOK:
		c.frKey = mem.NextKey(c.frKey)
		c.frOK = true
		c.localOps++
		c.add(transport.SendWR{Opcode: transport.WRRegMR, RegMR: &transport.RegMRWR{Key: c.frKey,
			Pages: []mem.Page{{Backing: mem.NewSliceBacking(c.frPage)}}, PageSize: 4096, IOVA: frIOVA, Length: 4096,
			Access: mem.LocalWrite}}, transport.WCRegMR)
	case r.IntN(2) == 0:
		n := 1 + r.IntN(4096)
		off := r.IntN(len(c.wdst.Bytes) - n + 1)
		copy(c.model[off:], c.frPage[:n])
		c.add(transport.SendWR{Opcode: transport.WRRDMAWrite, SGL: []transport.SGE{{Addr: frIOVA, Length: uint32(n), LKey: c.frKey}},
			RemoteAddr: c.wdst.Addr + uint64(off), RKey: c.wdst.RKey}, transport.WCRDMAWrite)
	default:
		c.frOK = false
		c.localOps++
		c.add(transport.SendWR{Opcode: transport.WRLocalInv, ImmData: c.frKey}, transport.WCLocalInv)
	}
}

// genBadRKey adds a WRITE the responder must refuse (IBA 9.7.5.1.4:
// NAK remote access error): it completes with REM_ACCESS_ERR, the QP goes
// to ERR, and every later WR is flushed.
func (c *chain) genBadRKey() {
	c.failAt = len(c.wrs)
	c.add(transport.SendWR{Opcode: transport.WRRDMAWrite, SGL: []transport.SGE{c.src.SGE(0, 64)},
		RemoteAddr: c.wdst.Addr, RKey: c.wdst.RKey ^ 0xff00}, transport.WCRDMAWrite)
	c.want[c.failAt] = transport.WCRemAccessErr
}

func (c *chain) takeRes(n int) int {
	if c.resOff+n > len(c.res.Bytes) {
		c.resOff = 0
	}
	off := c.resOff
	c.resOff += (n + 63) &^ 63
	return off
}

func (c *chain) postRecvs(t *testing.T) {
	for i := range c.sends {
		if err := c.p.b.PostRecv(&transport.RecvWR{ID: uint64(i), SGL: []transport.SGE{c.rbuf.SGE(i*chainSlot, chainSlot)}}); err != nil {
			t.Fatal(err)
		}
	}
}

// run posts the chain in random bursts, each taken by one doorbell, and
// waits for every completion.
func (c *chain) run(t *testing.T) []transport.WC {
	var wcs []transport.WC
	for i := 0; i < len(c.wrs); {
		n := min(1+c.rng.IntN(16), len(c.wrs)-i)
		for _, wr := range c.wrs[i : i+n] {
			if err := c.p.a.PostSend(&wr); err != nil {
				t.Fatalf("post %d: %v", wr.ID, err)
			}
		}
		i += n
		if c.rng.IntN(3) == 0 { // sometimes let the burst run a little before the next
			cq := c.p.a.SendCQ
			if err := c.p.net.Run(func() bool { return cq.Len() > 0 }, 50); errors.Is(err, tt.ErrStalled) {
				t.Fatalf("after %d of %d WRs: %v", i, len(c.wrs), err)
			}
			wcs = append(wcs, tt.Poll(cq)...)
		}
	}
	for len(wcs) < len(c.wrs) {
		more := c.p.waitWC(t, c.p.a.SendCQ, 1)
		wcs = append(wcs, more...)
	}
	return wcs
}

// verify checks the completions (every WR, in order, with its status), the
// data every operation moved, and that no local operation ran twice.
func (c *chain) verify(t *testing.T, wcs []transport.WC) {
	t.Helper()
	for i, wc := range wcs {
		want := c.want[i]
		if c.failAt >= 0 && i > c.failAt {
			want = transport.WCWRFlushErr
		}
		if wc.WRID != uint64(i) || wc.Status != want {
			t.Fatalf("completion %d: WR %d %v, want WR %d %v (chain %v)", i, wc.WRID, wc.Status, i, want, c.ops())
		}
		if want == transport.WCSuccess && wc.Opcode != c.wcOp[i] {
			t.Fatalf("completion %d: opcode %v, want %v", i, wc.Opcode, c.wcOp[i])
		}
	}
	qc := c.p.a.QP.Counters()
	if got := qc.Get(transport.LocalOpReplays); got != 0 {
		t.Fatalf("local_op_replays = %d", got)
	}
	if c.failAt >= 0 {
		return
	}
	if got := qc.Get(transport.LocalOpsExecuted); got != uint64(c.localOps) {
		t.Fatalf("local_ops_executed = %d, want %d", got, c.localOps)
	}
	if !bytes.Equal(c.wdst.Bytes, c.model) {
		t.Fatal("the WRITEs left the target different from the model")
	}
	for _, chk := range c.checks {
		if err := chk(); err != nil {
			t.Fatal(err)
		}
	}
	if got := binary.LittleEndian.Uint64(c.atom.Bytes); got != c.counter {
		t.Fatalf("counter %d after %d atomics", got, c.counter)
	}
	rwcs := tt.Poll(c.p.b.RecvCQ)
	if len(rwcs) != c.sends {
		t.Fatalf("%d receive completions for %d SENDs", len(rwcs), c.sends)
	}
	for i, wc := range rwcs {
		if wc.Status != transport.WCSuccess || int(wc.ByteLen) != len(c.sendData[i]) ||
			!bytes.Equal(c.rbuf.Bytes[int(wc.WRID)*chainSlot:][:wc.ByteLen], c.sendData[i]) {
			t.Fatalf("SEND %d arrived as %+v", i, wc)
		}
	}
}

func (c *chain) ops() []string {
	var s []string
	for _, wr := range c.wrs {
		f := ""
		if wr.Flags&transport.SendFence != 0 {
			f = "+fence"
		}
		s = append(s, wr.Opcode.String()+f)
	}
	return s
}

// TestRandomChainsComplete is the property of ibv_post_send(3) and IBA
// 10.8.3 that storage stacks rely on: every posted WR completes, in the
// order posted, with the status its operation earns, whatever waits it met
// at the head of the send queue (IBV_SEND_FENCE behind READ/atomic,
// LOCAL_INV behind every earlier WR, the rd_atomic limit, the 128-PSN
// window, RNR), with and without loss; local operations run exactly once.
func TestRandomChainsComplete(t *testing.T) {
	seeds := 40
	if raceEnabled {
		seeds = 8
	}
	lossy := tt.Faults{Loss: 0.10, Duplicate: 0.05, Reorder: 0.05}
	for _, tc := range []struct {
		name   string
		faults tt.Faults
		rnr    bool // receives posted only after the first RNR NAK
		bad    bool // one WR the responder refuses
	}{
		{name: "lossless"},
		{name: "lossy", faults: lossy},
		{name: "rnr", rnr: true},
		{name: "rnr-lossy", faults: lossy, rnr: true},
		{name: "remote-error", bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(seeds) {
				c := newChain(t, 1000+seed, tt.Options{RdAtomic: 2, MinRNRTimer: 1})
				c.p.net.Faults = tc.faults
				for range 60 {
					c.gen()
				}
				if tc.bad {
					c.genBadRKey()
					for range 5 {
						c.gen()
					}
				}
				if tc.rnr {
					posted := false
					c.p.net.Tap = func(f *tt.Frame) {
						if !posted && f.Pkt.BTH.Opcode() == wire.RCAcknowledge &&
							wire.SyndromeType(f.Pkt.AETH.Syndrome()) == wire.AETHRNRNak {
							posted = true
							c.postRecvs(t)
						}
					}
					if c.sends == 0 {
						c.genSend(10)
					}
				} else {
					c.postRecvs(t)
				}
				wcs := c.run(t)
				c.verify(t, wcs)
				if tc.rnr && tc.faults.Loss == 0 && c.p.a.QP.Counters().Get(transport.RcvdRNRErr) == 0 {
					t.Fatalf("seed %d: no RNR NAK: the case did not exercise the RNR wait", seed)
				}
				if tc.faults.Loss == 0 && !tc.rnr {
					if got := c.p.a.QP.Counters().Get(transport.RetransmitTimeouts); got != 0 {
						t.Fatalf("seed %d: retransmit_timeouts = %d on a lossless link", seed, got)
					}
				}
			}
		})
	}
}
