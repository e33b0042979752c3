// Package cmtool holds what vrnicd's counterparts of librdmacm's example
// programs (vrnic-ucmatose, vrnic-udaddy, vrnic-mckey, vrnic-cmtime,
// vrnic-rdma-server and vrnic-rdma-client) share: a QP as rdma_create_qp
// leaves it (INIT), a registered buffer, waiting for completions with the
// CQ's events, the rdma_cm event a failed Dial or Accept stands for, and
// the command-line address lookup.
package cmtool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// DefaultPort is the examples' rdma_cm port (7471).
const DefaultPort = 7471

// ErrDisconnected: the peer disconnected while completions were awaited.
var ErrDisconnected = errors.New("peer disconnected")

// Reg registers n bytes of a buffer of their own (ibv_reg_mr of a malloc).
func Reg(pd *verbs.PD, n int, access verbs.Access) (*verbs.MR, error) {
	b, err := pd.AllocBuffer(max(n, 1))
	if err != nil {
		return nil, err
	}
	return pd.RegMRRange(b, 0, uint64(n), b.Addr(), access)
}

// WCError is a completion in error.
type WCError struct {
	Status verbs.WCStatus
	Opcode verbs.WCOpcode
}

func (e *WCError) Error() string {
	return fmt.Sprintf("completion status %d (%v) opcode %v", e.Status, e.Status, e.Opcode)
}

// Completions waits for n successful completions on cq (made with events),
// sleeping on the CQ's event rather than spinning. A completion in error
// ends the wait with its status; so does a DISCONNECTED on conn's events
// (nil: not watched), and ctx.
func Completions(ctx context.Context, cq *verbs.CQ, n int, conn *verbs.Conn) error {
	wc := make([]verbs.WC, 8)
	for done := 0; done < n; {
		got := cq.Poll(wc[:min(len(wc), n-done)])
		for _, w := range wc[:got] {
			if w.Status != verbs.WCSuccess {
				return &WCError{Status: w.Status, Opcode: w.Opcode}
			}
		}
		if done += got; got > 0 || done == n {
			continue
		}
		if err := watch(conn); err != nil {
			return err
		}
		// Arm, then look once more: a completion that came before the
		// arming raises no event.
		if err := cq.ReqNotify(false); err != nil {
			return err
		}
		if got = cq.Poll(wc[:1]); got == 1 {
			if wc[0].Status != verbs.WCSuccess {
				return &WCError{Status: wc[0].Status, Opcode: wc[0].Opcode}
			}
			done++
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_ = cq.WaitEvent(wctx) // a timeout: look at the CM events again
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

func watch(conn *verbs.Conn) error {
	if conn == nil {
		return nil
	}
	select {
	case ev, ok := <-conn.Events():
		if !ok {
			return verbs.ErrClosed
		}
		if ev.Type == verbs.CMEventDisconnected {
			return ErrDisconnected
		}
	default:
	}
	return nil
}

// WaitEvent waits for a CM event of type want on conn, up to d (0: until
// ctx ends); other events are skipped.
func WaitEvent(ctx context.Context, conn *verbs.Conn, want verbs.CMEventType, d time.Duration) error {
	if d <= 0 {
		d = 1<<63 - 1
	}
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case ev, ok := <-conn.Events():
			if !ok {
				return verbs.ErrClosed
			}
			if ev.Type == want {
				return nil
			}
		case <-t.C:
			return fmt.Errorf("no %s event in %v", EventName(want), d)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// EventName is rdma_event_str.
func EventName(t verbs.CMEventType) string {
	switch t {
	case verbs.CMEventConnectRequest:
		return "RDMA_CM_EVENT_CONNECT_REQUEST"
	case verbs.CMEventUnreachable:
		return "RDMA_CM_EVENT_UNREACHABLE"
	case verbs.CMEventRejected:
		return "RDMA_CM_EVENT_REJECTED"
	case verbs.CMEventEstablished:
		return "RDMA_CM_EVENT_ESTABLISHED"
	case verbs.CMEventDisconnected:
		return "RDMA_CM_EVENT_DISCONNECTED"
	case verbs.CMEventTimewaitExit:
		return "RDMA_CM_EVENT_TIMEWAIT_EXIT"
	case verbs.CMEventAddrError:
		return "RDMA_CM_EVENT_ADDR_ERROR"
	case verbs.CMEventRouteError:
		return "RDMA_CM_EVENT_ROUTE_ERROR"
	case verbs.CMEventConnectError:
		return "RDMA_CM_EVENT_CONNECT_ERROR"
	}
	return "UNKNOWN EVENT"
}

// FailedEvent is the rdma_cm event and status a failed Dial or Accept
// stands for: the event of an error that has one (*verbs.RejectedError:
// REJECTED with the REJ reason; *verbs.AddrError: ADDR_ERROR, -ETIMEDOUT),
// UNREACHABLE with -ETIMEDOUT; ok is false for other errors.
func FailedEvent(err error) (t verbs.CMEventType, status int, ok bool) {
	var ev interface{ Event() verbs.CMEvent }
	switch {
	case errors.As(err, &ev):
		e := ev.Event()
		return e.Type, e.Status, true
	case errors.Is(err, verbs.ErrUnreachable):
		return verbs.CMEventUnreachable, -int(syscall.ETIMEDOUT), true
	}
	return 0, 0, false
}

// Lookup is the examples' getaddrinfo: an IP address or a host name.
func Lookup(s string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), nil
	}
	ips, err := net.LookupIP(s)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("getaddrinfo: %q: %v", s, err)
	}
	a, _ := netip.AddrFromSlice(ips[0])
	return a.Unmap(), nil
}

// Port parses a port operand (the examples take it as a string).
func Port(s string) (uint16, error) {
	var v uint64
	if _, err := fmt.Sscanf(s, "%d", &v); err != nil || v > 65535 || fmt.Sprint(v) != s {
		return 0, fmt.Errorf("invalid port %q", s)
	}
	return uint16(v), nil
}

// Concurrently runs f(i) for each i from 0 to n-1 at once and gives the
// first nonzero status in index order (0 if none): the examples' -c
// connections come up, and fail, together, and report as the first.
func Concurrently(n int, f func(i int) int) int {
	status := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status[i] = f(i)
		}()
	}
	wg.Wait()
	return FirstFailure(status)
}

// FirstFailure is the first nonzero of status (0 if none): the status of
// a test of several connections, as the examples return it.
func FirstFailure(status []int) int {
	for _, s := range status {
		if s != 0 {
			return s
		}
	}
	return 0
}

// RunTest is the end of cmatose's and udaddy's main: side's run (the
// client's or the server's), "test complete", destroy, "return status N";
// a nonzero N is also the error.
func RunTest(ctx context.Context, out io.Writer, side func(context.Context) int, destroy func()) error {
	status := side(ctx)
	fmt.Fprintf(out, "test complete\n")
	destroy()
	fmt.Fprintf(out, "return status %d\n", status)
	if status != 0 {
		return fmt.Errorf("return status %d", status)
	}
	return nil
}

// Release destroys a node's verbs objects in the examples' destroy_node
// order (AH, QP, CQs, MR, PD); nil ones were never made. Errors are
// ignored: the program is ending, and the daemon frees what is left.
func Release(ah *verbs.AH, qp *verbs.QP, cqs []*verbs.CQ, mr *verbs.MR, pd *verbs.PD) {
	if ah != nil {
		_ = ah.Destroy()
	}
	if qp != nil {
		_ = qp.Destroy()
	}
	for _, cq := range cqs {
		if cq != nil {
			_ = cq.Destroy()
		}
	}
	if mr != nil {
		_ = mr.Dereg()
	}
	if pd != nil {
		_ = pd.Dealloc()
	}
}
