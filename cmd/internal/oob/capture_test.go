package oob

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/vrnic/vrnicd/cmd/internal/oob/oobtest"
)

type capture = oobtest.Capture

func readCapture(t *testing.T, name string) *capture {
	t.Helper()
	path, err := oobtest.Golden(name)
	if err != nil {
		t.Fatal(err)
	}
	return readCaptureFile(t, path)
}

func readCaptureFile(t *testing.T, path string) *capture {
	t.Helper()
	c, err := oobtest.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// messages cuts a stream into messages of the given sizes and checks that
// nothing is left over.
func messages(t *testing.T, what string, stream []byte, sizes ...int) [][]byte {
	t.Helper()
	var out [][]byte
	for _, n := range sizes {
		if len(stream) < n {
			t.Fatalf("%s: stream ends %d bytes into a %d-byte message", what, len(stream), n)
		}
		out = append(out, stream[:n])
		stream = stream[n:]
	}
	if len(stream) != 0 {
		t.Fatalf("%s: %d bytes after the expected messages: %s", what, len(stream), quote(stream))
	}
	return out
}

// gid4 is the IPv4-mapped GID of a.
func gid4(a netip.Addr) [16]byte { return netip.AddrFrom16(a.As16()).As16() }

func TestCaptureTranscripts(t *testing.T) {
	// The shape of every exchange: who writes first and how many bytes,
	// in the order the capture saw them.
	for _, name := range []string{"rc_send.pcap", "rc_send_only.pcap", "uc_send.pcap", "ud_send.pcap", "rdma_write.pcap", "rdma_read.pcap", "send_bw.pcap", "atomic_cmp_swap.pcap", "atomic_fetch_add.pcap", "rdma_write_lat.pcap"} {
		c := readCapture(t, name)
		for _, ch := range c.Chunks {
			t.Logf("%s %v", name, ch)
		}
		if !c.Chunks[0].FromClient {
			t.Errorf("%s: the server wrote first", name)
		}
		if g := gid4(c.Client); !bytes.Equal(g[:12], []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}) {
			t.Errorf("%s: no IPv4 client", name)
		}
	}
}
