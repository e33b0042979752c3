package verbsock

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/verbsock/shm"
	"golang.org/x/sys/unix"
)

func pair(t *testing.T) (*Conn, *Conn) {
	t.Helper()
	a, b, err := Socketpair()
	if err != nil {
		t.Fatal(err)
	}
	ca, cb := NewConn(a), NewConn(b)
	t.Cleanup(func() { ca.Close(); cb.Close() })
	return ca, cb
}

func TestHeaderRoundTrip(t *testing.T) {
	h := Header{Version: 1, Op: OpCreateQP, Length: 77, ID: 0x0102030405060708, Status: 22, NFDs: 2, Flags: FlagReply}
	b := make([]byte, HeaderSize)
	h.Put(b)
	got, ok := ParseHeader(b)
	if !ok || got != h {
		t.Fatalf("got %+v, want %+v", got, h)
	}
	// The layout is the documented one, little-endian.
	if binary.LittleEndian.Uint16(b[2:]) != uint16(OpCreateQP) || binary.LittleEndian.Uint64(b[8:]) != h.ID || b[20] != 2 {
		t.Fatalf("layout: % x", b)
	}
	if _, ok := ParseHeader(b[:HeaderSize-1]); ok {
		t.Fatal("short header parsed")
	}
}

func TestEveryPayloadIsFixedSize(t *testing.T) {
	for op, s := range Specs {
		for _, v := range []any{s.Req(), s.Resp()} {
			if n := binary.Size(v); n < 0 || HeaderSize+n > MaxMessage {
				t.Errorf("%v: %T has size %d", op, v, n)
			}
		}
	}
	if n := binary.Size(&EventMsg{}); n != 16 {
		t.Errorf("EventMsg size %d", n)
	}
}

func TestConnPassesFDs(t *testing.T) {
	a, b := pair(t)
	fd, err := shm.Create("t", shm.PageSize)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	payload := Encode(nil, &MapMemReq{})
	if err := a.Write(Header{Version: 1, Op: OpMapMem, ID: 5}, payload, []int{fd}, time.Second); err != nil {
		t.Fatal(err)
	}
	h, p, fds, err := b.Read()
	if err != nil {
		t.Fatal(err)
	}
	defer CloseFDs(fds)
	if h.Op != OpMapMem || h.ID != 5 || h.NFDs != 1 || len(fds) != 1 || !bytes.Equal(p, payload) {
		t.Fatalf("got %+v %x %v", h, p, fds)
	}
	if fds[0] == fd {
		t.Fatal("received descriptor is the sender's number (not passed)")
	}
	if _, err := shm.Check(fds[0], 0, 1<<20); err != nil {
		t.Fatalf("passed memfd: %v", err)
	}
	flags, _ := unix.FcntlInt(uintptr(fds[0]), unix.F_GETFD, 0)
	if flags&unix.FD_CLOEXEC == 0 {
		t.Fatal("received descriptor is not close-on-exec")
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestConnFramingErrors(t *testing.T) {
	a, b := pair(t)
	hdr := func(h Header, extra int) []byte {
		buf := make([]byte, HeaderSize+extra)
		h.Put(buf)
		return buf
	}
	efd, _ := unix.Eventfd(0, unix.EFD_CLOEXEC)
	defer unix.Close(efd)
	before := openFDs(t)

	// Length field disagrees with the frame; its descriptor is closed.
	if err := a.WriteRaw(hdr(Header{Version: 1, Op: OpQueryDevice, ID: 1, Length: 9, NFDs: 1}, 4), []int{efd}); err != nil {
		t.Fatal(err)
	}
	_, _, _, err := b.Read()
	var fe *FrameError
	if !errors.As(err, &fe) || fe.Header.ID != 1 || !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("length mismatch: %v", err)
	}
	// Longer than MaxMessage.
	if err := a.WriteRaw(hdr(Header{Version: 1, Op: OpQueryDevice, ID: 2, Length: MaxMessage}, MaxMessage), nil); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := b.Read(); !errors.As(err, &fe) || fe.Header.ID != 2 || !errors.Is(err, syscall.EMSGSIZE) {
		t.Fatalf("oversized: %v", err)
	}
	// More descriptors than MaxFDs: the kernel truncates (MSG_CTRUNC).
	many := []int{efd, efd, efd, efd, efd, efd, efd, efd, efd, efd, efd, efd, efd, efd, efd, efd, efd, efd, efd, efd}
	if err := a.WriteRaw(hdr(Header{Version: 1, Op: OpQueryDevice, ID: 3, NFDs: 20}, 0), many); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := b.Read(); !errors.As(err, &fe) || fe.Header.ID != 3 || !errors.Is(err, syscall.EBADF) {
		t.Fatalf("too many fds: %v", err)
	}
	// Shorter than a header: nothing to answer.
	if err := a.WriteRaw([]byte{1, 2, 3}, []int{efd}); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := b.Read(); !errors.Is(err, ErrShortFrame) {
		t.Fatalf("short frame: %v", err)
	}
	if after := openFDs(t); after != before {
		t.Fatalf("descriptors leaked: %d open before, %d after", before, after)
	}
	// The connection still works after all that.
	if err := a.Write(Header{Version: 1, Op: OpQueryDevice, ID: 4}, nil, nil, time.Second); err != nil {
		t.Fatal(err)
	}
	if h, _, _, err := b.Read(); err != nil || h.ID != 4 {
		t.Fatalf("after errors: %+v %v", h, err)
	}
	a.Close()
	if _, _, _, err := b.Read(); err == nil || !(errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF)) {
		t.Fatalf("after peer close: %v", err)
	}
}

func TestDecodeRequestRules(t *testing.T) {
	p := Encode(nil, &RegMRReq{PD: 1, Mem: 2, Length: 4096, Access: 1})
	if v, err := DecodeRequest(Header{Op: OpRegMR, Length: uint32(len(p))}, p, 0); err != nil || v.(*RegMRReq).Length != 4096 {
		t.Fatalf("good request: %v %v", v, err)
	}
	cases := []struct {
		name  string
		h     Header
		p     []byte
		nfds  int
		errno syscall.Errno
	}{
		{"unknown op", Header{Op: 999}, nil, 0, syscall.EOPNOTSUPP},
		{"event from client", Header{Op: OpEvent}, nil, 0, syscall.EOPNOTSUPP},
		{"short payload", Header{Op: OpRegMR}, p[:10], 0, syscall.EINVAL},
		{"long payload", Header{Op: OpRegMR}, append(append([]byte{}, p...), 0), 0, syscall.EINVAL},
		{"fd where none taken", Header{Op: OpRegMR, NFDs: 1}, p, 1, syscall.EBADF},
		{"nfds disagrees", Header{Op: OpMapMem, NFDs: 2}, Encode(nil, &MapMemReq{}), 1, syscall.EBADF},
		{"fd missing", Header{Op: OpMapMem}, Encode(nil, &MapMemReq{}), 0, syscall.EBADF},
		{"reply flag on request", Header{Op: OpAllocPD, Flags: FlagReply}, nil, 0, syscall.EINVAL},
		{"status on request", Header{Op: OpAllocPD, Status: 5}, nil, 0, syscall.EINVAL},
	}
	for _, c := range cases {
		if _, err := DecodeRequest(c.h, c.p, c.nfds); !errors.Is(err, c.errno) {
			t.Errorf("%s: %v, want %v", c.name, err, c.errno)
		}
	}
}

func TestErrnoOf(t *testing.T) {
	if ErrnoOf(Errf(syscall.EDQUOT, "x")) != syscall.EDQUOT || ErrnoOf(syscall.EBUSY) != syscall.EBUSY ||
		ErrnoOf(errors.New("plain")) != syscall.EINVAL {
		t.Fatal("ErrnoOf")
	}
	e := &Error{Op: OpCreateQP, Errno: syscall.ENOENT, Msg: "no such CQ"}
	if !errors.Is(e, syscall.ENOENT) || e.Error() != "verbsock: create_qp: no such CQ (no such file or directory)" {
		t.Fatalf("%v", e)
	}
}

// FuzzDecodeRequest: any header and payload decode or fail cleanly; a
// request that decodes re-encodes to the same bytes.
func FuzzDecodeRequest(f *testing.F) {
	for op, s := range Specs {
		f.Add(uint16(op), Encode(nil, s.Req()), uint8(s.ReqFDs[0]))
	}
	f.Fuzz(func(t *testing.T, op uint16, payload []byte, nfds uint8) {
		h := Header{Version: 1, Op: Op(op), Length: uint32(len(payload)), NFDs: nfds}
		v, err := DecodeRequest(h, payload, int(nfds))
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Errno == 0 {
				t.Fatalf("error without errno: %v", err)
			}
			return
		}
		if got := Encode(nil, v); !bytes.Equal(got, payload) {
			t.Fatalf("re-encoding %T differs:\n% x\n% x", v, got, payload)
		}
	})
}

// TestReservedBytesMustBeZero: a request whose blank fields carry bytes is
// EINVAL, not silently accepted (the fuzz-found case was CMListenReq's
// tail, which is its channel now; CMResolveAddrReq's is blank).
func TestReservedBytesMustBeZero(t *testing.T) {
	p := Encode(nil, &CMResolveAddrReq{TimeoutMS: 100})
	if _, err := DecodeRequest(Header{Version: 1, Op: OpCMResolveAddr, Length: uint32(len(p))}, p, 0); err != nil {
		t.Fatalf("clean request: %v", err)
	}
	p[len(p)-1] = 0x30
	_, err := DecodeRequest(Header{Version: 1, Op: OpCMResolveAddr, Length: uint32(len(p))}, p, 0)
	if !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("reserved byte set: %v, want EINVAL", err)
	}
}

// TestUDRequestsReservedBytes: cm_resolve_ud's and cm_accept_ud's blank
// fields are checked like every request's.
func TestUDRequestsReservedBytes(t *testing.T) {
	for _, c := range []struct {
		op  Op
		v   any
		off int
	}{
		{OpCMResolveUD, &CMResolveUDReq{DstPort: 7174, PortSpace: PortSpaceUDP}, 47},
		{OpCMAcceptUD, &CMAcceptUDReq{Conn: 1, QP: 2}, 9},
		{OpCMAcceptUD, &CMAcceptUDReq{Conn: 1, QP: 2}, 11},
	} {
		p := Encode(nil, c.v)
		h := Header{Version: 1, Op: c.op, Length: uint32(len(p))}
		if _, err := DecodeRequest(h, p, 0); err != nil {
			t.Fatalf("%v: clean request: %v", c.op, err)
		}
		p[c.off] = 1
		if _, err := DecodeRequest(h, p, 0); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("%v: reserved byte %d set: %v, want EINVAL", c.op, c.off, err)
		}
	}
}

// TestRegMRSegsReqLayout pins reg_mr_segs' layout (§4, §5): a 40-byte head,
// then 24-byte segments, the whole in one frame; its blank fields are
// checked like every request's.
func TestRegMRSegsReqLayout(t *testing.T) {
	if n := binary.Size(&RegMRSeg{}); n != 24 {
		t.Fatalf("RegMRSeg is %d bytes, want 24", n)
	}
	n := binary.Size(&RegMRSegsReq{})
	if n != 40+24*MaxRegMRSegs || HeaderSize+n > MaxMessage {
		t.Fatalf("RegMRSegsReq is %d bytes", n)
	}
	r := &RegMRSegsReq{PD: 1, IOVA: 2, Length: 3, FirstOffset: 4, NumSegs: 1}
	r.Segs[0] = RegMRSeg{Mem: 5, Offset: 6, Pages: 7}
	p := Encode(nil, r)
	if binary.LittleEndian.Uint32(p[32:]) != 1 || binary.LittleEndian.Uint32(p[40:]) != 5 || binary.LittleEndian.Uint64(p[56:]) != 7 {
		t.Fatalf("layout: % x", p[:64])
	}
	h := Header{Version: 1, Op: OpRegMRSegs, Length: uint32(n)}
	for _, off := range []int{36, 44, 40 + 24*(MaxRegMRSegs-1) + 4} {
		q := append([]byte(nil), p...)
		q[off] = 1
		if _, err := DecodeRequest(h, q, 0); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("reserved byte %d set: %v, want EINVAL", off, err)
		}
	}
}

// TestCMResolveAddrLayout pins cm_resolve_addr's layout (§11): a 40-byte
// request (dst, src, timeout_ms, reserved) and a 24-byte reply (src,
// sgid_index, reserved); the request's blank field is checked like every
// request's.
func TestCMResolveAddrLayout(t *testing.T) {
	if n, m := binary.Size(&CMResolveAddrReq{}), binary.Size(&CMResolveAddrResp{}); n != 40 || m != 24 {
		t.Fatalf("CMResolveAddrReq %d bytes, CMResolveAddrResp %d; want 40 and 24", n, m)
	}
	if OpCMResolveAddr != 0x4A || OpCMResolveAddr.String() != "cm_resolve_addr" {
		t.Fatalf("op %#x %q", uint16(OpCMResolveAddr), OpCMResolveAddr)
	}
	p := Encode(nil, &CMResolveAddrReq{Dst: [16]byte{15: 1}, Src: [16]byte{15: 2}, TimeoutMS: 2000})
	if p[15] != 1 || p[31] != 2 || binary.LittleEndian.Uint32(p[32:]) != 2000 {
		t.Fatalf("layout: % x", p)
	}
	h := Header{Version: 1, Op: OpCMResolveAddr, Length: uint32(len(p))}
	if _, err := DecodeRequest(h, p, 0); err != nil {
		t.Fatalf("clean request: %v", err)
	}
	p[39] = 1
	if _, err := DecodeRequest(h, p, 0); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("reserved byte set: %v, want EINVAL", err)
	}
}

// An error names its op once, whether or not the daemon's message starts
// with it.
func TestErrorNamesItsOpOnce(t *testing.T) {
	for _, msg := range []string{"capture: no QP 0x999", "no QP 0x999"} {
		e := &Error{Op: OpCapture, Errno: syscall.ENOENT, Msg: msg}
		if got, want := e.Error(), "verbsock: capture: no QP 0x999 (no such file or directory)"; got != want {
			t.Errorf("%q: %q, want %q", msg, got, want)
		}
	}
}
