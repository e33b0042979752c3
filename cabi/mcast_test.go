package cabi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/verbsock/server/servertest"
)

// UD multicast through the drop-in libibverbs as an application uses it
// (testprog/mcast.c says what each case checks): attach/detach rules,
// fan-out to another device's QPs, loopback to the sender's device,
// detach, BLOCK_SELF_MCAST_LB, unsupported creation flags. One process
// opens both devices (VRNICD_SOCKET=a:b).
func TestMcastVerbs(t *testing.T) {
	prog := buildProg(t, "mcast")
	tl, _ := devices(t, 1500)
	both := tool{tl[0].libDir, tl[0].socket + ":" + tl[1].socket, ""}
	out, err := both.run(t, 60*time.Second, prog)
	ok, failed, skipped := caseResults(out)
	if err != nil || len(failed) > 0 || len(skipped) > 0 || ok == 0 || !strings.Contains(out, "ok teardown") {
		t.Fatalf("%v; failed: %q, skipped: %q\n%s", err, failed, skipped, out)
	}
	t.Logf("%d cases ok\n%s", ok, out)
}

// mckeyPair runs rdma-core's mckey as a receiver on rx and then as a
// sender on tx, to group, each with its extra arguments; it returns both
// outputs and errors.
func mckeyPair(t *testing.T, rx, tx tool, rxBind, txBind, group string, rxArgs, txArgs []string) (rxOut, txOut string, rxErr, txErr error) {
	t.Helper()
	return mckeyPairArgv(t, rx, tx, append([]string{"stdbuf", "-oL", "mckey", "-m", group, "-b", rxBind}, rxArgs...),
		append([]string{"mckey", "-m", group, "-b", txBind, "-s"}, txArgs...))
}

// mckeyPairArgv runs the receiver rxArgv on rx and, once it says it is
// receiving (it has joined), the sender txArgv on tx. A sender started
// before the join would send to a group with no members (UD: the
// datagrams are gone), so a receiver that never says so fails the test.
func mckeyPairArgv(t *testing.T, rx, tx tool, rxArgv, txArgv []string) (rxOut, txOut string, rxErr, txErr error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd, buf := rx.command(ctx, rxArgv...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(buf.String(), "receiving data transfers") {
		select {
		case err := <-exited:
			// A receiver that ends before it receives: the caller judges.
			return buf.String(), "", err, errors.New("sender not started: the receiver ended first")
		case <-ctx.Done():
			t.Fatalf("the receiver did not join within the test's time:\n%s", buf.String())
		case <-tick.C:
		}
	}
	txOut, txErr = tx.run(t, 30*time.Second, txArgv...)
	rxErr = <-exited
	return buf.String(), txOut, rxErr, txErr
}

// rdma-core's mckey, unmodified, on the drop-in librdmacm: a receiver and
// a sender on one device (the sender's messages loop back to the
// receiver's QP), then across the two devices.
func TestMckeyDropin(t *testing.T) {
	ourRdmacm(t)
	tl, ds := devices(t, 1500)
	a0, a1 := ds[0].Host.Addr.String(), ds[1].Host.Addr.String()
	for _, c := range []struct {
		name           string
		rx, tx         tool
		rxBind, txBind string
		txArgs         []string
	}{
		{"one-device", tl[0], tl[0], a0, a0, nil},
		{"two-devices", tl[1], tl[0], a1, a0, nil},
		// A send-only full member (-o) sends without joining on the link.
		{"send-only", tl[1], tl[0], a1, a0, []string{"-o"}},
		// -l: the sender's QP has BLOCK_SELF_MCAST_LB (kernel rxe refuses it).
		{"no-loopback", tl[0], tl[0], a0, a0, []string{"-l"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rxOut, txOut, rxErr, txErr := mckeyPair(t, c.rx, c.tx, c.rxBind, c.txBind, "239.5.5.5", []string{"-C", "10", "-c", "3"}, append([]string{"-C", "10"}, c.txArgs...))
			if rxErr != nil || txErr != nil || !strings.Contains(rxOut, "data transfers complete") {
				t.Fatalf("receiver: %v\n%s\nsender: %v\n%s\n%s", rxErr, rxOut, txErr, txOut, deviceCounters(ds))
			}
			t.Logf("receiver:\n%s\nsender:\n%s", rxOut, txOut)
		})
	}
	// -M joins the group as an AF_IB address: kernel rxe's rdma_cm
	// refuses every group but an IPv4 one with ENOTSUPP (524), as does an
	// IPv6 group (the daemon's answer); mckey says so (interop/mckey_test.go
	// runs both against the kernel's).
	t.Run("af-ib-group", func(t *testing.T) {
		out, err := tl[0].run(t, 20*time.Second, "mckey", "-M", "ff0e::db8:7", "-b", a0)
		if err == nil || !strings.Contains(out, "mckey: failure joining: Unknown error 524") {
			t.Fatalf("mckey -M: %v\n%s", err, out)
		}
	})
}

// mckey's output on success (mckey.c run and main), as cmd/vrnic-mckey
// checks it, for group 239.5.5.5.
var (
	mckeyReceiver = []string{"mckey: starting server", "mckey: joining", "mckey: joined dgid: ::ffff:239.5.5.5 mlid 0x0 sl 0",
		"receiving data transfers", "data transfers complete", "test complete", "return status 0"}
	mckeySender = []string{"mckey: starting client", "mckey: joining", "mckey: joined dgid: ::ffff:239.5.5.5 mlid 0x0 sl 0",
		"initiating data transfers", "data transfers complete", "test complete", "return status 0"}
)

// cmd/vrnic-mckey against rdma-core's mckey on the drop-in librdmacm,
// each the sender to the other's receiver across the two devices; then
// both on command lines mckey fails, with the same output and exit status
// (a message larger than the active MTU, an IPv6 group) or with no
// messages (-S 0).
func TestMckeyGoTool(t *testing.T) {
	needProgram(t, "mckey", "rdmacm-utils")
	ourRdmacm(t)
	vm := buildGoTool(t, "vrnic-mckey")
	tl, ds := devices(t, 1500)
	a0, a1 := ds[0].Host.Addr.String(), ds[1].Host.Addr.String()
	deb := []string{"stdbuf", "-oL", "mckey"}
	for _, c := range []struct {
		name     string
		rx, tx   []string
		rxA, txA []string
	}{
		{"vrnic-mckey sender, mckey receiver", deb, []string{vm}, nil, nil},
		{"mckey sender, vrnic-mckey receiver", []string{vm}, deb, nil, nil},
		{"vrnic-mckey send-only sender, mckey receiver", deb, []string{vm}, nil, []string{"-o"}},
		{"mckey sender, vrnic-mckey receivers, 1024 bytes", []string{vm}, deb, []string{"-C", "20", "-S", "1024"}, []string{"-C", "20", "-S", "1024"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rxArgv := append(append(append([]string(nil), c.rx...), "-m", "239.5.5.5", "-b", a1), c.rxA...)
			txArgv := append(append(append([]string(nil), c.tx...), "-m", "239.5.5.5", "-b", a0, "-s"), c.txA...)
			rxOut, txOut, rxErr, txErr := mckeyPairArgv(t, tl[1], tl[0], rxArgv, txArgv)
			if rxErr != nil || txErr != nil {
				t.Fatalf("receiver: %v\n%s\nsender: %v\n%s", rxErr, rxOut, txErr, txOut)
			}
			checkLines(t, "receiver", rxOut, mckeyReceiver)
			checkLines(t, "sender", txOut, mckeySender)
		})
	}
	for _, args := range [][]string{
		{"-m", "239.5.5.5", "-b", a0, "-S", "2000"},
		// rdma_cm joins no IPv6 group over RoCEv2: the kernel's ENOTSUPP.
		// (-M's AF_IB group is ENOTSUPP in the kernel and vrnic-mckey,
		// EINVAL in the drop-in, which takes no AF_IB address.)
		{"-m", "ff0e::5"},
		{"-m", "239.5.5.5", "-b", a0, "-S", "0"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			want, wantErr := tl[0].run(t, 20*time.Second, append(deb, args...)...)
			got, err := tl[0].run(t, 20*time.Second, append([]string{vm}, args...)...)
			if got != want || exitStatus(err) != exitStatus(wantErr) {
				t.Errorf("vrnic-mckey: %v\n%s\nmckey: %v\n%s", err, got, wantErr, want)
			}
			t.Logf("%v\n%s", wantErr, want)
		})
	}
}

// exitStatus is a finished program's exit status (0 for a nil error).
func exitStatus(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// deviceCounters is the devices' counters that are not zero, to say where
// datagrams went when a receiver missed some.
func deviceCounters(ds [2]servertest.Daemon) string {
	var b strings.Builder
	for i, d := range ds {
		fmt.Fprintf(&b, "device %d:", i)
		snap := d.Host.Dev.Counters().Snapshot()
		for _, k := range slices.Sorted(maps.Keys(snap)) {
			if snap[k] != 0 {
				fmt.Fprintf(&b, " %s=%d", k, snap[k])
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}
