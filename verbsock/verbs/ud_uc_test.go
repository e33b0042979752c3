package verbs_test

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link/linktest"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

func TestUDWithAH(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	a := newSide(t, d, e.host, verbs.QPTypeUD, nil, nil)
	b := newSide(t, d, e.host, verbs.QPTypeUD, nil, nil)
	udReady(t, a, 0x1111)
	udReady(t, b, 0x2222)
	ah, err := a.pd.CreateAH(verbs.AHAttr{DGID: b.gid, SGIDIndex: a.gidx, HopLimit: 64, Port: 1})
	if err != nil {
		t.Fatal(err)
	}
	copy(a.buf.Bytes(), "datagram payload")
	if err := b.qp.PostRecv(verbs.RecvWR{ID: 7, SGL: []verbs.SGE{b.mr.SGE(0, 40+512)}}); err != nil {
		t.Fatal(err)
	}
	// No wait for the daemon to take it: the receive owner reads the RQ
	// ring before every request, so a receive posted before the send is
	// there for the datagram.
	if err := a.qp.PostSend(verbs.SendWR{ID: 8, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, AH: ah,
		RemoteQPN: b.qp.QPN(), RemoteQKey: 0x2222, SGL: []verbs.SGE{a.mr.SGE(0, 16)}}); err != nil {
		t.Fatal(err)
	}
	wc := pollN(t, b.rcq, 1)[0]
	if wc.Status != verbs.WCSuccess || wc.ByteLen != 40+16 || wc.SrcQP != a.qp.QPN() || wc.Flags&verbs.WCWithGRH == 0 {
		t.Fatalf("UD receive %+v", wc)
	}
	if string(b.buf.Bytes()[40:56]) != "datagram payload" {
		t.Fatalf("UD payload %q", b.buf.Bytes()[40:56])
	}
	pollN(t, a.scq, 1)
	// A UD send without an AH is refused at post time.
	if err := a.qp.PostSend(verbs.SendWR{Opcode: verbs.WRSend}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("UD send without AH: %v", err)
	}
	// An AH of another PD is not usable.
	pd2, _ := d.AllocPD()
	ah2, err := pd2.CreateAH(verbs.AHAttr{DGID: b.gid, SGIDIndex: a.gidx, Port: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(verbs.SendWR{ID: 9, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, AH: ah2,
		RemoteQPN: b.qp.QPN(), RemoteQKey: 0x2222}); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, a.scq, 1)[0]; wc.WRID != 9 || wc.Status != verbs.WCLocQPOpErr {
		t.Fatalf("send through another PD's AH: %+v, want LOC_QP_OP_ERR", wc)
	}
	if err := pd2.Dealloc(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("dealloc PD with an AH: %v, want EBUSY", err)
	}
	if err := ah2.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := pd2.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.pd.CreateAH(verbs.AHAttr{DGID: b.gid, SGIDIndex: 200, Port: 1}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("AH with a bad SGID index: %v", err)
	}
}

func TestUCWrite(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	a := newSide(t, d, e.host, verbs.QPTypeUC, nil, nil)
	b := newSide(t, d, e.host, verbs.QPTypeUC, nil, nil)
	connect(t, a, b)
	copy(a.buf.Bytes(), bytes.Repeat([]byte("uc"), 3000))
	if err := a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 6000)}, RemoteAddr: b.mr.Addr() + 8, RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	pollN(t, a.scq, 1)
	linktest.WaitFor(t, "UC write data", waitLimit, waitPoll, func() bool { return bytes.Equal(b.buf.Bytes()[8:6008], a.buf.Bytes()[:6000]) })
	if err := a.qp.PostSend(verbs.SendWR{Opcode: verbs.WRRDMARead}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("READ on UC: %v, want EINVAL", err)
	}
}

// A receive posted before the peer sends must be there when the datagram
// arrives (UD has no RNR: a missing WQE drops it). This measures how often
// the device's receive owner handles a packet before draining the RQ ring.
func TestUDPostRecvThenImmediateSend(t *testing.T) {
	e := newEnv(t, verbsock.Limits{})
	d := e.client()
	a := newSide(t, d, e.host, verbs.QPTypeUD, nil, nil)
	b := newSide(t, d, e.host, verbs.QPTypeUD, nil, nil)
	udReady(t, a, 1)
	udReady(t, b, 2)
	ah, err := a.pd.CreateAH(verbs.AHAttr{DGID: b.gid, SGIDIndex: a.gidx, HopLimit: 64, Port: 1})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	got := 0
	var wc [4]verbs.WC
	for i := range n {
		if err := b.qp.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{b.mr.SGE(0, 40+64)}}); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, AH: ah,
			RemoteQPN: b.qp.QPN(), RemoteQKey: 2, SGL: []verbs.SGE{a.mr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		pollN(t, a.scq, 1)
		// The datagram is delivered (or dropped) before its send completes
		// on this loopback device, so what arrived is in the CQ by now or
		// soon; a dropped one leaves its WQE for the next datagram.
		want := i + 1 - int(e.host.Dev.Counters().Get(transport.RcvdDropped))
		deadline := time.Now().Add(time.Second)
		for got < want && time.Now().Before(deadline) {
			got += b.rcq.Poll(wc[:])
		}
	}
	dropped := e.host.Dev.Counters().Get(transport.RcvdDropped)
	if dropped > 0 {
		t.Fatalf("%d of %d datagrams dropped although their receive was posted first", dropped, n)
	}
	if got != n {
		t.Fatalf("%d of %d datagrams received, none counted dropped", got, n)
	}
}
