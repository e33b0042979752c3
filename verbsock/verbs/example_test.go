package verbs_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// Open a device, register memory and make a queue pair, as ibv_rc_pingpong
// does. (Needs a running vrnicd, so it is compiled but not run.)
func Example() {
	dev, err := verbs.Open("/run/vrnicd/vrnicd.sock")
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	attr, _ := dev.Query()
	port, _ := dev.QueryPort(1)
	gid, _ := dev.QueryGID(1, 1) // rxe puts the IPv4-mapped GID at index 1
	fmt.Println(dev.Name(), attr.MaxQPWR, port.ActiveMTU, gid)

	pd, _ := dev.AllocPD()
	buf, _ := pd.AllocBuffer(1 << 20) // a sealed memfd the daemon maps too
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if err != nil {
		log.Fatal(err)
	}
	cq, _ := dev.CreateCQ(256, true)
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 128, MaxRecvWR: 128, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}})
	if err != nil {
		log.Fatal(err)
	}
	// Exchange qp.QPN(), gid, mr.Addr() and mr.RKey() with the peer out of
	// band, then move the QP through INIT, RTR and RTS (see QP.Modify).
	fmt.Println(qp.QPN(), mr.LKey(), mr.RKey())
}

// Post a receive and a send, then poll for their completions. Neither post
// nor poll goes through the daemon's socket: they are writes and reads of
// shared memory (plus a doorbell eventfd when the daemon is idle).
func ExampleQP_PostSend() {
	var qp *verbs.QP // connected, RTS
	var mr *verbs.MR
	var cq *verbs.CQ
	if err := qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{mr.SGE(4096, 4096)}}); err != nil {
		log.Fatal(err)
	}
	copy(mr.Bytes(), "hello")
	if err := qp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{mr.SGE(0, 5)}}); err != nil {
		log.Fatal(err)
	}
	wc := make([]verbs.WC, 16)
	for n := 0; n < 2; {
		k := cq.Poll(wc)
		for _, c := range wc[:k] {
			if c.Status != verbs.WCSuccess {
				log.Fatalf("WR %d: %v", c.WRID, c.Status)
			}
		}
		n += k
	}
}

// Wait for completions without spinning: arm the CQ, poll once more (a
// completion that arrived before the arming raises no event), then wait.
func ExampleCQ_WaitEvent() {
	var cq *verbs.CQ // created with events
	wc := make([]verbs.WC, 16)
	for {
		if n := cq.Poll(wc); n > 0 {
			fmt.Println("completions:", n)
			continue
		}
		if err := cq.ReqNotify(false); err != nil {
			log.Fatal(err)
		}
		if n := cq.Poll(wc); n > 0 {
			fmt.Println("completions:", n)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := cq.WaitEvent(ctx)
		cancel()
		if err != nil {
			return
		}
	}
}

// Asynchronous events: a QP that went to ERR, an SRQ below its limit, the
// port going down, the daemon going away.
func ExampleDevice_Events() {
	var dev *verbs.Device
	for ev := range dev.Events() {
		switch ev.Type {
		case verbs.EventQPFatal:
			log.Printf("QP %#x is in ERR", ev.QP.QPN())
		case verbs.EventSRQLimit:
			log.Printf("SRQ %d needs receives", ev.SRQ.SRQN())
		case verbs.EventDeviceFatal:
			log.Print("vrnicd went away")
		}
	}
}
