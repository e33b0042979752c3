package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"golang.org/x/sys/unix"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

func init() {
	register(&command{
		Name:    "capture",
		Args:    "[-w FILE|-] [--qp N] [--count N] [--socket PATH]",
		Summary: "stream the RoCEv2 frames the daemon sends and receives, as pcap (| tshark -r -, | wireshark -k -i -)",
		NArgs:   0,
		Setup: func(fs *flag.FlagSet) runFunc {
			sock := socketFlag(fs)
			out := fs.String("w", "-", "write the pcap stream to `FILE`; - is stdout (not a terminal)")
			qp := fs.String("qp", "", "only frames to QP `N` and to its peer (decimal or 0x hex)")
			count := fs.Int("count", 0, "stop after `N` frames (0: until SIGINT)")
			snap := fs.Int("snaplen", 0, "keep at most `BYTES` of each frame (0: all)")
			depth := fs.Int("depth", 0, "`N` frames the daemon may queue for this capture before it drops (0: its default)")
			return func(_ []string, stdout, stderr io.Writer) error {
				o := verbs.CaptureOptions{SnapLen: *snap, Depth: *depth}
				if *qp != "" {
					n, err := strconv.ParseUint(*qp, 0, 24)
					if err != nil {
						return &usageError{fmt.Sprintf("--qp %q is not a QPN", *qp)}
					}
					o.FilterQP, o.QPN = true, uint32(n)
				}
				if *count < 0 || *snap < 0 || *depth < 0 {
					return &usageError{"--count, --snaplen and --depth take 0 or more"}
				}
				return runCapture(*sock, o, *out, *count, stdout, stderr)
			}
		},
	})
}

// runCapture copies the daemon's stream to the output a frame at a time,
// flushing each, until --count frames, SIGINT or the daemon's end.
func runCapture(sock string, o verbs.CaptureOptions, out string, count int, stdout, stderr io.Writer) error {
	if out == "-" && isTerminal(stdout) {
		return errors.New("stdout is a terminal: write to a file (-w FILE) or pipe into tshark -r - or wireshark -k -i -")
	}
	// Signals are ours before the capture starts: a SIGINT from then on
	// ends it cleanly.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d, err := openDevice(sock)
	if err != nil {
		return err
	}
	defer d.Close()
	c, err := d.Capture(o)
	if err != nil {
		return err
	}
	// The file is made only once the daemon said yes: a refused capture
	// does not truncate it.
	w, closeOut, err := captureOutput(out, stdout)
	if err != nil {
		return err
	}
	defer closeOut()
	go func() { <-ctx.Done(); c.Close() }()
	defer c.Close()

	n, err := copyCapture(c, w, count)
	fmt.Fprintf(stderr, "%d frames captured\n", n)
	if err != nil && ctx.Err() == nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

// copyCapture reads the pcap stream and writes it again, flushed after
// every frame, so a reader downstream sees each as it comes.
func copyCapture(c *verbs.Capture, w io.Writer, count int) (int, error) {
	r, err := pcapgo.NewReader(c)
	if err != nil {
		return 0, fmt.Errorf("capture stream: %w", err)
	}
	bw := bufio.NewWriter(w)
	pw := pcapgo.NewWriterNanos(bw)
	if err := pw.WriteFileHeader(r.Snaplen(), layers.LinkTypeEthernet); err != nil {
		return 0, err
	}
	if err := bw.Flush(); err != nil {
		return 0, err
	}
	n := 0
	for count == 0 || n < count {
		data, ci, err := r.ReadPacketData()
		if err != nil {
			return n, err
		}
		if err := pw.WritePacket(ci, data); err != nil {
			return n, err
		}
		if err := bw.Flush(); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// captureOutput opens -w: a file, or stdout.
func captureOutput(out string, stdout io.Writer) (io.Writer, func(), error) {
	if out == "-" {
		return stdout, func() {}, nil
	}
	f, err := os.OpenFile(out, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o640)
	if err != nil {
		return nil, nil, err
	}
	return f, func() { f.Close() }, nil
}

// isTerminal: pcap bytes are no use on a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
