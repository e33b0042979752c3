// Package servertest runs vrnicd devices behind Unix sockets in-process, as
// the daemon serves them, for tests of the clients (SDK users and tools).
package servertest

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/vrnic/vrnicd/nic/cmagent"
	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/transport/cm"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/server"
)

// Daemon is a device (a nictest host on an in-memory link) served on a
// Unix socket. Server also serves connections handed to it (ServeConn).
type Daemon struct {
	Host   *nictest.Host
	Server *server.Server
	Socket string
	CM     *cmagent.Agent // the device's rdma_cm agent, serving the server's cm_* operations
}

// TwoDaemons starts two devices joined by a link of the given MTU, each
// behind its own socket, stopped when the test ends.
func TwoDaemons(t testing.TB, mtu int) [2]Daemon {
	t.Helper()
	return TwoDaemonsLimits(t, mtu, verbsock.Limits{})
}

// TwoDaemonsLimits is TwoDaemons with the servers' per-client limits (zero
// fields: the defaults).
func TwoDaemonsLimits(t testing.TB, mtu int, limits verbsock.Limits) [2]Daemon {
	t.Helper()
	return TwoDaemonsCM(t, mtu, limits, cm.Config{})
}

// TwoDaemonsCM is TwoDaemonsLimits with the CM agents' configuration (short
// CM timers for tests of lost MADs).
func TwoDaemonsCM(t testing.TB, mtu int, limits verbsock.Limits, cmcfg cm.Config) [2]Daemon {
	t.Helper()
	ha, hb := nictest.Pair(t, mtu)
	var ds [2]Daemon
	for i, h := range []*nictest.Host{ha, hb} {
		lg := nictest.TestLog(t, fmt.Sprint("server", i))
		if os.Getenv("VRNICD_TEST_LOG") != "" {
			lg = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("dev", i)
		}
		ag := cmagent.New(h.Dev, cmagent.Config{CM: cmcfg, Log: lg})
		t.Cleanup(ag.Close)
		srv, err := server.New(server.Config{Device: h.Dev, Limits: limits, CM: ag, Log: lg})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), fmt.Sprintf("vrnicd%d.sock", i))
		l, err := server.Listen(path, -1)
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
		ds[i] = Daemon{Host: h, Server: srv, Socket: path, CM: ag}
	}
	return ds
}
