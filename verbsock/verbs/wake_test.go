package verbs_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// Attacks on the wake-up channels (doorbells, completion events): a client
// that makes its descriptors blocking, floods them, or never reads them
// must not pin a daemon thread or hold up its teardown. The daemon runs in
// this process, so its threads are this process's.

func threads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
	return 0
}

// attack plays a client that shares its wake-up descriptors with the
// daemon as they were (eventfds): for d it writes to each (waking the
// daemon's reader), takes the count back itself, and clears O_NONBLOCK,
// so that a daemon read or write that follows blocks; with fill it first
// brings an eventfd's counter to its maximum, so a daemon write blocks.
func attack(fds []int, d time.Duration, fill bool) {
	one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	full := []byte{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	var b [8]byte
	for end := time.Now().Add(d); time.Now().Before(end); {
		for _, fd := range fds {
			fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
			if err != nil {
				continue
			}
			_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl|unix.O_NONBLOCK)
			if fill {
				_, _ = unix.Write(fd, full)
			} else {
				_, _ = unix.Write(fd, one)
				_, _ = unix.Read(fd, b[:])
			}
			_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
		}
	}
}

// Hole: a client cleared O_NONBLOCK on the doorbell eventfd it shared with
// the daemon, and each QP's doorbell reader then blocked in read(2) on a
// thread of its own, until the thread limit killed the daemon.
func TestClientCannotPinDaemonThreadsThroughDoorbells(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(64, false)
	if err != nil {
		t.Fatal(err)
	}
	before := threads(t)
	const nqp = 48
	var fds []int
	for i := range nqp {
		q, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatalf("QP %d: %v", i, err)
		}
		fds = append(fds, verbs.DoorbellFD(q))
	}
	attack(fds, time.Second, false)
	time.Sleep(200 * time.Millisecond) // let every doorbell reader go back to waiting
	if after := threads(t); after > before+8 {
		t.Fatalf("%d threads before %d blocking doorbells were rung, %d after", before, nqp, after)
	}
	// The daemon still serves: another client connects RC QPs and moves data.
	_, a, b := twoSides(t)
	connect(t, a, b)
	if err := a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, a.scq, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("after the attack: %+v", wc)
	}
}

// Hole: a client filled the completion eventfd's counter and cleared
// O_NONBLOCK; the daemon's notifier blocked in write(2), and the
// connection's teardown and Server.Close waited on it for ever.
func TestTeardownFinishesWhateverTheClientDidToItsCompletionChannel(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	a := newSide(t, d, e.host, verbs.QPTypeRC, nil, nil)
	b := newSide(t, e.peerClient(), e.peer, verbs.QPTypeRC, nil, nil)
	connect(t, a, b)
	stop := make(chan struct{})
	go func() {
		defer close(stop)
		attack([]int{verbs.CQEventFD(a.scq)}, time.Second, true)
	}()
	// Every completion, armed, sends an event nobody reads, far past the
	// channel's queue, while the client keeps its end blocking.
	for i := range 600 {
		if err := a.scq.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		pollN(t, a.scq, 1)
	}
	<-stop
	done := make(chan struct{})
	go func() {
		d.Close()
		e.srv.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("disconnect and Server.Close did not finish")
	}
}
