package cmtool_test

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/cmd/internal/cmtool"
	"github.com/vrnic/vrnicd/cmd/internal/tooltest"
	"github.com/vrnic/vrnicd/verbsock/server/servertest"
)

// TestExampleServerClient: rdma_server and rdma_client between two
// daemons: one 16-byte message each way, both end 0.
func TestExampleServerClient(t *testing.T) {
	ds := servertest.TwoDaemons(t, 1500)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := tooltest.StartExampleServer(t, ctx, netip.AddrPortFrom(netip.IPv4Unspecified(), cmtool.DefaultPort), ds[1].Socket)
	var cliOut bytes.Buffer
	cs := cmtool.ExampleClient(ctx, netip.AddrPortFrom(ds[1].Host.Addr, cmtool.DefaultPort), ds[0].Socket, &cliOut)
	sr := srv.Wait()
	if cs != 0 || cliOut.String() != "rdma_client: start\nrdma_client: end 0\n" {
		t.Errorf("client status %d:\n%s", cs, cliOut.String())
	}
	if sr.Err != nil || sr.Stdout != "rdma_server: start\nrdma_server: end 0\n" {
		t.Errorf("server %v:\n%s", sr.Err, sr.Stdout)
	}
}

// TestExampleClientRejected: nobody listens: rdma_connect fails with
// REJECTED reason 8 and the client ends -1.
func TestExampleClientRejected(t *testing.T) {
	ds := servertest.TwoDaemons(t, 1500)
	var out bytes.Buffer
	s := cmtool.ExampleClient(context.Background(), netip.AddrPortFrom(ds[1].Host.Addr, 9999), ds[0].Socket, &out)
	if s != -1 || !strings.Contains(out.String(), "rdma_connect: RDMA_CM_EVENT_REJECTED, error 8\n") ||
		!strings.HasSuffix(out.String(), "rdma_client: end -1\n") {
		t.Fatalf("status %d, output %q", s, out.String())
	}
}

func TestExampleArgs(t *testing.T) {
	var o, e bytes.Buffer
	ap, sock, err := cmtool.ExampleArgs("x", "127.0.0.1", []string{"-s", "192.0.2.7", "-p", "7000", "--socket", "/tmp/s"}, &o, &e)
	if err != nil || ap != netip.MustParseAddrPort("192.0.2.7:7000") || sock != "/tmp/s" {
		t.Errorf("got %v %q %v", ap, sock, err)
	}
	ap, _, err = cmtool.ExampleArgs("x", "0.0.0.0", nil, &o, &e)
	if err != nil || ap != netip.MustParseAddrPort("0.0.0.0:7471") {
		t.Errorf("defaults: got %v %v", ap, err)
	}
	for _, args := range [][]string{{"-p", "65536"}, {"-p", "x"}, {"-q"}, {"extra"}} {
		o.Reset()
		if _, _, err := cmtool.ExampleArgs("x", "0.0.0.0", args, &o, &e); err == nil || !strings.HasPrefix(o.String(), "usage: x") {
			t.Errorf("%v: err %v, stdout %q", args, err, o.String())
		}
	}
}
