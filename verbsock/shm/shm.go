// Package shm is the shared memory of verbsock: sealed memfds the client
// allocates, the daemon's checked mappings of them (a mem.Backing that
// unmaps when its last reference goes), and the socketpairs that carry
// doorbells and completion events (wake.go).
//
// A memfd is only accepted by the daemon with F_SEAL_SHRINK and
// F_SEAL_GROW set. Without F_SEAL_SHRINK the client could truncate the file
// under the daemon's mapping, and the daemon's next access to a page past
// the new end would raise SIGBUS in the daemon; the seals make the size
// immutable for every holder of the file, so a checked size stays true.
//
// The seals are not enough on every file system: they do not forbid
// fallocate(FALLOC_FL_PUNCH_HOLE), and a hole punched in a hugetlbfs file
// (a memfd made with MFD_HUGETLB) takes away the page under the daemon's
// mapping, so its next access there raises SIGBUS. Check therefore accepts
// only shmem files (fstatfs f_type TMPFS_MAGIC); see Check for why a hole in
// shmem is harmless.
package shm

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// PageSize is the granule of every shared mapping.
var PageSize = os.Getpagesize()

// RequiredSeals are the seals a memfd must carry before the daemon maps it.
const RequiredSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW

// Errors of Map.
var (
	ErrNotMemfd  = errors.New("shm: fd is not a sealable memfd")
	ErrNotSealed = errors.New("shm: memfd lacks F_SEAL_SHRINK|F_SEAL_GROW")
	ErrNotShmem  = errors.New("shm: memfd is not shmem (a hugetlbfs memfd or other file system could fault the daemon)")
	ErrSize      = errors.New("shm: memfd size not acceptable")
	ErrReleased  = errors.New("shm: mapping already released")
)

// Create makes a memfd of size bytes (a multiple of PageSize), sealed
// against shrinking and growing and against further seal changes, and
// returns its descriptor (close-on-exec).
func Create(name string, size int) (int, error) {
	if size <= 0 || size%PageSize != 0 {
		return -1, fmt.Errorf("%w: %d bytes (need a positive multiple of %d)", ErrSize, size, PageSize)
	}
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, fmt.Errorf("shm: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("shm: ftruncate: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, RequiredSeals|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("shm: F_ADD_SEALS: %w", err)
	}
	return fd, nil
}

// MapFD maps all size bytes of fd shared and writable (the client's own
// view of its memory). Unmap it with unix.Munmap.
func MapFD(fd, size int) ([]byte, error) {
	b, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: mmap: %w", err)
	}
	return b, nil
}

// Check validates a memfd received from a client and returns its size: it
// must be a memfd (or other sealable shmem file) with RequiredSeals, not
// write-sealed, and its size a positive multiple of PageSize no larger than
// max (and equal to want when want > 0).
//
// Only shmem is accepted (ErrNotShmem otherwise), because on shmem no
// access inside the sealed size can fault: a page the client punched out
// (FALLOC_FL_PUNCH_HOLE) or never touched is allocated, zero-filled, by the
// daemon's next access (shmem_fault), so the worst a client gets is zeroes
// in its own MR. Memory-cgroup charging of such pages is bounded by the
// mapped-bytes quotas (SECURITY.md). hugetlbfs instead raises SIGBUS on a
// page it cannot find or reserve, and other file systems can fail I/O.
func Check(fd int, want, max int64) (int64, error) {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return 0, fmt.Errorf("%w (F_GET_SEALS: %v)", ErrNotMemfd, err)
	}
	if seals&RequiredSeals != RequiredSeals {
		return 0, fmt.Errorf("%w (seals %#x)", ErrNotSealed, seals)
	}
	if seals&(unix.F_SEAL_WRITE|unix.F_SEAL_FUTURE_WRITE) != 0 {
		return 0, fmt.Errorf("%w: memfd is write-sealed (seals %#x)", ErrSize, seals)
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return 0, fmt.Errorf("%w (fstatfs: %v)", ErrNotMemfd, err)
	}
	if sfs.Type != unix.TMPFS_MAGIC {
		return 0, fmt.Errorf("%w (file system magic %#x)", ErrNotShmem, uint64(sfs.Type))
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, fmt.Errorf("shm: fstat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, ErrNotMemfd
	}
	n := st.Size
	switch {
	case n <= 0 || n%int64(PageSize) != 0:
		return 0, fmt.Errorf("%w: %d bytes is not a positive multiple of %d", ErrSize, n, PageSize)
	case want > 0 && n != want:
		return 0, fmt.Errorf("%w: %d bytes, want %d", ErrSize, n, want)
	case n > max:
		return 0, fmt.Errorf("%w: %d bytes exceeds the limit of %d", ErrSize, n, max)
	case n > int64(^uint(0)>>1):
		return 0, fmt.Errorf("%w: %d bytes", ErrSize, n)
	}
	return n, nil
}

// Mapping is the daemon's mapping of a client's sealed memfd: a
// mem.Backing. It starts with one reference, its creator's; Release of the
// last reference unmaps it. Bytes returns the same slice for its whole life,
// which callers must not touch once their reference is gone.
type Mapping struct {
	b    []byte
	refs atomic.Int64
	// OnUnmap, if set before the mapping is shared, runs after the unmap.
	OnUnmap func()
}

// Map checks fd as Check does and maps it. The caller keeps fd (close it
// when done: the mapping holds the file open by itself).
func Map(fd int, want, max int64) (*Mapping, error) {
	n, err := Check(fd, want, max)
	if err != nil {
		return nil, err
	}
	b, err := unix.Mmap(fd, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: mmap: %w", err)
	}
	m := &Mapping{b: b}
	m.refs.Store(1)
	return m, nil
}

// Bytes is the mapped memory.
func (m *Mapping) Bytes() []byte { return m.b }

// Len is the size of the mapping.
func (m *Mapping) Len() int { return len(m.b) }

// Acquire takes a reference unless the mapping is already unmapped.
func (m *Mapping) Acquire() bool {
	for {
		n := m.refs.Load()
		if n <= 0 {
			return false
		}
		if m.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Release drops a reference; the last one unmaps.
func (m *Mapping) Release() {
	n := m.refs.Add(-1)
	if n < 0 {
		panic("shm: mapping released more often than acquired")
	}
	if n == 0 {
		_ = unix.Munmap(m.b)
		if m.OnUnmap != nil {
			m.OnUnmap()
		}
	}
}

// Refs is the current reference count (0 once unmapped).
func (m *Mapping) Refs() int64 { return m.refs.Load() }
