package main

import (
	"errors"
	"os/exec"
	"reflect"
	"strings"
	"testing"
)

// fakeSys records what run asks of the system.
type fakeSys struct {
	env      map[string]string
	exe      string
	found    string // LookPath's answer
	lookErr  error
	execErr  error
	looked   []string
	execPath string
	argv     []string
	execEnv  []string
}

func (f *fakeSys) Getenv(k string) string      { return f.env[k] }
func (f *fakeSys) Executable() (string, error) { return f.exe, nil }
func (f *fakeSys) LookPath(p string) (string, error) {
	f.looked = append(f.looked, p)
	return f.found, f.lookErr
}
func (f *fakeSys) Exec(p string, argv, env []string) error {
	f.execPath, f.argv, f.execEnv = p, argv, env
	return f.execErr
}

// run execs the program found in PATH with its arguments as given and
// the environment built; a program PATH finds through "." runs too.
func TestRunExecs(t *testing.T) {
	lib := libTree(t) + "/lib/vrnicd"
	for _, lookErr := range []error{nil, exec.ErrDot} {
		f := &fakeSys{env: map[string]string{libDirEnv: lib}, found: "/usr/bin/ib_write_bw", lookErr: lookErr, execErr: errors.New("exec format error")}
		var stdout, stderr strings.Builder
		code := run([]string{"--socket", "/s", "ib_write_bw", "-d", "vrnic0"}, []string{"HOME=/h", "LD_LIBRARY_PATH=/old"}, &stdout, &stderr, f)
		if code != exitCannotRun || stderr.String() != "vrnic-run: ib_write_bw: exec format error\n" {
			t.Errorf("status %d, stderr %q", code, stderr.String())
		}
		want := []string{"HOME=/h", "LD_LIBRARY_PATH=" + lib + ":/old", "VRNICD_SOCKET=/s"}
		if f.execPath != "/usr/bin/ib_write_bw" || !reflect.DeepEqual(f.argv, []string{"ib_write_bw", "-d", "vrnic0"}) || !reflect.DeepEqual(f.execEnv, want) {
			t.Errorf("exec %q %q %q", f.execPath, f.argv, f.execEnv)
		}
	}
}

// --print-env and --help look for no program.
func TestRunNoExec(t *testing.T) {
	lib := libTree(t) + "/lib/vrnicd"
	for _, args := range [][]string{{"--print-env", "ib_write_bw"}, {"--help", "ib_write_bw"}} {
		f := &fakeSys{env: map[string]string{libDirEnv: lib}}
		var stdout, stderr strings.Builder
		if code := run(args, nil, &stdout, &stderr, f); code != 0 || len(f.looked) > 0 || f.argv != nil || stdout.Len() == 0 {
			t.Errorf("%q: status %d, looked up %q, exec %q, stdout %q", args, code, f.looked, f.argv, stdout.String())
		}
	}
}
