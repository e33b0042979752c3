package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The tests below run the real binary, built once per test run into a
// tree of its own: <tree>/bin/vrnic-run beside <tree>/lib/vrnicd.
var (
	binOnce sync.Once
	binTree string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binTree != "" {
		os.RemoveAll(binTree)
	}
	os.Exit(code)
}

// tree builds vrnic-run into <tree>/bin, with an empty file for
// <tree>/lib/vrnicd/libibverbs.so.1, and returns tree.
func tree(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binTree, binErr = os.MkdirTemp("", "vrnic-run-test"); binErr != nil {
			return
		}
		if binErr = os.MkdirAll(filepath.Join(binTree, "lib/vrnicd"), 0o755); binErr != nil {
			return
		}
		if binErr = os.WriteFile(filepath.Join(binTree, "lib/vrnicd", verbsLib), nil, 0o755); binErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", filepath.Join(binTree, "bin/vrnic-run"), ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binTree
}

// vrnicRun runs bin with args and env (added to a minimal environment)
// and returns its stdout, stderr and exit status.
func vrnicRun(t *testing.T, bin string, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &ee):
		return stdout.String(), stderr.String(), ee.ExitCode()
	}
	t.Fatalf("%s %q: %v", bin, args, err)
	return "", "", 0
}

// --print-env: the library directory beside the executable first in
// LD_LIBRARY_PATH, the --socket paths joined; also through a symlink to
// the executable from elsewhere (as $PREFIX/bin/vrnic-run ->
// <tree>/bin/vrnic-run), and not beside a copy that has no libraries.
func TestPrintEnvBinary(t *testing.T) {
	root := tree(t)
	bin := filepath.Join(root, "bin/vrnic-run")
	lib := filepath.Join(root, "lib/vrnicd")

	out, errOut, code := vrnicRun(t, bin, []string{"LD_LIBRARY_PATH=/old:/older", "VRNIC_POLL_YIELD=0"},
		"--print-env", "--socket", "/run/a.sock", "--socket=/run/b.sock", "true")
	want := "LD_LIBRARY_PATH=" + lib + ":/old:/older\nVRNICD_SOCKET=/run/a.sock:/run/b.sock\nVRNIC_POLL_YIELD=0\n"
	if code != 0 || out != want || errOut != "" {
		t.Errorf("--print-env: status %d, stdout %q (want %q), stderr %q", code, out, want, errOut)
	}

	other := t.TempDir()
	link := filepath.Join(other, "vrnic-run")
	if err := os.Symlink(bin, link); err != nil {
		t.Fatal(err)
	}
	out, _, code = vrnicRun(t, link, []string{"VRNICD_SOCKET=/inherited.sock"}, "--print-env")
	if want := "LD_LIBRARY_PATH=" + lib + "\nVRNICD_SOCKET=/inherited.sock\n"; code != 0 || out != want {
		t.Errorf("through a symlink: status %d, stdout %q, want %q", code, out, want)
	}

	// A copy with no lib/vrnicd beside it fails, unless told where.
	if err := os.MkdirAll(filepath.Join(other, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	lone := filepath.Join(other, "bin/vrnic-run")
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lone, data, 0o755); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = vrnicRun(t, lone, nil, "true")
	if code != exitFail || !strings.Contains(errOut, "no libibverbs.so.1 in "+filepath.Join(other, "lib/vrnicd")) {
		t.Errorf("no library: status %d, stderr %q", code, errOut)
	}
	for _, how := range [][]string{{"VRNIC_LIBDIR=" + lib}, nil} {
		args := []string{"--print-env"}
		if how == nil {
			args = []string{"--libdir", lib, "--print-env"}
		}
		out, _, code = vrnicRun(t, lone, how, args...)
		if want := "LD_LIBRARY_PATH=" + lib + "\n"; code != 0 || out != want {
			t.Errorf("%q %q: status %d, stdout %q, want %q", how, args, code, out, want)
		}
	}
}

// The program runs in vrnic-run's place with the environment built, its
// arguments as given (its own options too), and its exit status.
func TestExec(t *testing.T) {
	root := tree(t)
	bin := filepath.Join(root, "bin/vrnic-run")
	lib := filepath.Join(root, "lib/vrnicd")

	out, errOut, code := vrnicRun(t, bin, []string{"LD_LIBRARY_PATH=/old"}, "/bin/sh", "-c", "echo $LD_LIBRARY_PATH")
	if code != 0 || out != lib+":/old\n" || errOut != "" {
		t.Errorf("echo $LD_LIBRARY_PATH: status %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, _, code = vrnicRun(t, bin, nil, "--socket", "/s1", "--socket", "/s2", "--", "sh", "-c", `echo "$VRNICD_SOCKET $0 $*"`, "-d", "vrnic0", "--socket", "x")
	if want := "/s1:/s2 -d vrnic0 --socket x\n"; code != 0 || out != want {
		t.Errorf("arguments: status %d, stdout %q, want %q", code, out, want)
	}
	if _, _, code = vrnicRun(t, bin, nil, "sh", "-c", "exit 3"); code != 3 {
		t.Errorf("exit 3 through vrnic-run: status %d", code)
	}
}

// As env(1): 127 for a program that is not there, 126 for one that cannot
// run, 125 for a bad command line.
func TestExitStatus(t *testing.T) {
	root := tree(t)
	bin := filepath.Join(root, "bin/vrnic-run")
	noexec := filepath.Join(t.TempDir(), "noexec")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"vrnic-run-no-such-program"}, 127, "vrnic-run: vrnic-run-no-such-program: command not found in $PATH\n"},
		{[]string{"/nonexistent/prog", "-x"}, 127, "vrnic-run: /nonexistent/prog: no such file or directory\n"},
		{[]string{noexec}, 126, "vrnic-run: " + noexec + ": permission denied\n"},
		{[]string{"/"}, 126, "vrnic-run: /: is a directory\n"},
		{[]string{"--bogus", "true"}, 125, "vrnic-run: unrecognized option '--bogus'; run 'vrnic-run --help'\n"},
		{nil, 125, "vrnic-run: no program to run; run 'vrnic-run --help'\n"},
	} {
		out, errOut, code := vrnicRun(t, bin, nil, tc.args...)
		if code != tc.code || errOut != tc.msg || out != "" {
			t.Errorf("%q: status %d, stdout %q, stderr %q; want %d, %q", tc.args, code, out, errOut, tc.code, tc.msg)
		}
	}
	out, _, code := vrnicRun(t, bin, nil, "--help")
	if code != 0 || !strings.HasPrefix(out, "Usage: vrnic-run [--socket PATH]...") {
		t.Errorf("--help: status %d, stdout %q", code, out)
	}
	out, _, code = vrnicRun(t, bin, nil, "--generate-man")
	if code != 0 || !strings.Contains(out, ".TH VRNIC\\-RUN 1") {
		t.Errorf("--generate-man: status %d, stdout %.200q", code, out)
	}
}

// With the drop-in library built (make cabi) and rdma-core's ibv_devices
// installed, the program loads the library from the directory vrnic-run
// names, not the system's.
func TestLoadsDropIn(t *testing.T) {
	lib, err := filepath.Abs("../../lib/vrnicd")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(lib, verbsLib)); err != nil {
		t.Skip("the drop-in library is not built (make cabi)")
	}
	if _, err := exec.LookPath("ibv_devices"); err != nil {
		t.Skip("no ibv_devices (rdma-core's ibverbs-utils)")
	}
	bin := filepath.Join(tree(t), "bin/vrnic-run")
	_, errOut, code := vrnicRun(t, bin, []string{"LD_DEBUG=libs", "VRNICD_SOCKET=" + filepath.Join(t.TempDir(), "none.sock")},
		"--libdir", lib, "ibv_devices")
	if code != 0 || !strings.Contains(errOut, "calling init: "+filepath.Join(lib, verbsLib)) {
		t.Errorf("ibv_devices through vrnic-run: status %d, loader's log:\n%s", code, errOut)
	}
}
