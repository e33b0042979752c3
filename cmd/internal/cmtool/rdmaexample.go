package cmtool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/vrnic/vrnicd/cmd/internal/oob/getopt"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// librdmacm's rdma_server and rdma_client (examples/rdma_server.c,
// rdma_client.c): one connection; each side posts a 16-byte receive
// before the connection is up, the client SENDs 16 bytes, the server
// answers with 16, both disconnect. Command line: getopt "s:p:" (-s the
// server's address, the server's default 0.0.0.0 and the client's
// 127.0.0.1; -p the port, 7471) and --socket.

// exampleMsg is the examples' message size (send_msg, recv_msg).
const exampleMsg = 16

var exampleOptions = []getopt.Option{{Short: 's', HasArg: true}, {Short: 'p', HasArg: true}, {Long: "socket", HasArg: true}}

// ExampleArgs parses rdma_server's and rdma_client's command line.
func ExampleArgs(name, defAddr string, args []string, stdout, stderr io.Writer) (netip.AddrPort, string, error) {
	addr, port, socket := defAddr, fmt.Sprint(DefaultPort), verbs.SocketPath()
	opts, err := getopt.Options(exampleOptions, args)
	for _, o := range opts {
		switch o.Option.Short {
		case 's':
			addr = o.Arg
		case 'p':
			port = o.Arg
		default:
			socket = o.Arg
		}
	}
	var a netip.Addr
	var p uint16
	if err == nil {
		a, err = Lookup(addr)
	}
	if err == nil {
		p, err = Port(port)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		fmt.Fprintf(stdout, "usage: %s\n\t[-s server_address]\n\t[-p port_number]\n\t[--socket path]\n", name)
		return netip.AddrPort{}, "", err
	}
	return netip.AddrPortFrom(a, p), socket, nil
}

// exampleEP is rdma_create_ep's: the device, a PD, one CQ for both
// queues, a QP of one send and one receive (every send signalled), the
// 16-byte receive and send buffers.
type exampleEP struct {
	dev        *verbs.Device
	qp         *verbs.QP
	cq         *verbs.CQ
	recv, send *verbs.MR
}

func newExampleEP(dev *verbs.Device) (*exampleEP, error) {
	pd, err := dev.AllocPD()
	if err != nil {
		return nil, fmt.Errorf("rdma_create_ep: %w", err)
	}
	ep := &exampleEP{dev: dev}
	if ep.cq, err = dev.CreateCQ(2, true); err != nil {
		return nil, fmt.Errorf("rdma_create_ep: %w", err)
	}
	if ep.qp, err = pd.CreateCMQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: ep.cq, RecvCQ: ep.cq, SQSigAll: true,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, fmt.Errorf("rdma_create_ep: %w", err)
	}
	if ep.recv, err = Reg(pd, exampleMsg, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("rdma_reg_msgs for recv_msg: %w", err)
	}
	if ep.send, err = Reg(pd, exampleMsg, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("rdma_reg_msgs for send_msg: %w", err)
	}
	if err := ep.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{ep.recv.SGE(0, exampleMsg)}}); err != nil {
		return nil, fmt.Errorf("rdma_post_recv: %w", err)
	}
	return ep, nil
}

func (ep *exampleEP) postSend() error {
	if err := ep.qp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, SGL: []verbs.SGE{ep.send.SGE(0, exampleMsg)}}); err != nil {
		return fmt.Errorf("rdma_post_send: %w", err)
	}
	return nil
}

// exampleParams is what librdmacm sends for rdma_connect(id, NULL) and
// rdma_accept(id, NULL): 7 retries, 7 RNR retries.
var exampleParams = verbs.ConnParams{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}

// ExampleServer is rdma_server's run: listen on addr, take one request,
// receive 16 bytes, send 16 back, disconnect. It prints rdma_server's
// "start" and "end STATUS" lines; the status is 0 on success.
func ExampleServer(ctx context.Context, addr netip.AddrPort, socket string, out io.Writer, onListen func()) int {
	fmt.Fprintf(out, "rdma_server: start\n")
	err := exampleServer(ctx, addr, socket, onListen)
	status := 0
	if err != nil {
		fmt.Fprintln(out, err)
		status = -1
	}
	fmt.Fprintf(out, "rdma_server: end %d\n", status)
	return status
}

func exampleServer(ctx context.Context, addr netip.AddrPort, socket string, onListen func()) error {
	dev, err := verbs.Open(socket)
	if err != nil {
		return fmt.Errorf("rdma_create_ep: %w", err)
	}
	defer dev.Close()
	l, err := dev.Listen(addr)
	if err != nil {
		return fmt.Errorf("rdma_listen: %w", err)
	}
	defer l.Close()
	if onListen != nil {
		onListen()
	}
	conn, _, err := l.Accept(ctx)
	if err != nil {
		return fmt.Errorf("rdma_get_request: %w", err)
	}
	defer conn.Close()
	ep, err := newExampleEP(dev)
	if err != nil {
		_ = conn.Reject(nil)
		return err
	}
	if err := conn.Accept(ctx, ep.qp, exampleParams); err != nil {
		return fmt.Errorf("rdma_accept: %w", err)
	}
	defer conn.Disconnect()
	if err := Completions(ctx, ep.cq, 1, conn); err != nil {
		return fmt.Errorf("rdma_get_recv_comp: %w", err)
	}
	if err := ep.postSend(); err != nil {
		return err
	}
	// The client disconnects once it has the answer; its DREQ can move
	// our QP to ERR before the answer's ACK is seen, flushing the SEND
	// (rdma_server takes any completion here).
	var wce *WCError
	if err := Completions(ctx, ep.cq, 1, nil); err != nil && !(errors.As(err, &wce) && wce.Status == verbs.WCWRFlushErr) {
		return fmt.Errorf("rdma_get_send_comp: %w", err)
	}
	return nil
}

// ExampleClient is rdma_client's run: connect to addr, send 16 bytes,
// receive 16, disconnect; "start" and "end STATUS" as rdma_client prints.
func ExampleClient(ctx context.Context, addr netip.AddrPort, socket string, out io.Writer) int {
	fmt.Fprintf(out, "rdma_client: start\n")
	err := exampleClient(ctx, addr, socket)
	status := 0
	if err != nil {
		fmt.Fprintln(out, err)
		status = -1
	}
	fmt.Fprintf(out, "rdma_client: end %d\n", status)
	return status
}

func exampleClient(ctx context.Context, addr netip.AddrPort, socket string) error {
	dev, err := verbs.Open(socket)
	if err != nil {
		return fmt.Errorf("rdma_create_ep: %w", err)
	}
	defer dev.Close()
	ep, err := newExampleEP(dev)
	if err != nil {
		return err
	}
	conn, err := dev.Dial(ctx, addr, ep.qp, exampleParams)
	if err != nil {
		if t, status, ok := FailedEvent(err); ok {
			return fmt.Errorf("rdma_connect: %s, error %d", EventName(t), status)
		}
		return fmt.Errorf("rdma_connect: %w", err)
	}
	defer conn.Close()
	defer conn.Disconnect()
	if err := ep.postSend(); err != nil {
		return err
	}
	// One CQ for both queues: the send's and the receive's completions,
	// in either order.
	if err := Completions(ctx, ep.cq, 2, conn); err != nil {
		return fmt.Errorf("rdma_get_send_comp: %w", err)
	}
	return nil
}
