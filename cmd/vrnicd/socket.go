package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// socketFile is the daemon's listening socket and the identity of the file
// it made, so shutdown removes that file and never one a newer daemon put
// at the same path.
type socketFile struct {
	path string
	ln   *net.UnixListener
	id   fileStamp
}

// fileStamp identifies a file. The inode number alone is not enough: a
// file system reuses it at once for the next file made in the directory.
type fileStamp struct {
	dev, ino uint64
	ctime    unix.Timespec
}

func stamp(path string) (fileStamp, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return fileStamp{}, err
	}
	return fileStamp{st.Dev, st.Ino, st.Ctim}, nil
}

// umaskMu serialises the process-wide umask change around bind.
var umaskMu sync.Mutex

// listenSocket creates the SOCK_SEQPACKET listener at path, mode 0660,
// group gid (-1 keeps the daemon's). Like wireguard-go's UAPI socket, an
// existing file is dialled first: a live daemon there is an error, a dead
// one's file is replaced. stale reports a replaced file.
func listenSocket(path string, gid int) (s *socketFile, stale bool, err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, false, fmt.Errorf("socket directory %s: %w", dir, unwrapPath(err))
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, false, fmt.Errorf("socket %s exists and is not a socket; remove it or choose another path", path)
		}
		switch err := probe(path); {
		case err == nil:
			return nil, false, fmt.Errorf("socket %s is in use by a running vrnicd", path)
		case errors.Is(err, syscall.EPROTOTYPE):
			return nil, false, fmt.Errorf("socket %s is in use by another program (not a SOCK_SEQPACKET server)", path)
		case errors.Is(err, syscall.ECONNREFUSED):
			// Nobody listens: a daemon died without removing its socket.
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, false, fmt.Errorf("remove stale socket %s: %w", path, unwrapPath(err))
			}
			stale = true
		case errors.Is(err, os.ErrNotExist):
			// Removed meanwhile.
		default:
			return nil, false, fmt.Errorf("socket %s exists and cannot be checked: %w", path, unwrapPath(err))
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, false, fmt.Errorf("socket %s: %w", path, unwrapPath(err))
	}

	// Bind under umask 0117 so the file is never more open than 0660, not
	// even between bind and chmod.
	umaskMu.Lock()
	old := unix.Umask(0o117)
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	unix.Umask(old)
	umaskMu.Unlock()
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, false, fmt.Errorf("socket %s is in use by a running vrnicd", path)
		}
		return nil, false, fmt.Errorf("socket %s: %w", path, unwrapPath(err))
	}
	// Shutdown removes the file itself, last, and only if it is still ours.
	ln.SetUnlinkOnClose(false)
	s = &socketFile{path: path, ln: ln}
	fail := func(err error) (*socketFile, bool, error) {
		ln.Close()
		s.remove()
		return nil, false, err
	}
	afterBind(path)
	if err := s.setGroup(gid); err != nil {
		return fail(err)
	}
	return s, stale, nil
}

// afterBind runs between bind and setGroup (tests plant files there).
var afterBind = func(path string) {}

// setGroup sets mode 0660 and the group (gid -1: the daemon's own) of the
// socket file just bound, and takes its identity. Whoever can write the
// directory could have swapped the file for a link since bind, so nothing
// here goes by the path twice: the file is opened once, O_PATH|O_NOFOLLOW
// (a symlink is opened as itself), must be a socket, and is changed
// through that descriptor only (fchownat AT_EMPTY_PATH; a chmod, needed
// only when a default ACL overrode bind's umask, through /proc/self/fd,
// which names that very inode).
func (s *socketFile) setGroup(gid int) error {
	fd, err := unix.Open(s.path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket %s: %w", s.path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("socket %s: %w", s.path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fmt.Errorf("socket %s was replaced after bind (mode %#o): refusing to change it", s.path, st.Mode)
	}
	if st.Mode&0o7777 != 0o660 {
		if err := unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", fd), 0o660); err != nil {
			return fmt.Errorf("socket %s: chmod through /proc/self/fd: %w", s.path, err)
		}
	}
	if gid < 0 {
		gid = os.Getegid()
	}
	if err := unix.Fchownat(fd, "", -1, gid, unix.AT_EMPTY_PATH); err != nil {
		return fmt.Errorf("socket %s: give it to group %d: %w", s.path, gid, err)
	}
	// chmod and chown changed ctime: take the file's identity now.
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("socket %s: %w", s.path, err)
	}
	s.id = fileStamp{st.Dev, st.Ino, st.Ctim}
	return nil
}

// probe dials path to see whether a server is behind it.
func probe(path string) error {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.Dial("unixpacket", path)
	if err != nil {
		return err
	}
	c.Close()
	return nil
}

// remove deletes the socket file if it is still the one this daemon made.
func (s *socketFile) remove() {
	id, err := stamp(s.path)
	if err != nil {
		return
	}
	if s.id != (fileStamp{}) && id != s.id {
		return // a newer daemon's
	}
	_ = os.Remove(s.path)
}

// unwrapPath drops the operation and path an *os.PathError or
// *net.OpError repeats, for one short error line.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return unwrapPath(oe.Err)
	}
	return err
}
