package verbs_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// Resolve the UD QP behind an rdma_cm UDP port (a kernel `udaddy` server
// or ListenUD) and send it a datagram, as udaddy's client does. (Needs a
// running vrnicd, so it is compiled but not run.)
func ExampleDevice_ResolveUD() {
	dev, err := verbs.Open("")
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(64, false)
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		log.Fatal(err)
	}
	if err := verbs.ReadyUD(qp); err != nil { // RTS, Q_Key verbs.UDQKey
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	peer, err := dev.ResolveUD(ctx, netip.MustParseAddrPort("192.0.2.11:7174"), nil)
	var se *verbs.SIDRError
	if errors.As(err, &se) {
		log.Fatalf("SIDR status %d", se.Status) // 1: nobody listens on the port
	} else if err != nil {
		log.Fatal(err)
	}
	ah, err := pd.CreateAH(peer.AH)
	if err != nil {
		log.Fatal(err)
	}
	buf, _ := pd.AllocBuffer(4096)
	mr, _ := pd.RegMR(buf, verbs.AccessLocalWrite)
	copy(buf.Bytes(), "hello")
	err = qp.PostSend(verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, AH: ah,
		RemoteQPN: peer.QPN, RemoteQKey: peer.QKey, SGL: []verbs.SGE{mr.SGE(0, 5)}})
	fmt.Println(err)
}

// Answer SIDR requests with a UD QP whose receives are posted first: the
// peer may send as soon as it has the answer.
func ExampleConn_AcceptUD() {
	dev, err := verbs.Open("")
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	l, err := dev.ListenUD(netip.AddrPortFrom(netip.IPv4Unspecified(), 7174))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(64, false)
	buf, _ := pd.AllocBuffer(1 << 16)
	mr, _ := pd.RegMR(buf, verbs.AccessLocalWrite)
	for {
		req, ev, err := l.Accept(context.Background())
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("SIDR request from", ev.Peer)
		qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			_ = req.Reject(nil) // SIDR status 2
			continue
		}
		_ = verbs.ReadyUD(qp)
		_ = qp.PostRecv(verbs.RecvWR{SGL: []verbs.SGE{mr.SGE(0, verbs.GRHLen+1024)}})
		if err := req.AcceptUD(qp, nil); err != nil {
			log.Print(err)
		}
	}
}
