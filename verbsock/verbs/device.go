// Package verbs is the Go SDK of vrnicd: RDMA verbs for client programs,
// shaped like libibverbs. A Device is a connection to the daemon's Unix
// socket; protection domains, memory regions, completion queues, queue
// pairs, shared receive queues, address handles and memory windows hang
// off it.
//
// The data path does not enter the daemon's socket: memory (Buffer) is a
// sealed memfd both processes map, so the device reads and writes it
// directly; QP.PostSend, QP.PostRecv, SRQ.PostRecv and CQ.Poll only touch
// shared-memory rings, and ring a doorbell only when the daemon
// said it went idle. Completion events (CQ.ReqNotify, CQ.WaitEvent) come
// through a socketpair the daemon only ever writes non-blocking, and asynchronous events (QP fatal, SRQ limit, port
// state, device fatal) through Device.Events.
//
// Every method is safe for concurrent use. Errors are *Error values that
// match their errno with errors.Is (syscall.EINVAL for bad arguments,
// ENOENT for an unknown object, EBUSY for an object still in use, ENOMEM
// for a full queue, EDQUOT for a per-client limit of the daemon).
package verbs

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/ibv"
	"golang.org/x/sys/unix"
)

// ErrClosed is returned by verbs on a closed Device (or one whose daemon
// went away); it matches syscall.ENODEV too.
var ErrClosed = &verbsock.Error{Errno: syscall.ENODEV, Msg: "device closed"}

// AsyncEvent is an asynchronous event (struct ibv_async_event). QP, CQ or
// SRQ names the object an affiliated event is about (nil if it is already
// destroyed); Port the port of a port event.
type AsyncEvent struct {
	Type EventType
	QP   *QP
	CQ   *CQ
	SRQ  *SRQ
	Port uint32
	// Lost is, for EventLost, how many events the daemon dropped because
	// they were not read in time.
	Lost uint32
}

func (e AsyncEvent) String() string {
	switch {
	case e.QP != nil:
		return fmt.Sprintf("%v on QP %#x", e.Type, e.QP.QPN())
	case e.CQ != nil:
		return fmt.Sprintf("%v on a CQ", e.Type)
	case e.SRQ != nil:
		return fmt.Sprintf("%v on SRQ %d", e.Type, e.SRQ.SRQN())
	}
	return e.Type.String()
}

// Device is an open vrnicd device (ibv_context).
type Device struct {
	conn     *verbsock.Conn
	name     string
	limits   Limits
	pageSize int
	attr     DeviceAttr

	nextID  atomic.Uint64
	mu      sync.Mutex
	pending map[uint64]chan reply
	closed  bool

	events     chan AsyncEvent
	readerDone chan struct{}
	// helpers are the goroutines the device starts for a caller (a
	// refused connect request's REJ, a ResolveAddr's call): Close waits
	// for them.
	helpers   sync.WaitGroup
	closeOnce sync.Once

	objs sync.Map // handle → *QP, *CQ or *SRQ, for events
	cm   cmState  // rdma_cm listeners and connections (cm.go)
	mrs  sync.Map // key index → *MR, for gathering inline data
}

type reply struct {
	h       verbsock.Header
	payload []byte
	fds     []int
}

// Open connects to the daemon at socketPath (ibv_open_device); "" is
// SocketPath(): $VRNICD_SOCKET, else DefaultSocket.
func Open(socketPath string) (*Device, error) {
	if socketPath == "" {
		socketPath = SocketPath()
	}
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: socketPath, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("verbs: connecting to %s: %w", socketPath, err)
	}
	d, err := OpenConn(uc)
	if err != nil {
		uc.Close()
		return nil, err
	}
	return d, nil
}

// OpenConn opens a device over an already connected unixpacket socket
// (for example one end of verbsock.Socketpair). The Device owns uc.
func OpenConn(uc *net.UnixConn) (*Device, error) {
	d := &Device{conn: verbsock.NewConn(uc), pending: map[uint64]chan reply{},
		events: make(chan AsyncEvent, 256), readerDone: make(chan struct{})}
	go d.reader()
	var hr verbsock.HelloResp
	if _, err := d.call(verbsock.OpHello, &verbsock.HelloReq{Magic: verbsock.Magic, MinVersion: 1, MaxVersion: verbsock.Version},
		nil, &hr); err != nil {
		d.Close()
		return nil, err
	}
	d.name = verbsock.CString(hr.DevName[:])
	d.limits = hr.Limits
	d.pageSize = int(hr.PageSize)
	if d.pageSize != unix.Getpagesize() {
		d.Close()
		return nil, fmt.Errorf("verbs: daemon page size %d, ours %d", hr.PageSize, unix.Getpagesize())
	}
	a, err := d.Query()
	if err != nil {
		d.Close()
		return nil, err
	}
	d.attr = a
	return d, nil
}

// Name is the device name (ibv_get_device_name).
func (d *Device) Name() string { return d.name }

// Limits are the daemon's quotas for this connection.
func (d *Device) Limits() Limits { return d.limits }

// Events delivers asynchronous events (ibv_get_async_event). It is closed
// when the device closes; if the daemon goes away first, the last event is
// EventDeviceFatal. Events not read in time are dropped (an EventLost
// tells how many).
func (d *Device) Events() <-chan AsyncEvent { return d.events }

// Close closes the connection: the daemon destroys every object this
// device still owns. Rings are unmapped; Buffers stay mapped until their
// Close.
func (d *Device) Close() error {
	d.closeOnce.Do(func() {
		d.mu.Lock()
		d.closed = true // a close by hand is not DEVICE_FATAL
		d.mu.Unlock()
		d.conn.Close()
		<-d.readerDone
		d.helpers.Wait() // their calls fail at once on a closed connection
		d.objs.Range(func(_, v any) bool {
			switch o := v.(type) {
			case *QP:
				o.release()
			case *CQ:
				o.release()
			case *SRQ:
				o.release()
			}
			return true
		})
	})
	return nil
}

func (d *Device) reader() {
	defer close(d.readerDone)
	for {
		h, p, fds, err := d.conn.Read()
		if err != nil {
			var fe *verbsock.FrameError
			if errors.As(err, &fe) {
				continue // a frame we cannot use; its caller will time out only if it was a reply
			}
			break
		}
		if h.Flags&verbsock.FlagEvent != 0 && h.Op == verbsock.OpCMEvent {
			verbsock.CloseFDs(fds)
			d.deliverCM(p)
			continue
		}
		if h.Flags&verbsock.FlagEvent != 0 {
			verbsock.CloseFDs(fds)
			var ev verbsock.EventMsg
			if verbsock.Decode(p, &ev) == nil {
				d.deliver(ev)
			}
			continue
		}
		d.mu.Lock()
		ch := d.pending[h.ID]
		delete(d.pending, h.ID)
		d.mu.Unlock()
		if ch == nil {
			verbsock.CloseFDs(fds)
			continue
		}
		ch <- reply{h: h, payload: append([]byte(nil), p...), fds: fds}
	}
	d.mu.Lock()
	byHand := d.closed
	d.closed = true
	pend := d.pending
	d.pending = nil
	d.mu.Unlock()
	for _, ch := range pend {
		close(ch)
	}
	d.closeCM()
	if !byHand {
		select {
		case d.events <- AsyncEvent{Type: EventDeviceFatal}:
		default:
		}
	}
	close(d.events)
}

func (d *Device) deliver(m verbsock.EventMsg) {
	ev := AsyncEvent{Type: m.Type, Port: m.Port, Lost: m.Count}
	if m.Type.ObjectOf() != verbsock.ObjPort && m.Type.ObjectOf() != verbsock.ObjNone {
		if o, ok := d.objs.Load(m.Handle); ok {
			switch o := o.(type) {
			case *QP:
				ev.QP = o
			case *CQ:
				ev.CQ = o
			case *SRQ:
				ev.SRQ = o
			}
		}
	}
	select {
	case d.events <- ev:
	default: // the application is not reading its events
	}
}

// call sends one request and waits for its reply. fds go with the request
// (they stay the caller's); the reply's descriptors are returned.
func (d *Device) call(op verbsock.Op, req any, fds []int, resp any) ([]int, error) {
	id := d.nextID.Add(1)
	ch := make(chan reply, 1)
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, ErrClosed
	}
	d.pending[id] = ch
	d.mu.Unlock()
	if err := d.conn.Write(verbsock.Header{Version: verbsock.Version, Op: op, ID: id}, verbsock.Encode(nil, req), fds, 0); err != nil {
		d.mu.Lock()
		if d.pending != nil {
			delete(d.pending, id)
		}
		d.mu.Unlock()
		return nil, fmt.Errorf("verbs: %v: %w", op, err)
	}
	r, ok := <-ch
	if !ok {
		return nil, ErrClosed
	}
	if r.h.Status != 0 {
		verbsock.CloseFDs(r.fds)
		return nil, &verbsock.Error{Op: op, Errno: syscall.Errno(r.h.Status), Msg: string(r.payload)}
	}
	s := verbsock.Specs[op]
	if len(r.fds) < s.RespFDs[0] || len(r.fds) > s.RespFDs[1] {
		verbsock.CloseFDs(r.fds)
		return nil, verr(op, syscall.EPROTO, "reply with %d descriptors", len(r.fds))
	}
	if err := verbsock.Decode(r.payload, resp); err != nil {
		verbsock.CloseFDs(r.fds)
		return nil, verr(op, syscall.EPROTO, "reply: %v", err)
	}
	return r.fds, nil
}

// Query returns the device attributes (ibv_query_device).
func (d *Device) Query() (DeviceAttr, error) {
	var a verbsock.DeviceAttr
	if _, err := d.call(verbsock.OpQueryDevice, &verbsock.Empty{}, nil, &a); err != nil {
		return DeviceAttr{}, err
	}
	return deviceAttr(&a), nil
}

// QueryPort returns a port's attributes (ibv_query_port); the device has
// port 1.
func (d *Device) QueryPort(port uint8) (PortAttr, error) {
	var a PortAttr
	_, err := d.call(verbsock.OpQueryPort, &verbsock.QueryPortReq{Port: uint32(port)}, nil, &a)
	return a, err
}

// QueryGID returns GID table entry index of a port (ibv_query_gid); an
// empty slot is the zero GID.
func (d *Device) QueryGID(port uint8, index int) (GID, error) {
	if index < 0 {
		return GID{}, verr(verbsock.OpQueryGID, syscall.EINVAL, "GID index %d", index)
	}
	var r verbsock.QueryGIDResp
	_, err := d.call(verbsock.OpQueryGID, &verbsock.QueryGIDReq{Port: uint32(port), Index: uint32(index)}, nil, &r)
	return GID(r.GID), err
}

// AllocPD makes a protection domain (ibv_alloc_pd).
func (d *Device) AllocPD() (*PD, error) {
	var r verbsock.AllocPDResp
	if _, err := d.call(verbsock.OpAllocPD, &verbsock.Empty{}, nil, &r); err != nil {
		return nil, err
	}
	return &PD{d: d, h: r.PD}, nil
}

func (d *Device) lookupMR(lkey uint32) *MR {
	if v, ok := d.mrs.Load(ibv.KeyIndex(lkey)); ok {
		return v.(*MR)
	}
	return nil
}
