package cabi

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// buildProg compiles one of testprog/'s C programs against rdma-core's
// headers (run against our library through LD_LIBRARY_PATH), linked with
// libibverbs and libs (e.g. "-lrdmacm").
func buildProg(t *testing.T, name string, libs ...string) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	out := filepath.Join(t.TempDir(), name)
	args := append(append([]string{"-std=c11", "-Wall", "-Wextra", "-Werror", "-o", out,
		filepath.Join("testprog", name+".c")}, libs...), "-libverbs")
	b, err := exec.Command(cc, args...).CombinedOutput()
	if err != nil {
		t.Skipf("building %s (apt-get install libibverbs-dev librdmacm-dev): %v\n%s", name, err, b)
	}
	return out
}

// A daemon that goes away under a running program: DEVICE_FATAL on the
// async descriptor, no hang in ibv_get_cq_event, every verb an error, and
// teardown still works (testprog/devfatal.c says what it checks).
func TestDaemonGoneIsDeviceFatal(t *testing.T) {
	prog := buildProg(t, "devfatal")
	for _, mode := range []string{"events", "poll"} {
		t.Run(mode, func(t *testing.T) { daemonGone(t, prog, mode) })
	}
}

// daemonGone runs devfatal in a mode: "events" waits on the async and
// completion channels, "poll" only busy-polls its CQ (the posted receives
// must come back flushed).
func daemonGone(t *testing.T, prog, mode string) {
	tl, ds := devices(t, 1500)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, buf := tl[0].command(ctx, prog, mode)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(buf.String(), "ready") {
		select {
		case err := <-done:
			t.Fatalf("exited before ready: %v\n%s", err, buf)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready in 20 s:\n%s", buf)
		}
	}
	ds[0].Server.Close()
	if err := <-done; err != nil || !strings.Contains(buf.String(), "ok") {
		t.Fatalf("%v\n%s", err, buf)
	}
}
