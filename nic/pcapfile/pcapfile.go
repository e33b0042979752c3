// Package pcapfile writes the frames vrnicd sends and receives to a classic
// pcap file (Ethernet link type, nanosecond timestamps), for --pcap FILE.
// Wireshark and tshark open it and decode UDP port 4791 as RoCEv2 (InfiniBand
// BTH and the rest) by default.
//
// A Writer is safe for concurrent use: the send paths and the receive loop
// may all call WriteFrame. Output is buffered; it is flushed when a second
// has passed since the last flush, on Flush, and on Close.
package pcapfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"golang.org/x/sys/unix"
)

// DefaultSnapLen covers a 9000-byte jumbo frame; longer frames are cut to it
// (CaptureLength < Length, as a capture tool would record them).
const DefaultSnapLen = 65535

// ErrClosed is returned by a closed Writer.
var ErrClosed = errors.New("pcapfile: writer closed")

// Writer records frames into a pcap stream.
type Writer struct {
	mu        sync.Mutex
	bw        *bufio.Writer
	w         *pcapgo.Writer
	c         io.Closer // nil when the caller owns the stream
	now       func() time.Time
	lastFlush time.Time
	closed    bool
	err       error // first write error, sticky
	frames    uint64
}

// Mode is the capture file's mode: frames carry every client's payloads
// and keys, so only the daemon's user reads them (not its socket's group).
const Mode = 0o600

// ErrNotOwnFile means the path names something Create will not write: not
// a regular file, a file with other links, or a file of another user.
var ErrNotOwnFile = errors.New("pcapfile: not a regular file of the daemon's own")

// Create creates (truncates) path, mode Mode, and writes the pcap file
// header. It never follows a symlink at path (O_NOFOLLOW: ELOOP), never
// blocks on a FIFO planted there (O_NONBLOCK), and truncates and chmods
// only through the descriptor and only a regular file with one link owned
// by the daemon's user, so a link planted at the path cannot get another
// file truncated or its mode changed.
func Create(path string) (*Writer, error) {
	fd, err := unix.Open(path, unix.O_CREAT|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, Mode)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	if err := claim(fd); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	w, err := newWriter(f, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

// claim checks that fd is the daemon's own regular file, then empties it
// and sets its mode, through fd.
func claim(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 || int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%w (mode %#o, %d links, uid %d)", ErrNotOwnFile, st.Mode, st.Nlink, st.Uid)
	}
	if err := unix.Fchmod(fd, Mode); err != nil {
		return err
	}
	if err := unix.Ftruncate(fd, 0); err != nil {
		return err
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return err
	}
	_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
	return err
}

// Stat describes the file Create opened (by its descriptor, so it is the
// file being written whatever now sits at its path); ErrNotOwnFile for a
// Writer of NewWriter.
func (w *Writer) Stat() (os.FileInfo, error) {
	if f, ok := w.c.(*os.File); ok {
		return f.Stat()
	}
	return nil, ErrNotOwnFile
}

// NewWriter writes a pcap stream to w; Close flushes but does not close w.
func NewWriter(w io.Writer) (*Writer, error) { return newWriter(w, nil) }

func newWriter(w io.Writer, c io.Closer) (*Writer, error) {
	bw := bufio.NewWriterSize(w, 256<<10)
	pw := pcapgo.NewWriterNanos(bw)
	if err := pw.WriteFileHeader(DefaultSnapLen, layers.LinkTypeEthernet); err != nil {
		return nil, err
	}
	return &Writer{bw: bw, w: pw, c: c, now: time.Now, lastFlush: time.Now()}, nil
}

// WriteFrame records one Ethernet frame, stamped with the current time. The
// frame is copied; the caller keeps ownership.
func (w *Writer) WriteFrame(frame []byte) error {
	return w.WriteFrameAt(w.now(), frame)
}

// WriteFrameAt records a frame with a given timestamp.
func (w *Writer) WriteFrameAt(ts time.Time, frame []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	if w.err != nil {
		return w.err
	}
	data := frame
	if len(data) > DefaultSnapLen {
		data = data[:DefaultSnapLen]
	}
	ci := gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(data), Length: len(frame)}
	if err := w.w.WritePacket(ci, data); err != nil {
		w.err = err
		return err
	}
	w.frames++
	if ts.Sub(w.lastFlush) >= time.Second {
		w.lastFlush = ts
		if err := w.bw.Flush(); err != nil {
			w.err = err
			return err
		}
	}
	return nil
}

// Frames is the number of frames written.
func (w *Writer) Frames() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.frames
}

// Flush writes buffered frames out.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	if w.err != nil {
		return w.err
	}
	w.lastFlush = w.now()
	w.err = w.bw.Flush()
	return w.err
}

// Close flushes and, for Create, closes the file. Later writes fail with
// ErrClosed.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	err := w.err
	if err == nil {
		err = w.bw.Flush()
	}
	if w.c != nil {
		if cerr := w.c.Close(); err == nil {
			err = cerr
		}
	}
	return err
}
