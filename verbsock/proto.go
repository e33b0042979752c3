package verbsock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// Version is the protocol version this package speaks. The Hello exchange
// is frozen across versions; every later message carries the negotiated
// version in its header.
const Version = 1

// Magic opens every Hello request ("VRNS").
const Magic = 0x534e5256

// HeaderSize is the size of the frame header.
const HeaderSize = 24

// MaxMessage is the largest frame (header and payload) either side sends.
const MaxMessage = 8192

// MaxFDs is the most descriptors one frame carries.
const MaxFDs = 4

// MaxErrorText bounds the message of an error reply.
const MaxErrorText = 1024

// Header flags.
const (
	FlagReply uint8 = 1 << 0 // a reply to the request with the same ID
	FlagEvent uint8 = 1 << 1 // an unsolicited asynchronous event (ID 0)
)

// Header starts every frame. All integers are little-endian.
//
//	off size field
//	0   2    version   protocol version (Hello: always 1)
//	2   2    op        operation (Op)
//	4   4    length    payload bytes that follow the header
//	8   8    id        request id, chosen by the client, echoed in the reply
//	16  4    status    0, or the errno of a failed request (replies only)
//	20  1    nfds      descriptors attached with SCM_RIGHTS
//	21  1    flags     FlagReply, FlagEvent
//	22  2    reserved  0
type Header struct {
	Version uint16
	Op      Op
	Length  uint32
	ID      uint64
	Status  uint32
	NFDs    uint8
	Flags   uint8
	_       uint16
}

// Put writes h into b[:HeaderSize].
func (h *Header) Put(b []byte) {
	_ = b[HeaderSize-1]
	binary.LittleEndian.PutUint16(b[0:], h.Version)
	binary.LittleEndian.PutUint16(b[2:], uint16(h.Op))
	binary.LittleEndian.PutUint32(b[4:], h.Length)
	binary.LittleEndian.PutUint64(b[8:], h.ID)
	binary.LittleEndian.PutUint32(b[16:], h.Status)
	b[20] = h.NFDs
	b[21] = h.Flags
	b[22], b[23] = 0, 0
}

// ParseHeader reads a header from b (at least HeaderSize bytes).
func ParseHeader(b []byte) (Header, bool) {
	if len(b) < HeaderSize {
		return Header{}, false
	}
	return Header{
		Version: binary.LittleEndian.Uint16(b[0:]),
		Op:      Op(binary.LittleEndian.Uint16(b[2:])),
		Length:  binary.LittleEndian.Uint32(b[4:]),
		ID:      binary.LittleEndian.Uint64(b[8:]),
		Status:  binary.LittleEndian.Uint32(b[16:]),
		NFDs:    b[20],
		Flags:   b[21],
	}, true
}

// Op is a protocol operation.
type Op uint16

const (
	OpHello       Op = 1
	OpQueryDevice Op = 2
	OpQueryPort   Op = 3
	OpQueryGID    Op = 4
	OpAllocPD     Op = 5
	OpDeallocPD   Op = 6
	OpMapMem      Op = 7
	OpUnmapMem    Op = 8
	OpRegMR       Op = 9
	OpDeregMR     Op = 10
	OpAllocMR     Op = 11
	OpAllocMW     Op = 12
	OpDeallocMW   Op = 13
	OpBindMW      Op = 14
	OpCreateCQ    Op = 15
	OpDestroyCQ   Op = 16
	OpResizeCQ    Op = 17
	OpReqNotifyCQ Op = 18
	OpCreateQP    Op = 19
	OpModifyQP    Op = 20
	OpQueryQP     Op = 21
	OpDestroyQP   Op = 22
	OpCreateSRQ   Op = 23
	OpModifySRQ   Op = 24
	OpQuerySRQ    Op = 25
	OpDestroySRQ  Op = 26
	OpCreateAH    Op = 27
	OpDestroyAH   Op = 28
	OpEvent       Op = 29 // server → client only
	OpQueryStats  Op = 30
	OpListQPs     Op = 31
	OpResizeSRQ   Op = 32
	OpCapture     Op = 33
	OpListCM      Op = 34
	OpRegMRSegs   Op = 35
	OpImpair      Op = 36
	OpAttachMcast Op = 37
	OpDetachMcast Op = 38
	OpListRes     Op = 39
	OpListClients Op = 40
	OpQueryDaemon Op = 41
	numOps        Op = 42
)

var opNames = [numOps]string{"op0", "hello", "query_device", "query_port", "query_gid", "alloc_pd", "dealloc_pd",
	"map_mem", "unmap_mem", "reg_mr", "dereg_mr", "alloc_mr", "alloc_mw", "dealloc_mw", "bind_mw",
	"create_cq", "destroy_cq", "resize_cq", "req_notify_cq", "create_qp", "modify_qp", "query_qp", "destroy_qp",
	"create_srq", "modify_srq", "query_srq", "destroy_srq", "create_ah", "destroy_ah", "event",
	"query_stats", "list_qps", "resize_srq", "capture", "list_cm", "reg_mr_segs", "impair",
	"attach_mcast", "detach_mcast", OpListRes: "list_res", OpListClients: "list_clients", OpQueryDaemon: "query_daemon"}

// Client-side operations: never on the wire, they name the verb of an
// error found by the SDK itself.
const (
	OpPostSend Op = 0x100 + iota
	OpPostRecv
	OpPostSRQRecv
)

func (o Op) String() string {
	if o < numOps {
		return opNames[o]
	}
	switch o {
	case OpPostSend:
		return "post_send"
	case OpPostRecv:
		return "post_recv"
	case OpPostSRQRecv:
		return "post_srq_recv"
	}
	if n, ok := cmOpNames[o]; ok {
		return n
	}
	return fmt.Sprintf("op%d", uint16(o))
}

// Error is a failed request as the client sees it: the operation, the
// errno the daemon returned and its explanation. errors.Is(err,
// syscall.EINVAL) and the like match the errno.
type Error struct {
	Op    Op
	Errno syscall.Errno
	Msg   string
}

func (e *Error) Error() string {
	if e.Msg == "" {
		return fmt.Sprintf("verbsock: %v: %v", e.Op, e.Errno)
	}
	// A daemon message that names its op already is not prefixed again
	// ("capture: capture: no QP ...").
	msg := strings.TrimPrefix(e.Msg, e.Op.String()+": ")
	return fmt.Sprintf("verbsock: %v: %v (%s)", e.Op, msg, e.Errno)
}

func (e *Error) Unwrap() error { return e.Errno }

// Errf builds an Error (the server side of a failed request).
func Errf(errno syscall.Errno, format string, args ...any) *Error {
	return &Error{Errno: errno, Msg: fmt.Sprintf(format, args...)}
}

// ErrnoOf maps an error to the errno a reply carries: the errno it wraps
// (syscall.Errno, or anything with an Errno() method such as mem.Error),
// EINVAL otherwise.
func ErrnoOf(err error) syscall.Errno {
	var e *Error
	if errors.As(err, &e) {
		return e.Errno
	}
	var n syscall.Errno
	if errors.As(err, &n) {
		return n
	}
	var en interface{ Errno() syscall.Errno }
	if errors.As(err, &en) {
		return en.Errno()
	}
	return syscall.EINVAL
}
