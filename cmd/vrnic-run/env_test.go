package main

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// libTree makes <root>/bin and <root>/lib/vrnicd/libibverbs.so.1 (an empty
// file stands for the library) and returns root.
func libTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"bin", "lib/vrnicd"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "lib/vrnicd", verbsLib), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

// The directory is --libdir, else $VRNIC_LIBDIR, else ../lib/vrnicd from
// the executable's directory with symlinks resolved; it must hold the
// library.
func TestFindLibDir(t *testing.T) {
	root := libTree(t)
	lib := filepath.Join(root, "lib/vrnicd")
	other := t.TempDir()
	// A symlink to the executable elsewhere, as /usr/local/bin/vrnic-run ->
	// <tree>/bin/vrnic-run: the tree's libraries count, not the link's.
	exe := filepath.Join(root, "bin/vrnic-run")
	if err := os.WriteFile(exe, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	lone := filepath.Join(other, "vrnic-run-alone") // no lib/vrnicd beside it
	if err := os.WriteFile(lone, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(other, "vrnic-run")
	if err := os.Symlink(exe, link); err != nil {
		t.Fatal(err)
	}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	noEnv := env(nil)
	exeIs := func(p string) func() (string, error) { return func() (string, error) { return p, nil } }

	for _, tc := range []struct {
		name    string
		flag    string
		getenv  func(string) string
		exe     func() (string, error)
		want    string
		wantErr string
	}{
		{name: "beside the executable", getenv: noEnv, exe: exeIs(exe), want: lib},
		{name: "through a symlink", getenv: noEnv, exe: exeIs(link), want: lib},
		{name: "VRNIC_LIBDIR", getenv: env(map[string]string{libDirEnv: lib}), exe: exeIs(link + "-missing"), want: lib},
		{name: "--libdir wins", flag: lib, getenv: env(map[string]string{libDirEnv: other}), exe: exeIs(exe), want: lib},
		{name: "no library there", getenv: env(map[string]string{libDirEnv: other}), exe: exeIs(exe), wantErr: "no libibverbs.so.1 in " + other + " ($VRNIC_LIBDIR)"},
		{name: "no library beside", getenv: noEnv, exe: exeIs(lone), wantErr: "no libibverbs.so.1 in " + filepath.Join(filepath.Dir(other), "lib/vrnicd")},
		{name: "a directory is not the library", flag: root, getenv: noEnv, exe: exeIs(exe), wantErr: "(--libdir)"},
		{name: "no executable", getenv: noEnv, exe: func() (string, error) { return "", errors.New("no /proc") }, wantErr: "cannot find my own executable"},
	} {
		if tc.name == "a directory is not the library" {
			os.Mkdir(filepath.Join(root, verbsLib), 0o755)
		}
		got, err := findLibDir(tc.flag, tc.getenv, tc.exe)
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: got %q, %v; want error %q", tc.name, got, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("%s: got %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}

	// A relative directory comes back absolute: the program may chdir.
	t.Chdir(root)
	if got, err := findLibDir("lib/vrnicd", noEnv, exeIs(exe)); err != nil || got != lib {
		t.Errorf("relative --libdir: %q, %v", got, err)
	}
}

// LD_LIBRARY_PATH gets the directory first, keeping what was there;
// VRNICD_SOCKET is the sockets, absolute and colon-joined, or stays as
// inherited.
func TestBuildEnv(t *testing.T) {
	t.Chdir(t.TempDir())
	wd, _ := os.Getwd()
	for _, tc := range []struct {
		name    string
		environ []string
		sockets []string
		want    []string
	}{
		{"empty", nil, nil, []string{"LD_LIBRARY_PATH=/L"}},
		{"kept after", []string{"A=1", "LD_LIBRARY_PATH=/x:/y", "B=2"}, nil, []string{"A=1", "LD_LIBRARY_PATH=/L:/x:/y", "B=2"}},
		{"empty before", []string{"LD_LIBRARY_PATH="}, nil, []string{"LD_LIBRARY_PATH=/L"}},
		{"duplicates go", []string{"LD_LIBRARY_PATH=/x", "LD_LIBRARY_PATH=/z"}, nil, []string{"LD_LIBRARY_PATH=/L:/x"}},
		{"socket inherited", []string{"VRNICD_SOCKET=/a.sock"}, nil, []string{"VRNICD_SOCKET=/a.sock", "LD_LIBRARY_PATH=/L"}},
		{"sockets joined", []string{"VRNICD_SOCKET=/old.sock"}, []string{"/a.sock", "rel.sock"},
			[]string{"VRNICD_SOCKET=/a.sock:" + filepath.Join(wd, "rel.sock"), "LD_LIBRARY_PATH=/L"}},
		{"socket set", []string{"X=1"}, []string{"/a.sock"}, []string{"X=1", "LD_LIBRARY_PATH=/L", "VRNICD_SOCKET=/a.sock"}},
		{"prefix names alone", []string{"LD_LIBRARY_PATHX=1", "VRNICD_SOCKETS=2"}, nil, []string{"LD_LIBRARY_PATHX=1", "VRNICD_SOCKETS=2", "LD_LIBRARY_PATH=/L"}},
	} {
		got, err := buildEnv(tc.environ, "/L", tc.sockets)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}

// --print-env prints the library's variables that are set, quoted for sh.
func TestPrintEnv(t *testing.T) {
	got := printEnv([]string{"HOME=/root", "VRNIC_POLL_YIELD=0", "LD_LIBRARY_PATH=/my libs:/usr/lib", "VRNICD_SOCKET=/a.sock:/b.sock"})
	want := "LD_LIBRARY_PATH='/my libs:/usr/lib'\nVRNICD_SOCKET=/a.sock:/b.sock\nVRNIC_POLL_YIELD=0\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	for in, want := range map[string]string{"": "''", "/a-b_c.d/e,f@g%h+i=j": "/a-b_c.d/e,f@g%h+i=j", "it's": `'it'\''s'`, "$x": "'$x'"} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %q, want %q", in, got, want)
		}
	}
}
