package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// findLibDir is the drop-in libraries' directory, absolute: flagDir
// (--libdir) if given, else $VRNIC_LIBDIR, else ../lib/vrnicd from the
// directory of exe (vrnic-run's executable, symlinks resolved: bin/vrnic-run
// in the tree, $PREFIX/bin/vrnic-run installed). It must hold
// libibverbs.so.1.
func findLibDir(flagDir string, getenv func(string) string, exe func() (string, error)) (string, error) {
	dir, from := flagDir, "--libdir"
	if dir == "" {
		dir, from = getenv(libDirEnv), "$"+libDirEnv
	}
	if dir == "" {
		e, err := exe()
		if err == nil {
			e, err = filepath.EvalSymlinks(e)
		}
		if err != nil {
			return "", fmt.Errorf("cannot find my own executable (%v); give the libraries' directory with --libdir or %s", err, libDirEnv)
		}
		dir, from = filepath.Join(filepath.Dir(e), "..", "lib", "vrnicd"), "beside "+e
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	lib := filepath.Join(dir, verbsLib)
	if st, err := os.Stat(lib); err != nil || !st.Mode().IsRegular() {
		return "", fmt.Errorf("no %s in %s (%s): make cabi builds it and make install installs it, or name its directory with --libdir or %s", verbsLib, dir, from, libDirEnv)
	}
	return dir, nil
}

// buildEnv is environ with libDir first in LD_LIBRARY_PATH (what was there
// kept after it) and, when sockets are given, VRNICD_SOCKET set to them,
// made absolute and colon-joined; without them the inherited VRNICD_SOCKET
// stays as it is.
func buildEnv(environ []string, libDir string, sockets []string) ([]string, error) {
	ld := libDir
	if old := lookup(environ, ldPathEnv); old != "" {
		ld += ":" + old
	}
	env := setenv(environ, ldPathEnv, ld)
	if len(sockets) > 0 {
		abs := make([]string, len(sockets))
		for i, s := range sockets {
			a, err := filepath.Abs(s)
			if err != nil {
				return nil, err
			}
			abs[i] = a
		}
		env = setenv(env, socketEnv, strings.Join(abs, ":"))
	}
	return env, nil
}

// lookup is NAME's value in environ (the first, as getenv(3) finds it).
func lookup(environ []string, name string) string {
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// setenv is environ with NAME=value in place of every NAME= entry.
func setenv(environ []string, name, value string) []string {
	out := make([]string, 0, len(environ)+1)
	set := false
	for _, kv := range environ {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
			continue
		}
		if !set {
			out = append(out, name+"="+value)
			set = true
		}
	}
	if !set {
		out = append(out, name+"="+value)
	}
	return out
}

// printedVars are what --print-env prints, when set: the variables the
// drop-in library and the loader read.
var printedVars = []string{ldPathEnv, socketEnv, pollYieldEnv}

// printEnv is --print-env's text: NAME=VALUE a line, the value quoted for
// sh(1) when it needs to be.
func printEnv(env []string) string {
	var b strings.Builder
	for _, name := range printedVars {
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, name+"="); ok {
				fmt.Fprintf(&b, "%s=%s\n", name, shellQuote(v))
				break
			}
		}
	}
	return b.String()
}

// shellQuote is s as one sh(1) word: as it is when it has only characters
// the shell leaves alone, else in single quotes.
func shellQuote(s string) string {
	safe := s != ""
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_@%+=:,./-", c)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
