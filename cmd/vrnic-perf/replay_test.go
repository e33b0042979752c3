package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/cmd/internal/oob"
	"github.com/vrnic/vrnicd/cmd/internal/oob/oobtest"
)

// TestServerAgainstKernelClients runs vrnic-perf as the server of each
// captured run in which the server only answers (no RDMA of its own), and
// replays the kernel client's side of the TCP exchange at it: the server
// must send as many bytes, in the same turns, as perftest's server did,
// finish, and print the report the kernel client sent.
func TestServerAgainstKernelClients(t *testing.T) {
	ds := twoDaemons(t)
	local := func(name string) string { return filepath.Join("..", "internal", "oob", "testdata", name) }
	golden := func(name string) string {
		p, err := oobtest.Golden(name)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		capture string
		args    string
	}{
		{golden("rdma_write.pcap"), "write_bw -F -s 3000 -n 5"},
		{golden("rdma_read.pcap"), "read_bw -F -s 3000 -n 5"},
		{golden("atomic_cmp_swap.pcap"), "atomic_bw -F -A CMP_AND_SWAP -n 5"},
		{golden("atomic_fetch_add.pcap"), "atomic_bw -F -A FETCH_AND_ADD -n 5"},
		{local("write_bw_q2_all.pcap"), "write_bw -F -q 2 -a -n 5"},
		{local("write_bw_dur.pcap"), "write_bw -F -D 2 -s 1024"},
		{local("read_lat.pcap"), "read_lat -F -s 64 -n 5"},
		{local("atomic_lat.pcap"), "atomic_lat -F -n 5"},
	} {
		t.Run(filepath.Base(tc.capture), func(t *testing.T) {
			c, err := oobtest.Read(tc.capture)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			listening := make(chan net.Addr, 1)
			onListen = func(a net.Addr) { listening <- a }
			defer func() { onListen = nil }()
			f := strings.Fields(tc.args)
			args := append([]string{f[0], "--socket", ds[0].Socket, "-p", "0", "-x", fmt.Sprint(ds[0].Host.GIDIndex())}, f[1:]...)
			var out, errOut bytes.Buffer
			done := make(chan error, 1)
			go func() { done <- run(ctx, args, &out, &errOut) }()
			var addr net.Addr
			select {
			case addr = <-listening:
			case err := <-done:
				t.Fatalf("server: %v\n%s", err, errOut.String())
			}
			nc, err := net.DialTimeout("tcp4", addr.String(), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(20 * time.Second))
			for i, ch := range c.Chunks {
				if ch.FromClient {
					if _, err := nc.Write(ch.Data); err != nil {
						t.Fatalf("turn %d: %v", i, err)
					}
					continue
				}
				got := make([]byte, len(ch.Data))
				if n, err := io.ReadFull(nc, got); err != nil {
					t.Fatalf("turn %d: the kernel server sent %d bytes (%v); vrnic-perf %d, then %v", i, len(ch.Data), ch, n, err)
				}
				// The same message kinds: versions, sizes and MTU agree
				// exactly, and a closing "done" is there.
				if i < 6 && !bytes.Equal(got, ch.Data) {
					t.Errorf("turn %d: %s, the kernel server sent %s", i, oobtest.Quote(got), oobtest.Quote(ch.Data))
				}
				if bytes.HasSuffix(ch.Data, []byte("done\x00")) != bytes.HasSuffix(got, []byte("done\x00")) {
					t.Errorf("turn %d: %s, the kernel server sent %s", i, oobtest.Quote(got), oobtest.Quote(ch.Data))
				}
			}
			if extra, _ := io.ReadAll(nc); len(extra) > 0 {
				t.Errorf("vrnic-perf sent %d bytes more: %s", len(extra), oobtest.Quote(extra))
			}
			if err := <-done; err != nil {
				t.Fatalf("server: %v\n%s", err, errOut.String())
			}
			if !strings.HasPrefix(f[0], "read_lat") && !strings.HasPrefix(f[0], "atomic_lat") {
				// The report line: the kernel client's figures, as sent.
				var lines []string
				for _, l := range strings.Split(out.String(), "\n") {
					if bwRE.MatchString(l) {
						lines = append(lines, l)
					}
				}
				var vals []uint64
				for _, ch := range c.Chunks {
					if ch.FromClient && len(ch.Data) == 8 && len(vals) < 5 {
						vals = append(vals, binary.BigEndian.Uint64(ch.Data))
					}
				}
				p, _ := parseArgs(f)
				var want bytes.Buffer
				printBWReport(&want, p, oob.BWReport{Size: vals[0], Iters: vals[1], BWPeak: math.Float64frombits(vals[2]),
					BWAvg: math.Float64frombits(vals[3]), MsgRateAvg: math.Float64frombits(vals[4])})
				if len(lines) != 1 || lines[0]+"\n" != want.String() {
					t.Errorf("report lines %q, want the client's %q", lines, want.String())
				}
			}
		})
	}
}
