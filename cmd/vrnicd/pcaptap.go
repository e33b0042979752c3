package main

import (
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/vrnic/vrnicd/nic/pcapfile"
)

// pcapTap is the netstack FrameTap behind --pcap. Its file can be opened,
// rotated and closed while frames flow (SIGHUP), so the netstack always
// holds the tap and the tap holds the current writer, if any.
type pcapTap struct {
	on   atomic.Bool  // fast path: no capture, no lock
	mu   sync.RWMutex // write lock only to swap w
	w    *pcapfile.Writer
	path string
	ino  fileID // the file w writes, to see it renamed away
}

type fileID struct{ dev, ino uint64 }

// statID identifies the file at path itself: a symlink planted there is not
// the capture, whatever it points to (Lstat), so reopen replaces it, and
// pcapfile.Create then refuses it.
func statID(path string) (fileID, bool) {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil {
		return fileID{}, false
	}
	return fileID{st.Dev, st.Ino}, true
}

// WriteFrame implements netstack.FrameTap.
func (p *pcapTap) WriteFrame(frame []byte) error {
	if !p.on.Load() {
		return nil
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.w == nil {
		return nil
	}
	return p.w.WriteFrame(frame)
}

// open starts writing to path (truncating it); an old file is flushed and
// closed after the switch, so no frame is lost between the two. path ""
// stops capturing. On error the old file stays in use.
func (p *pcapTap) open(path string) error {
	var w *pcapfile.Writer
	var id fileID
	if path != "" {
		var err error
		if w, err = pcapfile.Create(path); err != nil {
			return err
		}
		if fi, err := w.Stat(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				id = fileID{st.Dev, st.Ino}
			}
		}
	}
	p.mu.Lock()
	old := p.w
	p.w, p.path, p.ino = w, path, id
	p.on.Store(w != nil)
	p.mu.Unlock()
	if old != nil {
		return old.Close()
	}
	return nil
}

// reopen is open for SIGHUP: it starts a new file when the path changed or
// the file at the path is no longer the one being written (moved away by
// logrotate, deleted), and otherwise keeps writing, so a reload for another
// reason does not truncate a capture. It reports whether it switched.
func (p *pcapTap) reopen(path string) (bool, error) {
	p.mu.RLock()
	same := path == p.path
	cur := p.ino
	healthy := p.w == nil || p.w.Flush() == nil // a failed writer is replaced
	p.mu.RUnlock()
	if same && healthy {
		if path == "" {
			return false, nil
		}
		if id, ok := statID(path); ok && id == cur {
			return false, nil
		}
	}
	return true, p.open(path)
}

// flush writes buffered frames out, so the file is readable while the
// daemon runs.
func (p *pcapTap) flush() error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.w == nil {
		return nil
	}
	return p.w.Flush()
}

// frames is the number of frames written to the current file.
func (p *pcapTap) frames() uint64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.w == nil {
		return 0
	}
	return p.w.Frames()
}

// current is the file being written, "" for none.
func (p *pcapTap) current() string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.path
}

func (p *pcapTap) close() error { return p.open("") }
