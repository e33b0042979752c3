package cmtool

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/vrnic/vrnicd/verbsock/server/servertest"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// TestStartFailures: ServerStart's and ClientStart's messages when the
// device or the listener cannot be had, as cmatose and udaddy print them.
func TestStartFailures(t *testing.T) {
	var out strings.Builder
	printf := func(f string, a ...any) { fmt.Fprintf(&out, f, a...) }
	if _, err := ClientStart(printf, "x", "/nonexistent/vrnicd.sock"); err == nil ||
		!strings.HasPrefix(out.String(), "x: starting client\nx: failure getting addr: ") {
		t.Errorf("client: err %v, output %q", err, out.String())
	}
	out.Reset()
	if _, _, err := ServerStart(printf, "x", "/nonexistent/vrnicd.sock", (*verbs.Device).Listen, netip.AddrPort{}, nil); err == nil ||
		!strings.HasPrefix(out.String(), "x: starting server\nx: listen request failed: ") {
		t.Errorf("server: err %v, output %q", err, out.String())
	}
	out.Reset()
	ds := servertest.TwoDaemons(t, 1500)
	boom := func(*verbs.Device, netip.AddrPort) (*verbs.Listener, error) { return nil, errors.New("boom") }
	dev, l, err := ServerStart(printf, "x", ds[0].Socket, boom, netip.AddrPort{}, func() { t.Error("told of a listen that failed") })
	if dev == nil || l != nil || err == nil || out.String() != "x: starting server\nx: bind address failed: boom\n" {
		t.Errorf("listen: %v %v %v, output %q", dev, l, err, out.String())
	}
	if dev != nil {
		_ = dev.Close()
	}
}
