package verbs_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// Connect a QP to an rdma_cm listener (a kernel `rping -s` or another
// vrnicd client) and wait for the disconnect, as an rdma_cm client does.
// CreateCMQP leaves the QP in INIT as rdma_create_qp does, so receives can
// be posted first; the daemon runs the CM exchange over QP1 and takes the
// QP to RTS; Dial returns once the connection is established, with the
// server's private data (here its buffer's address and rkey). (Needs a
// running vrnicd, so it is compiled but not run.)
func ExampleDevice_Dial() {
	dev, err := verbs.Open("/run/vrnicd/vrnicd.sock")
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(64, true)
	qp, err := pd.CreateCMQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		log.Fatal(err)
	}
	// ... post the first receives on qp ...
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
	priv := conn.PrivateData() // what the server passed to Accept
	addr, rkey := binary.BigEndian.Uint64(priv), binary.BigEndian.Uint32(priv[8:])
	fmt.Printf("server buffer %#x rkey %#x\n", addr, rkey)
	// ... post sends and receives on qp, RDMA to addr with rkey ...
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

// Listen for connect requests and accept each with a new QP, handing the
// client a buffer's address and rkey in the accept's private data, as an
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
	buf, _ := pd.AllocBuffer(1 << 20)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
	if err != nil {
		log.Fatal(err)
	}
	info := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(nil, mr.Addr()), mr.RKey())
	ctx := context.Background()
	for {
		conn, req, err := l.Accept(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("request from", req.Peer, "private data", string(req.PrivateData))
		qp, err := pd.CreateCMQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			_ = conn.Reject([]byte("no QP"))
			continue
		}
		// ... post the first receives on qp ...
		// ResponderResources > 0: the CM gives the QP remote read (and
		// atomics) besides remote write.
		if err := conn.Accept(ctx, qp, verbs.ConnParams{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7,
			PrivateData: info}); err != nil {
			log.Print(err)
		}
	}
}
