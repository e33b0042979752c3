package shm

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSealedMemfdSharedBothWays(t *testing.T) {
	size := 4 * PageSize
	fd, err := Create("test", size)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	client, err := MapFD(fd, size)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(client)
	m, err := Map(fd, 0, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	client[100] = 42
	if m.Bytes()[100] != 42 {
		t.Fatal("daemon mapping does not see the client's write")
	}
	m.Bytes()[size-1] = 7
	if client[size-1] != 7 {
		t.Fatal("client mapping does not see the daemon's write")
	}
	// The seals stop the client from shrinking the file under the daemon.
	if err := unix.Ftruncate(fd, int64(PageSize)); !errors.Is(err, unix.EPERM) {
		t.Fatalf("ftruncate of a sealed memfd: %v, want EPERM", err)
	}
	if err := unix.Ftruncate(fd, int64(8*PageSize)); !errors.Is(err, unix.EPERM) {
		t.Fatalf("growing a sealed memfd: %v, want EPERM", err)
	}
	_ = m.Bytes()[size-1] // still mapped and backed: no SIGBUS
	m.Release()
}

func TestMapRefusesUnsealed(t *testing.T) {
	fd, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(PageSize)); err != nil {
		t.Fatal(err)
	}
	if _, err := Map(fd, 0, 1<<30); !errors.Is(err, ErrNotSealed) {
		t.Fatalf("unsealed memfd: %v, want ErrNotSealed", err)
	}
	// Shrink-sealed only is not enough either.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
		t.Fatal(err)
	}
	if _, err := Map(fd, 0, 1<<30); !errors.Is(err, ErrNotSealed) {
		t.Fatalf("memfd without F_SEAL_GROW: %v, want ErrNotSealed", err)
	}
	// A memfd created without MFD_ALLOW_SEALING has F_SEAL_SEAL from birth
	// and can never be sealed.
	fd2, err := unix.MemfdCreate("nosealing", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd2)
	_ = unix.Ftruncate(fd2, int64(PageSize))
	if _, err := Map(fd2, 0, 1<<30); !errors.Is(err, ErrNotSealed) {
		t.Fatalf("memfd without sealing: %v, want ErrNotSealed", err)
	}
}

func TestMapRefusesNonMemfd(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if _, err := Map(int(r.Fd()), 0, 1<<30); !errors.Is(err, ErrNotMemfd) {
		t.Fatalf("pipe: %v, want ErrNotMemfd", err)
	}
	f, err := os.CreateTemp(t.TempDir(), "plain")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_ = f.Truncate(int64(PageSize))
	if _, err := Map(int(f.Fd()), 0, 1<<30); err == nil {
		t.Fatal("a regular file was accepted")
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	if _, err := Map(efd, 0, 1<<30); !errors.Is(err, ErrNotMemfd) {
		t.Fatalf("eventfd: %v, want ErrNotMemfd", err)
	}
}

func TestMapChecksSize(t *testing.T) {
	fd, err := Create("sz", 2*PageSize)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := Map(fd, int64(4*PageSize), 1<<30); !errors.Is(err, ErrSize) {
		t.Fatalf("wrong size: %v, want ErrSize", err)
	}
	if _, err := Map(fd, 0, int64(PageSize)); !errors.Is(err, ErrSize) {
		t.Fatalf("over the limit: %v, want ErrSize", err)
	}
	// Not a page multiple.
	fd2, err := unix.MemfdCreate("odd", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd2)
	_ = unix.Ftruncate(fd2, 100)
	_, _ = unix.FcntlInt(uintptr(fd2), unix.F_ADD_SEALS, RequiredSeals)
	if _, err := Map(fd2, 0, 1<<30); !errors.Is(err, ErrSize) {
		t.Fatalf("size 100: %v, want ErrSize", err)
	}
	// Write-sealed: the daemon could not write it.
	fd3, err := unix.MemfdCreate("ro", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd3)
	_ = unix.Ftruncate(fd3, int64(PageSize))
	_, _ = unix.FcntlInt(uintptr(fd3), unix.F_ADD_SEALS, RequiredSeals|unix.F_SEAL_WRITE)
	if _, err := Map(fd3, 0, 1<<30); err == nil {
		t.Fatal("write-sealed memfd accepted")
	}
}

func TestMappingUnmapsOnLastRelease(t *testing.T) {
	fd, err := Create("ref", PageSize)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Map(fd, 0, 1<<30)
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	unmapped := false
	m.OnUnmap = func() { unmapped = true }
	for range 2 { // two references besides the mapping's own
		if !m.Acquire() {
			t.Fatal("Acquire failed on a live mapping")
		}
	}
	m.Release()
	m.Release()
	if unmapped {
		t.Fatal("unmapped while the owner still holds it")
	}
	m.Release() // the owner's
	if !unmapped || m.Refs() != 0 {
		t.Fatalf("not unmapped after the last release (refs %d)", m.Refs())
	}
	if m.Acquire() {
		t.Fatal("Acquire succeeded after unmap")
	}
}
