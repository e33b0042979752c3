package server_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/server"
	"github.com/vrnic/vrnicd/verbsock/shm"
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
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(euid), ^uintptr(0)); e != 0 {
		t.Fatalf("setresuid(-1, %d, -1): %v", euid, e)
	}
	err := f()
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), 0, ^uintptr(0)); e != 0 {
		panic("cannot restore euid 0 on a locked thread: " + e.Error())
	}
	return err
}

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (to connect as a second uid)")
	}
}

// A hugetlbfs memfd is sealable, but a hole punched in it drops the page
// under the daemon's mapping (SIGBUS at the daemon's next access): the
// daemon refuses it, and every file that is not shmem, with EINVAL or
// EBADF, and goes on serving.
func TestHostileHugetlbMemfdRefused(t *testing.T) {
	s, h := newServer(t, verbsock.Limits{})
	r, err := dialAs(t, serveSocket(t, s), -1, true)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.MemfdCreate("vrnic-huge", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_HUGETLB)
	if err != nil {
		t.Logf("SKIP part: this kernel makes no MFD_HUGETLB memfd: %v", err)
	} else {
		defer unix.Close(fd)
		const huge = 2 << 20
		if err := unix.Ftruncate(fd, huge); err != nil {
			t.Logf("SKIP part: ftruncate of a hugetlbfs memfd: %v", err)
		} else {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, shm.RequiredSeals); err != nil {
				t.Fatal(err)
			}
			wantErrno(t, "hugetlbfs memfd", r.do(verbsock.OpMapMem, &verbsock.MapMemReq{}, []int{fd}, nil), syscall.EINVAL)
			if _, err := shm.Check(fd, 0, 1<<30); !errors.Is(err, shm.ErrNotShmem) {
				t.Errorf("shm.Check of a hugetlbfs memfd: %v, want ErrNotShmem", err)
			}
		}
	}
	// A regular file on a disk file system (the module's own directory,
	// not /tmp, which may be tmpfs).
	var sfs unix.Statfs_t
	if err := unix.Statfs(".", &sfs); err != nil || sfs.Type == unix.TMPFS_MAGIC {
		t.Logf("SKIP part: the working directory is on tmpfs")
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
	// And a shmem memfd with a hole punched in it is still fine: the
	// daemon's write into the hole allocates a zeroed page (no SIGBUS).
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
