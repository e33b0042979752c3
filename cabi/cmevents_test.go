package cabi

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/transport/cm"
	"github.com/vrnic/vrnicd/verbsock/server/servertest"
)

// librdmacm's event channels and connection calls as an application uses
// them, on the drop-in librdmacm (testprog/cmevents.c says what each case
// checks, each as rdma-core v44's librdmacm over the kernel's rdma_ucm
// behaves; interop's TestInteropDropinCM runs the same program against the
// real library on kernel rxe). One process opens both devices
// (VRNICD_SOCKET=a:b): the server side on device 0's address, the client
// side on device 1's; 192.0.2.77, in their subnet, answers no ARP. Child
// processes ("killed", "killed_server") are the same program. Afterwards
// both daemons' CM tables hold nothing but connections in timewait.
func TestRdmacmEvents(t *testing.T) {
	prog := buildProg(t, "cmevents", "-lrdmacm", "-lpthread")
	tl, ds := devices(t, 1500)
	ourRdmacm(t)
	both := tool{tl[0].libDir, tl[0].socket + ":" + tl[1].socket, ""}
	start := time.Now()
	cmd, buf := both.command(t.Context(), prog, ds[0].Host.Addr.String(), ds[1].Host.Addr.String(), "192.0.2.77")
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(150 * time.Second):
		_ = cmd.Process.Kill() // ours, by PID
		err = <-done
	}
	out := buf.String()
	checkCMEvents(t, out, err)
	cmTablesClean(t, ds)
	t.Logf("%.1fs\n%s", time.Since(start).Seconds(), out)
}

// checkCMEvents fails the test unless cmevents ran its cases and none
// failed; skipped cases are logged.
func checkCMEvents(t *testing.T, out string, err error) {
	t.Helper()
	ok, failed, skipped := caseResults(out)
	for _, s := range skipped {
		t.Logf("skipped: %s", s)
	}
	if err != nil || len(failed) > 0 || ok == 0 || !strings.Contains(out, " 0 failed") {
		t.Fatalf("%v; failed: %q\n%s", err, failed, out)
	}
}

// cmTablesClean fails the test unless, within 5 s, both devices' CM agents
// hold no listener and no connection but in timewait: every exchange
// finished, and the programs' listeners went with them.
func cmTablesClean(t *testing.T, ds [2]servertest.Daemon) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var left []string
		for i, d := range ds {
			for _, c := range d.CM.Snapshot().Conns {
				if c.State != cm.StateTimewait {
					left = append(left, fmt.Sprintf("device %d: connection %#x in %v (peer %v, QPN %d)", i, c.ID, c.State, c.Peer, c.QPN))
				}
			}
			for _, l := range d.CM.Snapshot().Listeners {
				left = append(left, fmt.Sprintf("device %d: listener on service ID %#x", i, l.ServiceID))
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("connections left in the CM tables:\n%s", strings.Join(left, "\n"))
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
