package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// --socket and --json may come before the command as well as after it.
func TestGlobalFlagsBeforeCommand(t *testing.T) {
	_, _, sock := daemonHost(t)
	for _, args := range [][]string{
		{"--socket", sock, "stat", "--json"},
		{"--json", "--socket=" + sock, "stat"},
		{"-socket", sock, "--json", "qp"},
		{"stat", "--json", "--socket", sock},
	} {
		rc, out, errOut := runCmd(args...)
		if rc != 0 || !json.Valid([]byte(out)) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, rc, out, errOut)
		}
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus", "stat"}, "unknown flag --bogus before the command"},
		{[]string{"--socket"}, "flag --socket needs an argument"},
		{[]string{"--json", "impair", "--socket", sock}, "flag provided but not defined: -json"},
	} {
		rc, _, errOut := runCmd(tt.args...)
		if rc != exitUsage || !strings.Contains(errOut, tt.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", tt.args, rc, errOut, exitUsage, tt.want)
		}
	}
}

// Without --socket, $VRNICD_SOCKET names the socket; --socket still wins.
func TestSocketFromEnv(t *testing.T) {
	_, _, sock := daemonHost(t)
	t.Setenv(verbs.SocketEnv, sock)
	if rc, out, errOut := runCmd("devinfo"); rc != 0 || !strings.Contains(out, "hca_id:\tvrnic0") {
		t.Fatalf("devinfo with %s=%s: exit %d, %q %q", verbs.SocketEnv, sock, rc, out, errOut)
	}
	if rc, _, errOut := runCmd("devinfo", "--socket", sock+".none"); rc != exitFail || !strings.Contains(errOut, sock+".none") {
		t.Fatalf("--socket over the environment: exit %d, %q", rc, errOut)
	}
	if rc, out, _ := runCmd("help", "stat"); rc != 0 || !strings.Contains(out, "$"+verbs.SocketEnv) {
		t.Fatalf("help stat: %d %q", rc, out)
	}
	if rc, out, _ := runCmd("help"); rc != 0 || !strings.Contains(out, "$"+verbs.SocketEnv) {
		t.Fatalf("help: %d %q", rc, out)
	}
}

// capture's bad arguments are usage errors, found before the daemon is
// asked; an unreachable daemon is a failure.
func TestCaptureCommandLine(t *testing.T) {
	sock := t.TempDir() + "/none.sock"
	for _, args := range [][]string{{"--qp", "nope"}, {"--qp", "0x1000000"}, {"--count", "-1"}, {"extra"}} {
		if rc, _, errOut := runCmd(append([]string{"capture", "-w", t.TempDir() + "/x.pcap", "--socket", sock}, args...)...); rc != exitUsage {
			t.Errorf("capture %q: exit %d, stderr %q; want %d", args, rc, errOut, exitUsage)
		}
	}
	if rc, _, errOut := runCmd("capture", "-w", t.TempDir()+"/x.pcap", "--socket", sock); rc != exitFail || !strings.Contains(errOut, "cannot reach vrnicd") {
		t.Errorf("capture without a daemon: exit %d, stderr %q", rc, errOut)
	}
}
