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

// Connect a QP to an rdma_cm listener (a kernel `rping -s` or another
// vrnicd client) and wait for the disconnect, as an rdma_cm client does.
// The daemon runs the CM exchange over QP1 and takes the QP from RESET to
// RTS; Dial returns once the connection is established. (Needs a running
// vrnicd, so it is compiled but not run.)
func ExampleDevice_Dial() {
	dev, err := verbs.Open("/run/vrnicd/vrnicd.sock")
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(64, true)
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := dev.Dial(ctx, netip.MustParseAddrPort("192.0.2.11:7174"), qp, verbs.ConnParams{
		ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7, PrivateData: []byte("hello")})
	var rej *verbs.RejectedError
	if errors.As(err, &rej) {
		log.Fatalf("rejected, reason %d", rej.Reason) // 8: nobody listens on the port
	} else if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	// ... post sends and receives on qp ...
	if err := conn.Disconnect(); err != nil {
		log.Fatal(err)
	}
	for ev := range conn.Events() {
		fmt.Println(ev.Type) // DISCONNECTED, then TIMEWAIT_EXIT
		if ev.Type == verbs.CMEventTimewaitExit {
			break
		}
	}
}

// Listen for connect requests and accept each with a new QP, as an
// rdma_cm server does.
func ExampleListener_Accept() {
	dev, err := verbs.Open("/run/vrnicd/vrnicd.sock")
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	l, err := dev.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), 7174))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(64, true)
	ctx := context.Background()
	for {
		conn, req, err := l.Accept(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("request from", req.Peer, "private data", string(req.PrivateData))
		qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			_ = conn.Reject([]byte("no QP"))
			continue
		}
		if err := conn.Accept(ctx, qp, verbs.ConnParams{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
			log.Print(err)
		}
	}
}
