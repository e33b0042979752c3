package server_test

import (
	"errors"
	"github.com/vrnic/vrnicd/nic/link/linktest"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/nic/gid"
	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/server"
	"github.com/vrnic/vrnicd/verbsock/shm"
	"github.com/vrnic/vrnicd/verbsock/verbs"
	"golang.org/x/sys/unix"
)

// serveSocket serves s on a real listening socket in a directory every
// user may search, and returns its path.
func serveSocket(t testing.TB, s *server.Server) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "vrnicd.sock")
	l, err := server.Listen(path, -1)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	return path
}

// dialAs connects to path with effective uid euid (-1: unchanged) and says
// hello if asked. The uid is set on this goroutine's OS thread only, for
// the connect (SO_PEERCRED records the connecting thread's credentials),
// and set back before the thread is released.
func dialAs(t testing.TB, path string, euid int, hello bool) (*raw, error) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	err = withEUID(t, euid, func() error { return unix.Connect(fd, &unix.SockaddrUnix{Name: path}) })
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "client")
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	r := &raw{t: t, c: verbsock.NewConn(fc.(*net.UnixConn))}
	t.Cleanup(func() { r.c.Close() })
	if hello {
		var hr verbsock.HelloResp
		if err := r.do(verbsock.OpHello, &verbsock.HelloReq{Magic: verbsock.Magic, MinVersion: 1, MaxVersion: 1}, nil, &hr); err != nil {
			return r, err
		}
	}
	return r, nil
}

func withEUID(t testing.TB, euid int, f func() error) error {
	t.Helper()
	if euid < 0 {
		return f()
	}
	return withCreds(t, creds{euid: euid, egid: -1}, f)
}

// creds are a thread's effective uid and gid (-1: unchanged) and, if not
// nil, its supplementary groups.
type creds struct {
	euid, egid int
	groups     []uint32
}

// withCreds runs f on this goroutine's OS thread with c, set by raw
// syscalls (which change only the calling thread, unlike the libc and Go
// wrappers), and sets root's back before the thread is released.
func withCreds(t testing.TB, c creds, f func() error) error {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	old, err := unix.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	setGroups := func(gs []uint32) syscall.Errno {
		var p uintptr
		if len(gs) > 0 {
			p = uintptr(unsafe.Pointer(&gs[0]))
		}
		_, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(gs)), p, 0)
		return e
	}
	if c.groups != nil {
		if e := setGroups(c.groups); e != 0 {
			t.Fatalf("setgroups(%v): %v", c.groups, e)
		}
	}
	if c.egid >= 0 {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), uintptr(c.egid), ^uintptr(0)); e != 0 {
			t.Fatalf("setresgid(-1, %d, -1): %v", c.egid, e)
		}
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(c.euid), ^uintptr(0)); e != 0 {
		t.Fatalf("setresuid(-1, %d, -1): %v", c.euid, e)
	}
	ferr := f()
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), 0, ^uintptr(0)); e != 0 {
		panic("cannot restore euid 0 on a locked thread: " + e.Error())
	}
	if c.egid >= 0 {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), uintptr(os.Getgid()), ^uintptr(0)); e != 0 {
			panic("cannot restore the egid on a locked thread: " + e.Error())
		}
	}
	if c.groups != nil {
		gs := make([]uint32, len(old))
		for i, g := range old {
			gs[i] = uint32(g)
		}
		if e := setGroups(gs); e != 0 {
			panic("cannot restore the groups on a locked thread: " + e.Error())
		}
	}
	return ferr
}

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (to connect as a second uid)")
	}
}

// A hugetlbfs memfd is sealable, but a hole punched in it drops the page
// under the daemon's mapping (SIGBUS at the daemon's next access): the
// daemon refuses it with EINVAL and goes on serving.
func TestHostileHugetlbMemfdRefused(t *testing.T) {
	fd, err := unix.MemfdCreate("vrnic-huge", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_HUGETLB)
	if err != nil {
		t.Skipf("this kernel makes no MFD_HUGETLB memfd (%v): nothing to refuse", err)
	}
	defer unix.Close(fd)
	const huge = 2 << 20
	if err := unix.Ftruncate(fd, huge); err != nil {
		t.Skipf("ftruncate of a hugetlbfs memfd to 2 MiB: %v", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, shm.RequiredSeals); err != nil {
		t.Fatal(err)
	}
	s, _ := newServer(t, verbsock.Limits{})
	r, err := dialAs(t, serveSocket(t, s), -1, true)
	if err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "hugetlbfs memfd", r.do(verbsock.OpMapMem, &verbsock.MapMemReq{}, []int{fd}, nil), syscall.EINVAL)
	if _, err := shm.Check(fd, 0, 1<<30); !errors.Is(err, shm.ErrNotShmem) {
		t.Errorf("shm.Check of a hugetlbfs memfd: %v, want ErrNotShmem", err)
	}
	r.alive()
}

// A regular file on a disk file system is refused (EBADF: not a sealable
// memfd); a shmem memfd with a hole punched in it is accepted and the
// daemon's write into the hole allocates a zeroed page (no SIGBUS).
func TestHostileNonShmemRefused(t *testing.T) {
	s, h := newServer(t, verbsock.Limits{})
	r, err := dialAs(t, serveSocket(t, s), -1, true)
	if err != nil {
		t.Fatal(err)
	}
	// The package's own directory, not /tmp, which may be tmpfs.
	var sfs unix.Statfs_t
	if err := unix.Statfs(".", &sfs); err != nil || sfs.Type == unix.TMPFS_MAGIC {
		t.Logf("the working directory is on tmpfs: no disk file to try")
	} else {
		f, err := os.CreateTemp(".", "vrnic-plain-*")
		if err != nil {
			t.Fatal(err)
		}
		defer os.Remove(f.Name())
		defer f.Close()
		if err := f.Truncate(int64(shm.PageSize)); err != nil {
			t.Fatal(err)
		}
		wantErrno(t, "regular file on a disk", r.do(verbsock.OpMapMem, &verbsock.MapMemReq{}, []int{int(f.Fd())}, nil), syscall.EBADF)
	}
	r.alive()
	size := 4 * shm.PageSize
	mfd := memfd(t, size)
	var mm verbsock.MapMemResp
	if err := r.do(verbsock.OpMapMem, &verbsock.MapMemReq{}, []int{mfd}, &mm); err != nil {
		t.Fatal(err)
	}
	var pd verbsock.AllocPDResp
	if err := r.do(verbsock.OpAllocPD, &verbsock.Empty{}, nil, &pd); err != nil {
		t.Fatal(err)
	}
	var mr verbsock.RegMRResp
	if err := r.do(verbsock.OpRegMR, &verbsock.RegMRReq{PD: pd.PD, Mem: mm.Mem, Length: uint64(size), IOVA: 0x1000,
		Access: 1}, nil, &mr); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fallocate(mfd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, int64(size)); err != nil {
		t.Fatalf("punching a hole in shmem: %v", err)
	}
	info, _ := h.Dev.Mem().Query(mr.LKey)
	ref, err := h.Dev.Mem().Local(info.PD, mr.LKey, 0x1000, uint64(size), 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ref.WriteAt([]byte("after the hole"), int64(size-64)); err != nil {
		t.Fatal(err)
	}
	ref.Release()
	r.alive()
}

// sdkAs opens an SDK device on path as effective uid euid.
func sdkAs(t testing.TB, path string, euid int) (*verbs.Device, error) {
	t.Helper()
	r, err := dialAs(t, path, euid, false)
	if err != nil {
		return nil, err
	}
	d, err := verbs.OpenConn(r.c.UnixConn())
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { d.Close() })
	return d, nil
}

// smallDevice is a device (no link: nothing here sends) whose QP table
// holds 16 QPs.
func smallDevice(t testing.TB) *nic.Device {
	t.Helper()
	mac := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x15}
	dev, err := nic.NewDevice(nic.Config{Name: "vrnicq", MAC: mac, LinkMTU: 1500, GIDs: gid.New(mac, 0),
		Limits: nic.Limits{MaxQP: 16}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// fill calls alloc until it fails and returns how many succeeded and the
// error (at most limit tries).
func fill(limit int, alloc func() error) (int, error) {
	for i := range limit {
		if err := alloc(); err != nil {
			return i, err
		}
	}
	return limit, nil
}

const nobody = 65534

// Quotas hold across connections: one uid with as many connections as it
// may open gets its per-uid share and no more, a connection past its
// bound is refused with EUSERS, and another uid still gets its own quota
// and its share of the device's QP table; a uid's usage goes back when
// its connections close.
func TestHostileQuotasPerUser(t *testing.T) {
	needRoot(t)
	dev := smallDevice(t)
	s, err := server.New(server.Config{Device: dev, Limits: verbsock.Limits{MaxPD: 4, MaxQP: 6},
		UserLimits: verbsock.Limits{MaxPD: 6, MaxQP: 100}, MaxConnsPerUser: 3, WriteTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	path := serveSocket(t, s)

	var ds []*verbs.Device
	for range 3 {
		d, err := sdkAs(t, path, nobody)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	if _, err := sdkAs(t, path, nobody); !errors.Is(err, syscall.EUSERS) {
		t.Fatalf("fourth connection of uid %d: %v, want EUSERS", nobody, err)
	}
	// QPs: the per-uid limit (100) is above the share of the device's
	// table, 16/2: the share binds.
	pds, qps := 0, 0
	var lastPD, lastQP error
	for _, d := range ds {
		pd, cq := pdAndCQ(t, d)
		pds++
		n, err := fill(10, func() error { _, err := pd.CreateQP(smallQP(cq)); return err })
		qps, lastQP = qps+n, err
	}
	if qps != 8 || !errors.Is(lastQP, syscall.EDQUOT) {
		t.Fatalf("uid %d got %d QPs (last: %v), want half the device's 16 and EDQUOT", nobody, qps, lastQP)
	}
	for _, d := range ds {
		n, err := fill(10, func() error { _, err := d.AllocPD(); return err })
		pds, lastPD = pds+n, err
	}
	if pds != 6 || !errors.Is(lastPD, syscall.EDQUOT) || !strings.Contains(lastPD.Error(), "uid") {
		t.Fatalf("uid %d got %d PDs over 3 connections (last: %v), want its 6 and EDQUOT", nobody, pds, lastPD)
	}

	// Root, another uid, gets its full per-connection quota.
	root, err := sdkAs(t, path, -1)
	if err != nil {
		t.Fatal(err)
	}
	pd, cq := pdAndCQ(t, root)
	if n, err := fill(3, func() error { _, err := root.AllocPD(); return err }); n != 3 {
		t.Fatalf("another uid got %d of its 4 PDs: %v", n+1, err)
	}
	if n, err := fill(6, func() error { _, err := pd.CreateQP(smallQP(cq)); return err }); n != 6 {
		t.Fatalf("another uid got %d of its 6 QPs: %v", n, err)
	}

	// Closing gives the uid's usage back.
	for _, d := range ds {
		d.Close()
	}
	waitUntil(t, "uid's usage released", func() bool { return s.Used(nobody) == verbsock.Limits{} })
	d, err := sdkAs(t, path, nobody)
	if err != nil {
		t.Fatalf("uid %d after closing its connections: %v", nobody, err)
	}
	if n, err := fill(4, func() error { _, err := d.AllocPD(); return err }); n != 4 {
		t.Fatalf("after release: %d PDs: %v", n, err)
	}
}

func pdAndCQ(t testing.TB, d *verbs.Device) (*verbs.PD, *verbs.CQ) {
	t.Helper()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(16, false)
	if err != nil {
		t.Fatal(err)
	}
	return pd, cq
}

func smallQP(cq *verbs.CQ) verbs.QPInitAttr {
	return verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
}

func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	linktest.WaitFor(t, what, 10*time.Second, time.Millisecond, cond)
}

// A connection that never says hello is closed after HelloTimeout, and
// frees its place under the per-uid connection bound; the daemon serves
// others meanwhile.
func TestHostileNoHello(t *testing.T) {
	h, _ := nictest.Pair(t, 1500)
	s, err := server.New(server.Config{Device: h.Dev, HelloTimeout: 50 * time.Millisecond, MaxConnsPerUser: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	path := serveSocket(t, s)
	mute, err := dialAs(t, path, -1, false)
	if err != nil {
		t.Fatal(err)
	}
	_ = mute.c.UnixConn().SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, _, err := mute.c.Read(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection without hello was not closed by the daemon: %v", err)
	}
	waitUntil(t, "the mute connection unregistered", func() bool { return s.Clients() == 0 })
	r, err := dialAs(t, path, -1, true)
	if err != nil {
		t.Fatalf("the uid's one connection after the mute one went: %v", err)
	}
	r.alive()
}

// heapGrowth runs f and returns how much the live heap grew.
func heapGrowth(f func()) int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	f()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc) - int64(before)
}

// The daemon's private per-QP memory (the engine's WQE rings, sized from
// the caps the client asks) counts in the client's memory quota: QPs at
// the device's maximum caps are refused (EDQUOT) before they cost the
// daemon more heap than the quota. An RC QP at maximum caps, whose SQ
// slots may each hold a REG_MR page list, costs more than the whole quota.
func TestHostileQPHeapInQuota(t *testing.T) {
	h, _ := nictest.Pair(t, 1500)
	const quota = 96 << 20
	s, err := server.New(server.Config{Device: h.Dev, Limits: verbsock.Limits{MaxMemBytes: quota}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	d, err := sdkAs(t, serveSocket(t, s), -1)
	if err != nil {
		t.Fatal(err)
	}
	pd, cq := pdAndCQ(t, d)
	a := h.Dev.Attr()
	attr := verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: a.MaxQPWR,
		MaxRecvWR: a.MaxQPWR, MaxSendSGE: a.MaxSGE, MaxRecvSGE: a.MaxSGE, MaxInlineData: a.MaxInlineData}}
	var n int
	grew := heapGrowth(func() {
		n, err = fill(10, func() error { _, err := pd.CreateQP(attr); return err })
	})
	if !errors.Is(err, syscall.EDQUOT) || n == 0 {
		t.Fatalf("%d UD QPs at maximum caps, then %v; want at least one, then EDQUOT", n, err)
	}
	used := s.Used(0).MaxMemBytes
	t.Logf("%d UD QPs at maximum caps: heap grew %d MiB; quota %d MiB; charged %d MiB", n, grew>>20, quota>>20, used>>20)
	if grew > quota || used > quota || grew > int64(used) {
		t.Fatalf("%d QPs grew the heap by %d bytes, charged %d (quota %d): the charge must bound the cost", n, grew, used, quota)
	}
	attr.Type = verbs.QPTypeRC
	if _, err := pd.CreateQP(attr); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("RC QP at maximum caps under a %d MiB quota: %v, want EDQUOT", quota>>20, err)
	}
}

// REG_MR page lists are daemon memory a client makes the daemon hold: a
// fast-reg MR keeps its list, and each SQ slot the REG_MR WR it carried
// (the contiguous form is decoded into a list of up to max_fast_reg_pages
// pages). Both are charged: posting a REG_MR of the largest list into every
// slot of an RC SQ grows the heap by no more than was charged, and
// fast-reg MRs are refused once their lists would pass the quota.
func TestHostileRegMRPagesInQuota(t *testing.T) {
	h, _ := nictest.Pair(t, 1500)
	const quota = 256 << 20
	s, err := server.New(server.Config{Device: h.Dev, Limits: verbsock.Limits{MaxMemBytes: quota}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	d, err := sdkAs(t, serveSocket(t, s), -1)
	if err != nil {
		t.Fatal(err)
	}
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	da, err := d.Query()
	if err != nil {
		t.Fatal(err)
	}
	maxPages := int(da.MaxFastRegPageListLen)
	const depth = 1024
	cq, err := d.CreateCQ(depth, false)
	if err != nil {
		t.Fatal(err)
	}
	buf, err := pd.AllocBuffer(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	var qp *verbs.QP
	var fmr *verbs.MR
	grew := heapGrowth(func() {
		if fmr, err = pd.AllocMR(maxPages); err != nil {
			t.Fatal(err)
		}
		if qp, err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: depth, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			t.Fatal(err)
		}
		selfRTS(t, qp, h)
		for i := range depth {
			if err := qp.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRegMR, Flags: verbs.SendSignaled,
				RegMR: &verbs.RegMRWR{MR: fmr, Buffer: buf, PageSize: 4096, IOVA: 0x10000000,
					Length: uint64(maxPages) * 4096, Access: verbs.AccessLocalWrite}}); err != nil {
				t.Fatalf("REG_MR %d: %v", i, err)
			}
		}
		out := make([]verbs.WC, 64)
		for got := 0; got < depth; {
			k := cq.Poll(out)
			got += k
			if k == 0 {
				runtime.Gosched()
			}
		}
	})
	used := s.Used(0).MaxMemBytes
	t.Logf("%d REG_MRs of %d pages in an SQ of %d: heap grew %d bytes; charged %d", depth, maxPages, depth, grew, used)
	if grew > int64(used) {
		t.Fatalf("REG_MR page lists grew the heap by %d bytes, more than the %d charged", grew, used)
	}
	n, err := fill(10000, func() error { _, err := pd.AllocMR(maxPages); return err })
	if !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("%d fast-reg MRs of %d pages, then %v; want EDQUOT", n, maxPages, err)
	}
	if used := s.Used(0).MaxMemBytes; used > quota {
		t.Fatalf("charged %d bytes, over the quota %d", used, quota)
	}
}

// selfRTS brings an RC QP to RTS connected to itself.
func selfRTS(t testing.TB, qp *verbs.QP, h *nictest.Host) {
	t.Helper()
	for _, st := range []struct {
		a verbs.QPAttr
		m verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.QPStateInit, Port: 1}, verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
		{verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: qp.QPN(), RQPSN: 1, MaxDestRdAtomic: 1,
			MinRNRTimer: 1, AV: verbs.AHAttr{DGID: h.GID(), SGIDIndex: h.GIDIndex(), HopLimit: 64, Port: 1}},
			verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
				verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer},
		{verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry |
				verbs.QPAttrMaxQPRdAtomic},
	} {
		if err := qp.Modify(&st.a, st.m); err != nil {
			t.Fatalf("modify to %v: %v", st.a.State, err)
		}
	}
}

// A connection refused for a connection bound that never sends its hello
// does not hold up shutdown (the hello timeout here is an hour).
func TestHostileRefusedMuteTeardown(t *testing.T) {
	h, _ := nictest.Pair(t, 1500)
	s, err := server.New(server.Config{Device: h.Dev, HelloTimeout: time.Hour, MaxConnsPerUser: 1})
	if err != nil {
		t.Fatal(err)
	}
	path := serveSocket(t, s)
	first, err := dialAs(t, path, -1, true)
	if err != nil {
		t.Fatal(err)
	}
	first.alive()
	mute, err := dialAs(t, path, -1, false)
	if err != nil {
		t.Fatal(err)
	}
	// The refusal waits for the mute one's first request; the daemon
	// keeps serving the first connection meanwhile.
	waitUntil(t, "the refusal", func() bool { return server.Refusing(s) == 1 })
	first.alive()
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waits for a refused connection's hello")
	}
	_ = mute.c.UnixConn().SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, _, err := mute.c.Read(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the refused connection is still open after Close: %v", err)
	}
}
