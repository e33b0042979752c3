package verbs_test

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/vrnic/vrnicd/nic/link/linktest"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/ring"
	"github.com/vrnic/vrnicd/verbsock/server"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

const (
	offProd = 64
	offCons = 128
)

func store64(b []byte, off int, v uint64) { atomic.StoreUint64((*uint64)(unsafe.Pointer(&b[off])), v) }

// waitEvent waits for an event of type typ that satisfies match (nil: any).
func waitEvent(t *testing.T, d *verbs.Device, typ verbs.EventType, match func(verbs.AsyncEvent) bool) verbs.AsyncEvent {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-d.Events():
			if ev.Type == typ && (match == nil || match(ev)) {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %v event", typ)
		}
	}
}

// Malformed SQEs written straight into the ring complete with an error
// status, in order; a corrupt producer index stops the QP (QP_FATAL) and
// nothing else; another client's QPs carry on.
func TestHostileSendQueue(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	a := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	b := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	connect(t, a, b)
	d2 := e.client()
	c := newSide(t, d2, e.host, verbs.QPTypeRC, nil, nil)
	f := newSide(t, d2, e.host, verbs.QPTypeRC, nil, nil)
	connect(t, c, f)

	// A good WRITE, then an SQE claiming 200 SGEs, then one whose SGE wraps
	// past 2^64. (Descriptor offsets: ring/layout.go.)
	if err := a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	verbs.SQPublish(a.qp, func(s []byte) {
		binary.LittleEndian.PutUint64(s[0:], 2)
		binary.LittleEndian.PutUint32(s[8:], uint32(verbs.SendSignaled))
		s[12] = byte(verbs.WRSend)
		s[13] = 200
	})
	verbs.SQPublish(a.qp, func(s []byte) {
		binary.LittleEndian.PutUint64(s[0:], 3)
		binary.LittleEndian.PutUint32(s[8:], uint32(verbs.SendSignaled))
		s[12] = byte(verbs.WRSend)
		s[13] = 1
		binary.LittleEndian.PutUint64(s[ring.SQEDescSize:], math.MaxUint64-4)
		binary.LittleEndian.PutUint32(s[ring.SQEDescSize+8:], 100)
		binary.LittleEndian.PutUint32(s[ring.SQEDescSize+12:], a.mr.LKey())
	})
	wcs := pollN(t, a.scq, 2)
	if wcs[0].WRID != 1 || wcs[0].Status != verbs.WCSuccess || wcs[1].WRID != 2 || wcs[1].Status != verbs.WCLocQPOpErr {
		t.Fatalf("completions %+v", wcs)
	}
	// RC: the error moved the QP to ERR, so WR 3 is flushed (or faulted).
	if wc := pollN(t, a.scq, 1)[0]; wc.WRID != 3 || wc.Status == verbs.WCSuccess {
		t.Fatalf("third completion %+v", wc)
	}

	// The other client still works.
	if err := c.qp.PostSend(verbs.SendWR{ID: 9, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{c.mr.SGE(0, 8)}, RemoteAddr: f.mr.Addr(), RKey: f.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, c.scq, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("other client: %+v", wc)
	}

	// A producer index a million entries ahead: QP_FATAL, QP in ERR.
	g := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	h := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	connect(t, g, h)
	store64(verbs.SQRing(g.qp), offProd, 1<<20)
	verbs.RingBell(g.qp)
	waitEvent(t, d, verbs.EventQPFatal, func(ev verbs.AsyncEvent) bool { return ev.QP == g.qp })
	linktest.WaitFor(t, "QP in ERR", waitLimit, waitPoll, func() bool {
		attr, _, err := g.qp.Query()
		return err == nil && attr.State == verbs.QPStateErr
	})
	if err := c.qp.PostSend(verbs.SendWR{ID: 10, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{c.mr.SGE(0, 8)}, RemoteAddr: f.mr.Addr(), RKey: f.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, c.scq, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("other client after the corrupt ring: %+v", wc)
	}
}

// A CQ whose consumer index the client sets ahead of every completion
// written goes to error (CQ_ERR). (An index that is merely wrong but
// plausible, less than a ring behind, only costs the client its own
// completions: the daemon writes at its own index, never the client's.)
func TestHostileCQIndex(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	a := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	b := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	connect(t, a, b)
	store64(verbs.CQRing(a.scq), offCons, 1000)
	if err := a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, d, verbs.EventCQErr, func(ev verbs.AsyncEvent) bool { return ev.CQ == a.scq })
	// The device is fine: another client's queues work.
	d2 := e.client()
	c := newSide(t, d2, e.host, verbs.QPTypeRC, nil, nil)
	f := newSide(t, d2, e.host, verbs.QPTypeRC, nil, nil)
	connect(t, c, f)
	if err := c.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{c.mr.SGE(0, 8)}, RemoteAddr: f.mr.Addr(), RKey: f.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	pollN(t, c.scq, 1)
}

// A handle is only good on the connection that made it.
func TestHandlesArePerConnection(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d1, d2 := e.client(), e.client()
	s1 := newSide(t, d1, e.host, verbs.QPTypeRC, nil, nil)
	// d2 has made nothing yet, so d1's handle numbers mean nothing there:
	// a PD object of d1 used through d2 (same handle number) is ENOENT.
	pd2, err := d2.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pd2.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: s1.scq, RecvCQ: s1.rcq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}}); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("QP on another connection's CQs: %v, want ENOENT", err)
	}
	if _, err := pd2.RegMR(s1.buf, verbs.AccessLocalWrite); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("MR over another connection's buffer: %v, want ENOENT", err)
	}
}

// Everything a client owned is destroyed when it disconnects: QPs leave
// the device, MRs the memory table, and every shared mapping is unmapped.
func TestDisconnectDestroysEverything(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	before := vrnicMappings(t)
	d := e.client()
	pd, _ := d.AllocPD()
	srq, err := pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: 16, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	a := newSide(t, d, e.host, verbs.QPTypeRC, nil, pd)
	b := newSide(t, d, e.host, verbs.QPTypeRC, srq, pd)
	connect(t, a, b)
	u := newSide(t, d, e.host, verbs.QPTypeUD, nil, pd)
	udReady(t, u, 5)
	if _, err := pd.CreateAH(verbs.AHAttr{DGID: a.gid, SGIDIndex: a.gidx, Port: 1}); err != nil {
		t.Fatal(err)
	}
	mw, _ := pd.AllocMW(verbs.MWType1)
	if err := mw.Bind(a.mr, a.mr.Addr(), 4096, verbs.AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	fmr, _ := pd.AllocMR(4)
	// Work in flight: posted receives and an outstanding READ.
	_ = srq.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{b.mr.SGE(0, 64)}})
	keys := []uint32{a.mr.LKey(), b.mr.LKey(), u.mr.LKey(), fmr.LKey(), mw.RKey()}
	if n := len(e.host.Dev.QPs()); n != 3 {
		t.Fatalf("%d QPs on the device, want 3", n)
	}
	if vrnicMappings(t) <= before {
		t.Fatal("no shared mappings while the client is connected")
	}
	d.Close()
	linktest.WaitFor(t, "client gone from the server", waitLimit, waitPoll, func() bool { return e.srv.Clients() == 0 })
	if n := len(e.host.Dev.QPs()); n != 0 {
		t.Fatalf("%d QPs left on the device", n)
	}
	for _, k := range keys {
		if info, ok := e.host.Dev.Mem().Query(k); ok {
			t.Errorf("key %#x still registered: %+v", k, info)
		}
	}
	for _, s := range []*side{a, b, u} {
		s.buf.Close() // the client's own view of its buffers
	}
	if n := vrnicMappings(t); n != before {
		t.Fatalf("%d vrnic mappings left (had %d before the client)", n, before)
	}
}

// A real client process killed with SIGKILL: the server notices and
// destroys what it owned.
func TestClientProcessDies(t *testing.T) {
	if os.Getenv("VRNIC_TEST_CLIENT") != "" {
		return
	}
	e := newEnv(t, verbsock.Limits{})
	path := filepath.Join(t.TempDir(), "vrnicd.sock")
	l, err := server.Listen(path, -1)
	if err != nil {
		t.Fatal(err)
	}
	go e.srv.Serve(l)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperClientProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "VRNIC_TEST_CLIENT="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	buf := make([]byte, 4096)
	got := ""
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && !strings.Contains(got, "READY") {
		n, err := out.Read(buf)
		got += string(buf[:n])
		if err != nil {
			break
		}
	}
	if !strings.Contains(got, "READY") {
		t.Fatalf("helper client did not get ready: %q", got)
	}
	linktest.WaitFor(t, "helper's QPs", waitLimit, waitPoll, func() bool { return len(e.host.Dev.QPs()) == 2 })
	for _, q := range e.host.Dev.QPs() {
		if q.Owner != cmd.Process.Pid {
			t.Errorf("QP %#x owner %d, want the helper's pid %d", q.QPN, q.Owner, cmd.Process.Pid)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	linktest.WaitFor(t, "dead client's QPs destroyed", waitLimit, waitPoll, func() bool { return len(e.host.Dev.QPs()) == 0 && e.srv.Clients() == 0 })
}

// TestHelperClientProcess is the client of TestClientProcessDies (it does
// nothing in a normal run).
func TestHelperClientProcess(t *testing.T) {
	path := os.Getenv("VRNIC_TEST_CLIENT")
	if path == "" {
		t.Skip("helper process for TestClientProcessDies")
	}
	d, err := verbs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	pd, _ := d.AllocPD()
	cq, err := d.CreateCQ(16, true)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	buf, _ := pd.AllocBuffer(1 << 16)
	if _, err := pd.RegMR(buf, verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("READY\n")
	time.Sleep(30 * time.Second) // killed long before
}
