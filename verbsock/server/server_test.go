package server_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/ring"
	"github.com/vrnic/vrnicd/verbsock/server"
	"github.com/vrnic/vrnicd/verbsock/shm"
	"golang.org/x/sys/unix"
)

// raw is a client that speaks the protocol by hand.
type raw struct {
	t  testing.TB
	c  *verbsock.Conn
	id uint64
}

func newServer(t testing.TB, limits verbsock.Limits) (*server.Server, *nictest.Host) {
	t.Helper()
	h, _ := nictest.Pair(t, 1500)
	s, err := server.New(server.Config{Device: h.Dev, Limits: limits, WriteTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, h
}

func dialRaw(t testing.TB, s *server.Server, hello bool) *raw {
	t.Helper()
	a, b, err := verbsock.Socketpair()
	if err != nil {
		t.Fatal(err)
	}
	go s.ServeConn(a)
	r := &raw{t: t, c: verbsock.NewConn(b)}
	t.Cleanup(func() { r.c.Close() })
	if hello {
		var hr verbsock.HelloResp
		if err := r.do(verbsock.OpHello, &verbsock.HelloReq{Magic: verbsock.Magic, MinVersion: 1, MaxVersion: 1}, nil, &hr); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// send writes a frame and returns the reply (skipping events).
func (r *raw) send(h verbsock.Header, payload []byte, fds []int) (verbsock.Header, []byte, []int) {
	r.t.Helper()
	r.id++
	h.ID = r.id
	if h.Version == 0 {
		h.Version = 1
	}
	if err := r.c.Write(h, payload, fds, time.Second); err != nil {
		r.t.Fatal(err)
	}
	return r.reply(h.ID)
}

func (r *raw) reply(id uint64) (verbsock.Header, []byte, []int) {
	r.t.Helper()
	_ = r.c.UnixConn().SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		h, p, fds, err := r.c.Read()
		if err != nil {
			r.t.Fatalf("reading reply %d: %v", id, err)
		}
		if h.Flags&verbsock.FlagEvent != 0 {
			continue
		}
		if h.ID != id || h.Flags&verbsock.FlagReply == 0 {
			r.t.Fatalf("reply %+v to request %d", h, id)
		}
		return h, append([]byte(nil), p...), fds
	}
}

// do sends a typed request; a failed request is returned as *verbsock.Error.
func (r *raw) do(op verbsock.Op, req any, fds []int, resp any) error {
	r.t.Helper()
	_, err := r.doFDs(op, req, fds, resp)
	return err
}

func (r *raw) doFDs(op verbsock.Op, req any, fds []int, resp any) ([]int, error) {
	r.t.Helper()
	h, p, rfds := r.send(verbsock.Header{Op: op}, verbsock.Encode(nil, req), fds)
	if h.Status != 0 {
		verbsock.CloseFDs(rfds)
		return nil, &verbsock.Error{Op: op, Errno: syscall.Errno(h.Status), Msg: string(p)}
	}
	if resp != nil {
		if err := verbsock.Decode(p, resp); err != nil {
			r.t.Fatalf("%v reply: %v", op, err)
		}
	}
	return rfds, nil
}

// alive checks the server still answers on this connection.
func (r *raw) alive() {
	r.t.Helper()
	var pa verbsock.PortAttr
	if err := r.do(verbsock.OpQueryPort, &verbsock.QueryPortReq{Port: 1}, nil, &pa); err != nil || pa.State != 4 {
		r.t.Fatalf("server not answering: %+v %v", pa, err)
	}
}

func memfd(t testing.TB, size int) int {
	t.Helper()
	fd, err := shm.Create("vrnic-test", size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func wantErrno(t testing.TB, what string, err error, errno syscall.Errno) {
	t.Helper()
	if !errors.Is(err, errno) {
		t.Errorf("%s: %v, want %v", what, err, errno)
	}
}

func TestHandshake(t *testing.T) {
	s, _ := newServer(t, verbsock.Limits{})
	r := dialRaw(t, s, false)
	wantErrno(t, "request before hello", r.do(verbsock.OpQueryDevice, &verbsock.Empty{}, nil, nil), syscall.EPROTO)
	wantErrno(t, "bad magic", r.do(verbsock.OpHello, &verbsock.HelloReq{Magic: 1, MinVersion: 1, MaxVersion: 1}, nil, nil), syscall.EPROTO)
	wantErrno(t, "future versions only", r.do(verbsock.OpHello, &verbsock.HelloReq{Magic: verbsock.Magic, MinVersion: 2, MaxVersion: 9}, nil, nil),
		syscall.EPROTONOSUPPORT)
	var hr verbsock.HelloResp
	if err := r.do(verbsock.OpHello, &verbsock.HelloReq{Magic: verbsock.Magic, MinVersion: 1, MaxVersion: 7}, nil, &hr); err != nil {
		t.Fatal(err)
	}
	if hr.Version != 1 || hr.PageSize != uint32(shm.PageSize) || verbsock.CString(hr.DevName[:]) == "" || hr.Limits.MaxQP == 0 {
		t.Fatalf("hello reply %+v", hr)
	}
	wantErrno(t, "second hello", r.do(verbsock.OpHello, &verbsock.HelloReq{Magic: verbsock.Magic, MinVersion: 1, MaxVersion: 1}, nil, nil), syscall.EPROTO)
	h, _, _ := r.send(verbsock.Header{Version: 2, Op: verbsock.OpAllocPD}, nil, nil)
	if syscall.Errno(h.Status) != syscall.EPROTO {
		t.Errorf("frame of another version: status %d, want EPROTO", h.Status)
	}
	h, _, _ = r.send(verbsock.Header{Op: 0x3F}, nil, nil)
	if syscall.Errno(h.Status) != syscall.EOPNOTSUPP {
		t.Errorf("unknown op: status %d", h.Status)
	}
	r.alive()
}

// Every request with a payload one byte short or long is EINVAL, and the
// connection goes on.
func TestEveryRequestBadLength(t *testing.T) {
	s, _ := newServer(t, verbsock.Limits{})
	r := dialRaw(t, s, true)
	for op, sp := range verbsock.Specs {
		if op == verbsock.OpHello {
			continue
		}
		good := verbsock.Encode(nil, sp.Req())
		for _, p := range [][]byte{append(append([]byte{}, good...), 0), good[:max(len(good)-1, 0)]} {
			if len(p) == len(good) {
				continue
			}
			var fds []int
			for range sp.ReqFDs[0] {
				fds = append(fds, memfd(t, shm.PageSize))
			}
			h, _, _ := r.send(verbsock.Header{Op: op}, p, fds)
			if syscall.Errno(h.Status) != syscall.EINVAL {
				t.Errorf("%v with %d payload bytes: status %v, want EINVAL", op, len(p), syscall.Errno(h.Status))
			}
		}
	}
	r.alive()
}

// Every request naming objects that do not exist (or exist on another
// connection) is ENOENT.
func TestEveryRequestBadHandles(t *testing.T) {
	s, _ := newServer(t, verbsock.Limits{})
	other := dialRaw(t, s, true)
	var pd verbsock.AllocPDResp
	if err := other.do(verbsock.OpAllocPD, &verbsock.Empty{}, nil, &pd); err != nil {
		t.Fatal(err)
	}
	var cq verbsock.CreateCQResp
	if err := other.do(verbsock.OpCreateCQ, &verbsock.CreateCQReq{CQE: 4}, []int{memfd(t, ring.Bytes(4, ring.CQESize, shm.PageSize))}, &cq); err != nil {
		t.Fatal(err)
	}
	r := dialRaw(t, s, true)
	for _, bad := range []uint32{0, 9999, pd.PD, cq.CQ} { // pd.PD and cq.CQ are the other client's
		cqFD := func() []int { return []int{memfd(t, ring.Bytes(4, ring.CQESize, shm.PageSize))} }
		qpFDs := func() []int { return []int{memfd(t, shm.PageSize*2), memfd(t, shm.PageSize*2)} }
		cases := []struct {
			op  verbsock.Op
			req any
			fds []int
		}{
			{verbsock.OpDeallocPD, &verbsock.HandleReq{Handle: bad}, nil},
			{verbsock.OpUnmapMem, &verbsock.HandleReq{Handle: bad}, nil},
			{verbsock.OpRegMR, &verbsock.RegMRReq{PD: bad, Mem: bad, Length: 4096}, nil},
			{verbsock.OpRegMRSegs, &verbsock.RegMRSegsReq{PD: bad, Length: 4096, NumSegs: 1,
				Segs: [verbsock.MaxRegMRSegs]verbsock.RegMRSeg{{Mem: bad, Pages: 1}}}, nil},
			{verbsock.OpDeregMR, &verbsock.HandleReq{Handle: bad}, nil},
			{verbsock.OpAllocMR, &verbsock.AllocMRReq{PD: bad, MaxPages: 4}, nil},
			{verbsock.OpAllocMW, &verbsock.AllocMWReq{PD: bad, Type: 1}, nil},
			{verbsock.OpDeallocMW, &verbsock.HandleReq{Handle: bad}, nil},
			{verbsock.OpBindMW, &verbsock.BindMWReq{MW: bad, MR: bad, Length: 1}, nil},
			{verbsock.OpDestroyCQ, &verbsock.HandleReq{Handle: bad}, nil},
			{verbsock.OpResizeCQ, &verbsock.ResizeCQReq{CQ: bad, CQE: 4}, cqFD()},
			{verbsock.OpReqNotifyCQ, &verbsock.ReqNotifyCQReq{CQ: bad}, nil},
			{verbsock.OpCreateQP, &verbsock.CreateQPReq{PD: bad, SendCQ: bad, RecvCQ: bad, Type: 2, Cap: verbsock.QPCap{MaxSendWR: 1, MaxRecvWR: 1}}, qpFDs()},
			{verbsock.OpModifyQP, &verbsock.ModifyQPReq{QP: bad, Mask: 1}, nil},
			{verbsock.OpQueryQP, &verbsock.QueryQPReq{QP: bad}, nil},
			{verbsock.OpDestroyQP, &verbsock.HandleReq{Handle: bad}, nil},
			{verbsock.OpCreateSRQ, &verbsock.CreateSRQReq{PD: bad, MaxWR: 4, MaxSGE: 1}, []int{memfd(t, shm.PageSize)}},
			{verbsock.OpModifySRQ, &verbsock.ModifySRQReq{SRQ: bad, Mask: 2, Limit: 1}, nil},
			{verbsock.OpQuerySRQ, &verbsock.HandleReq{Handle: bad}, nil},
			{verbsock.OpDestroySRQ, &verbsock.HandleReq{Handle: bad}, nil},
			{verbsock.OpResizeSRQ, &verbsock.ResizeSRQReq{SRQ: bad, MaxWR: 4}, []int{memfd(t, shm.PageSize)}},
			{verbsock.OpCreateAH, &verbsock.CreateAHReq{PD: bad}, nil},
			{verbsock.OpDestroyAH, &verbsock.HandleReq{Handle: bad}, nil},
		}
		for _, c := range cases {
			wantErrno(t, c.op.String(), r.do(c.op, c.req, c.fds, nil), syscall.ENOENT)
		}
	}
	// The other client's objects are untouched.
	if err := other.do(verbsock.OpDestroyCQ, &verbsock.HandleReq{Handle: cq.CQ}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := other.do(verbsock.OpDeallocPD, &verbsock.HandleReq{Handle: pd.PD}, nil, nil); err != nil {
		t.Fatal(err)
	}
	r.alive()
}

func openFDCount(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// Descriptors that are not sealed memfds of the right size are refused
// with a clear errno, and none of them leaks in the daemon.
func TestWrongFDs(t *testing.T) {
	s, _ := newServer(t, verbsock.Limits{})
	r := dialRaw(t, s, true)
	pipeR, pipeW, _ := os.Pipe()
	defer pipeR.Close()
	defer pipeW.Close()
	unsealed, _ := unix.MemfdCreate("vrnic-unsealed", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	defer unix.Close(unsealed)
	_ = unix.Ftruncate(unsealed, int64(shm.PageSize))
	shrinkOnly, _ := unix.MemfdCreate("vrnic-shrinkonly", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	defer unix.Close(shrinkOnly)
	_ = unix.Ftruncate(shrinkOnly, int64(shm.PageSize))
	_, _ = unix.FcntlInt(uintptr(shrinkOnly), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK)
	efd, _ := unix.Eventfd(0, unix.EFD_CLOEXEC)
	defer unix.Close(efd)
	file, _ := os.Create(filepath.Join(t.TempDir(), "plain"))
	defer file.Close()
	_ = file.Truncate(int64(shm.PageSize))
	before := openFDCount(t)
	created := 0
	memfd := func(t testing.TB, size int) int { created++; return memfd(t, size) }

	mm := func(fds ...int) error { return r.do(verbsock.OpMapMem, &verbsock.MapMemReq{}, fds, nil) }
	wantErrno(t, "map_mem without fd", mm(), syscall.EBADF)
	wantErrno(t, "map_mem with two fds", mm(memfd(t, shm.PageSize), memfd(t, shm.PageSize)), syscall.EBADF)
	wantErrno(t, "map_mem of a pipe", mm(int(pipeR.Fd())), syscall.EBADF)
	wantErrno(t, "map_mem of an eventfd", mm(efd), syscall.EBADF)
	wantErrno(t, "map_mem of a regular file", mm(int(file.Fd())), syscall.EBADF)
	wantErrno(t, "map_mem of an unsealed memfd", mm(unsealed), syscall.EPERM)
	wantErrno(t, "map_mem of a shrink-only memfd", mm(shrinkOnly), syscall.EPERM)
	wantErrno(t, "fd on a request that takes none", r.do(verbsock.OpAllocPD, &verbsock.Empty{}, []int{efd}, nil), syscall.EBADF)
	wantErrno(t, "CQ ring of the wrong size", r.do(verbsock.OpCreateCQ, &verbsock.CreateCQReq{CQE: 64},
		[]int{memfd(t, shm.PageSize)}, nil), syscall.EINVAL)
	wantErrno(t, "CQ ring that is a pipe", r.do(verbsock.OpCreateCQ, &verbsock.CreateCQReq{CQE: 4}, []int{int(pipeW.Fd())}, nil), syscall.EBADF)
	var pd verbsock.AllocPDResp
	var cq verbsock.CreateCQResp
	if err := r.do(verbsock.OpAllocPD, &verbsock.Empty{}, nil, &pd); err != nil {
		t.Fatal(err)
	}
	if err := r.do(verbsock.OpCreateCQ, &verbsock.CreateCQReq{CQE: 4}, []int{memfd(t, ring.Bytes(4, ring.CQESize, shm.PageSize))}, &cq); err != nil {
		t.Fatal(err)
	}
	qp := &verbsock.CreateQPReq{PD: pd.PD, SendCQ: cq.CQ, RecvCQ: cq.CQ, Type: 2, Cap: verbsock.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	sqBytes := ring.Bytes(4, ring.SQEntrySize(1, 0), shm.PageSize)
	rqBytes := ring.Bytes(4, ring.RQEntrySize(1), shm.PageSize)
	wantErrno(t, "QP without its RQ ring", r.do(verbsock.OpCreateQP, qp, []int{memfd(t, sqBytes)}, nil), syscall.EBADF)
	wantErrno(t, "QP with an unsealed SQ ring", r.do(verbsock.OpCreateQP, qp, []int{unsealed, memfd(t, rqBytes)}, nil), syscall.EPERM)
	wantErrno(t, "QP with a short RQ ring", r.do(verbsock.OpCreateQP, qp, []int{memfd(t, sqBytes), memfd(t, 2*shm.PageSize+rqBytes)}, nil), syscall.EINVAL)
	var qr verbsock.CreateQPResp
	rfds, err := r.doFDs(verbsock.OpCreateQP, qp, []int{memfd(t, sqBytes), memfd(t, rqBytes)}, &qr)
	if err != nil {
		t.Fatal(err)
	}
	verbsock.CloseFDs(rfds)
	if err := r.do(verbsock.OpDestroyQP, &verbsock.HandleReq{Handle: qr.QP}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := r.do(verbsock.OpDestroyCQ, &verbsock.HandleReq{Handle: cq.CQ}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if after := openFDCount(t); after != before+created { // the memfds this test made are still open on its side
		t.Errorf("descriptors leaked in the daemon: %d open before, %d after, %d made by the test", before, after, created)
	}
	r.alive()
}

// The seals that make the daemon accept a memfd stop the client from
// shrinking it afterwards, so the daemon's mapping stays backed.
func TestSealedMemfdCannotBeTruncated(t *testing.T) {
	s, h := newServer(t, verbsock.Limits{})
	r := dialRaw(t, s, true)
	size := 4 * shm.PageSize
	fd := memfd(t, size)
	var mm verbsock.MapMemResp
	if err := r.do(verbsock.OpMapMem, &verbsock.MapMemReq{}, []int{fd}, &mm); err != nil {
		t.Fatal(err)
	}
	var pd verbsock.AllocPDResp
	_ = r.do(verbsock.OpAllocPD, &verbsock.Empty{}, nil, &pd)
	var mr verbsock.RegMRResp
	if err := r.do(verbsock.OpRegMR, &verbsock.RegMRReq{PD: pd.PD, Mem: mm.Mem, Length: uint64(size), IOVA: 0x1000,
		Access: 1}, nil, &mr); err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, 0); !errors.Is(err, unix.EPERM) {
		t.Fatalf("truncating a registered memfd: %v, want EPERM", err)
	}
	// The daemon reads the last page through the MR: still backed.
	info, _ := h.Dev.Mem().Query(mr.LKey)
	ref, err := h.Dev.Mem().Local(info.PD, mr.LKey, 0x1000+uint64(size)-8, 8, 0)
	if err != nil {
		t.Fatal(err)
	}
	ref.Release()
	r.alive()
}

func TestQuotas(t *testing.T) {
	s, _ := newServer(t, verbsock.Limits{MaxPD: 2, MaxCQ: 1, MaxMemBytes: uint64(8 * shm.PageSize), MaxMRBytes: uint64(shm.PageSize), MaxMem: 2})
	r := dialRaw(t, s, true)
	for i := range 3 {
		err := r.do(verbsock.OpAllocPD, &verbsock.Empty{}, nil, &verbsock.AllocPDResp{})
		if i < 2 && err != nil || i == 2 && !errors.Is(err, syscall.EDQUOT) {
			t.Fatalf("PD %d: %v", i, err)
		}
	}
	wantErrno(t, "memfd over the byte quota", r.do(verbsock.OpMapMem, &verbsock.MapMemReq{}, []int{memfd(t, 16*shm.PageSize)}, nil), syscall.EDQUOT)
	var m verbsock.MapMemResp
	if err := r.do(verbsock.OpMapMem, &verbsock.MapMemReq{}, []int{memfd(t, 4*shm.PageSize)}, &m); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "second memfd past the byte quota", r.do(verbsock.OpMapMem, &verbsock.MapMemReq{}, []int{memfd(t, 5*shm.PageSize)}, nil), syscall.EDQUOT)
	if err := r.do(verbsock.OpMapMem, &verbsock.MapMemReq{}, []int{memfd(t, shm.PageSize)}, nil); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "third memory object", r.do(verbsock.OpMapMem, &verbsock.MapMemReq{}, []int{memfd(t, shm.PageSize)}, nil), syscall.EDQUOT)
	wantErrno(t, "MR over the registered-bytes quota", r.do(verbsock.OpRegMR, &verbsock.RegMRReq{PD: 1, Mem: m.Mem,
		Length: uint64(2 * shm.PageSize), Access: 1}, nil, nil), syscall.EDQUOT)
	if err := r.do(verbsock.OpCreateCQ, &verbsock.CreateCQReq{CQE: 4}, []int{memfd(t, ring.Bytes(4, ring.CQESize, shm.PageSize))}, nil); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "second CQ", r.do(verbsock.OpCreateCQ, &verbsock.CreateCQReq{CQE: 4}, []int{memfd(t, ring.Bytes(4, ring.CQESize, shm.PageSize))}, nil), syscall.EDQUOT)
	// Unmapping gives the bytes back.
	if err := r.do(verbsock.OpUnmapMem, &verbsock.HandleReq{Handle: m.Mem}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := r.do(verbsock.OpMapMem, &verbsock.MapMemReq{}, []int{memfd(t, 5*shm.PageSize)}, nil); err != nil {
		t.Fatalf("after unmapping: %v", err)
	}
}

func TestBadAttributes(t *testing.T) {
	s, _ := newServer(t, verbsock.Limits{})
	r := dialRaw(t, s, true)
	var pd verbsock.AllocPDResp
	var cq verbsock.CreateCQResp
	_ = r.do(verbsock.OpAllocPD, &verbsock.Empty{}, nil, &pd)
	wantErrno(t, "CQ of 0", r.do(verbsock.OpCreateCQ, &verbsock.CreateCQReq{CQE: 0}, []int{memfd(t, shm.PageSize)}, nil), syscall.EINVAL)
	wantErrno(t, "CQ of 2^20", r.do(verbsock.OpCreateCQ, &verbsock.CreateCQReq{CQE: 1 << 20}, []int{memfd(t, shm.PageSize)}, nil), syscall.EINVAL)
	wantErrno(t, "CQ flags", r.do(verbsock.OpCreateCQ, &verbsock.CreateCQReq{CQE: 4, Flags: 6}, []int{memfd(t, shm.PageSize)}, nil), syscall.EINVAL)
	if err := r.do(verbsock.OpCreateCQ, &verbsock.CreateCQReq{CQE: 4}, []int{memfd(t, ring.Bytes(4, ring.CQESize, shm.PageSize))}, &cq); err != nil {
		t.Fatal(err)
	}
	qp := func(typ uint8, c verbsock.QPCap) error {
		return r.do(verbsock.OpCreateQP, &verbsock.CreateQPReq{PD: pd.PD, SendCQ: cq.CQ, RecvCQ: cq.CQ, Type: typ, Cap: c},
			[]int{memfd(t, shm.PageSize), memfd(t, shm.PageSize)}, nil)
	}
	wantErrno(t, "QP type GSI", qp(1, verbsock.QPCap{MaxSendWR: 1}), syscall.EINVAL)
	wantErrno(t, "QP type 9", qp(9, verbsock.QPCap{MaxSendWR: 1}), syscall.EINVAL)
	wantErrno(t, "QP of 2^20 WRs", qp(2, verbsock.QPCap{MaxSendWR: 1 << 20}), syscall.EINVAL)
	wantErrno(t, "QP of 1000 SGEs", qp(2, verbsock.QPCap{MaxSendWR: 1, MaxSendSGE: 1000}), syscall.EINVAL)
	wantErrno(t, "QP of 1 MiB inline", qp(2, verbsock.QPCap{MaxSendWR: 1, MaxInlineData: 1 << 20}), syscall.EINVAL)
	wantErrno(t, "MW type 7", r.do(verbsock.OpAllocMW, &verbsock.AllocMWReq{PD: pd.PD, Type: 7}, nil, nil), syscall.EINVAL)
	wantErrno(t, "fast-reg MR of 0 pages", r.do(verbsock.OpAllocMR, &verbsock.AllocMRReq{PD: pd.PD}, nil, nil), syscall.EINVAL)
	wantErrno(t, "SRQ of 0", r.do(verbsock.OpCreateSRQ, &verbsock.CreateSRQReq{PD: pd.PD}, []int{memfd(t, shm.PageSize)}, nil), syscall.EINVAL)
	wantErrno(t, "SRQ limit over max_wr", r.do(verbsock.OpCreateSRQ, &verbsock.CreateSRQReq{PD: pd.PD, MaxWR: 4, Limit: 5},
		[]int{memfd(t, shm.PageSize)}, nil), syscall.EINVAL)
	var srq verbsock.CreateSRQResp
	if err := r.do(verbsock.OpCreateSRQ, &verbsock.CreateSRQReq{PD: pd.PD, MaxWR: 4, MaxSGE: 1},
		[]int{memfd(t, ring.Bytes(4, ring.RQEntrySize(1), shm.PageSize))}, &srq); err != nil {
		t.Fatal(err)
	}
	resize := func(maxWR uint32, size int) error {
		return r.do(verbsock.OpResizeSRQ, &verbsock.ResizeSRQReq{SRQ: srq.SRQ, MaxWR: maxWR}, []int{memfd(t, size)}, nil)
	}
	wantErrno(t, "modify_srq max_wr", r.do(verbsock.OpModifySRQ, &verbsock.ModifySRQReq{SRQ: srq.SRQ, Mask: 1, MaxWR: 8}, nil, nil), syscall.EINVAL)
	wantErrno(t, "resize_srq to 0", resize(0, shm.PageSize), syscall.EINVAL)
	wantErrno(t, "resize_srq to 2^20", resize(1<<20, shm.PageSize), syscall.EINVAL)
	wantErrno(t, "resize_srq with a ring too small", resize(1024, shm.PageSize), syscall.EINVAL)
	wantErrno(t, "resize_srq without a ring", r.do(verbsock.OpResizeSRQ, &verbsock.ResizeSRQReq{SRQ: srq.SRQ, MaxWR: 8}, nil, nil), syscall.EBADF)
	if err := resize(8, ring.Bytes(8, ring.RQEntrySize(1), shm.PageSize)); err != nil {
		t.Fatalf("resize_srq to 8: %v", err)
	}
	var q verbsock.QuerySRQResp
	if err := r.do(verbsock.OpQuerySRQ, &verbsock.HandleReq{Handle: srq.SRQ}, nil, &q); err != nil || q.MaxWR != 8 {
		t.Fatalf("query_srq after resize: %+v %v", q, err)
	}
	wantErrno(t, "query_port 0", r.do(verbsock.OpQueryPort, &verbsock.QueryPortReq{}, nil, nil), syscall.EINVAL)
	wantErrno(t, "query_gid 1<<31", r.do(verbsock.OpQueryGID, &verbsock.QueryGIDReq{Port: 1, Index: 1 << 31}, nil, nil), syscall.EINVAL)
	r.alive()
}

// A client that sends garbage frames (short, huge, with stray descriptors)
// gets errors or is disconnected; the server serves others throughout.
func TestGarbageFrames(t *testing.T) {
	s, _ := newServer(t, verbsock.Limits{})
	good := dialRaw(t, s, true)
	bad := dialRaw(t, s, true)
	efd, _ := unix.Eventfd(0, unix.EFD_CLOEXEC)
	defer unix.Close(efd)
	hdr := make([]byte, verbsock.HeaderSize)
	(&verbsock.Header{Version: 1, Op: verbsock.OpAllocPD, ID: 1, Length: 1000}).Put(hdr)
	for _, b := range [][]byte{hdr, append(hdr, make([]byte, 20000)...)} {
		if err := bad.c.WriteRaw(b, []int{efd}); err != nil {
			t.Fatal(err)
		}
		h, _, _ := bad.reply(1)
		if h.Status == 0 {
			t.Fatal("garbage frame succeeded")
		}
	}
	good.alive()
	if err := bad.c.WriteRaw([]byte{1, 2}, nil); err != nil {
		t.Fatal(err)
	}
	_ = bad.c.UnixConn().SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, _, _, err := bad.c.Read(); err == nil {
		t.Fatal("a client sending sub-header frames stayed connected")
	}
	good.alive()
}

func TestListenSocketMode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "run", "vrnicd.sock")
	gid := os.Getgid()
	l, err := server.Listen(path, gid)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o660 || st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket mode %v, want 0660 socket", st.Mode())
	}
	if sys := st.Sys().(*syscall.Stat_t); int(sys.Gid) != gid {
		t.Fatalf("socket group %d, want %d", sys.Gid, gid)
	}
	if _, err := server.Listen(path, -1); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second listener on a live socket: %v", err)
	}
	s, _ := newServer(t, verbsock.Limits{})
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	r := &raw{t: t, c: verbsock.NewConn(c)}
	if err := r.do(verbsock.OpHello, &verbsock.HelloReq{Magic: verbsock.Magic, MinVersion: 1, MaxVersion: 1}, nil, nil); err != nil {
		t.Fatal(err)
	}
	r.alive()
	s.Close()
	if err := <-done; !errors.Is(err, server.ErrServerClosed) {
		t.Fatalf("Serve after Close: %v", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("socket file left behind: %v", err)
	}
	// A stale socket file (nobody listening) is replaced.
	fd, _ := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET, 0)
	_ = unix.Bind(fd, &unix.SockaddrUnix{Name: path})
	unix.Close(fd)
	l2, err := server.Listen(path, -1)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	l2.Close()
}
