// Command vrnic-run runs an unmodified libibverbs program (ibv_devinfo,
// ibv_rc_pingpong, perftest's ib_write_bw, ...) on vrnicd: it puts the
// directory of the drop-in libibverbs.so.1 (make cabi) first in
// LD_LIBRARY_PATH, sets VRNICD_SOCKET from --socket, and execs the program.
//
//	vrnic-run ibv_devinfo
//	vrnic-run --socket /run/vrnicd/vrnicd.sock ib_write_bw -x 1
//
// Its options end at the program's name. It exits as env(1) does: with
// the program's status, 125 when it fails itself, 126 when the program
// cannot be run, 127 when it is not found.
package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"syscall"

	"github.com/vrnic/vrnicd/cmd/internal/tool"
)

// Exit statuses, env(1)'s: anything else is the program's own.
const (
	exitOK        = 0
	exitFail      = 125 // vrnic-run's own failure: command line, libraries
	exitCannotRun = 126 // PROGRAM found but it cannot run
	exitNotFound  = 127 // PROGRAM not found
)

// Not a tool.Main tool: there is no context to cancel (the program
// replaces this process), and the exit statuses are env(1)'s.
func main() {
	tool.Docs(docPage)
	os.Exit(run(os.Args[1:], os.Environ(), os.Stdout, os.Stderr, sys{}))
}

// system is what run needs from the operating system; tests fake it.
type system interface {
	Getenv(string) string
	Executable() (string, error)
	LookPath(string) (string, error)
	// Exec replaces the process; it returns only on failure.
	Exec(path string, argv, env []string) error
}

type sys struct{}

func (sys) Getenv(k string) string                { return os.Getenv(k) }
func (sys) Executable() (string, error)           { return os.Executable() }
func (sys) LookPath(f string) (string, error)     { return exec.LookPath(f) }
func (sys) Exec(p string, argv, e []string) error { return syscall.Exec(p, argv, e) }

// run is the whole program: it returns the exit status when it does not
// exec the program.
func run(args, environ []string, stdout, stderr io.Writer, sy system) int {
	cfg, err := parseArgs(args)
	if err != nil {
		fmt.Fprintf(stderr, "vrnic-run: %v; run 'vrnic-run --help'\n", err)
		return exitFail
	}
	if cfg.help {
		usage(stdout)
		return exitOK
	}
	dir, err := findLibDir(cfg.libDir, sy.Getenv, sy.Executable)
	if err != nil {
		fmt.Fprintf(stderr, "vrnic-run: %v\n", err)
		return exitFail
	}
	env, err := buildEnv(environ, dir, cfg.sockets)
	if err != nil {
		fmt.Fprintf(stderr, "vrnic-run: %v\n", err)
		return exitFail
	}
	if cfg.printEnv {
		fmt.Fprint(stdout, printEnv(env))
		return exitOK
	}
	prog := cfg.argv[0]
	path, err := sy.LookPath(prog)
	if errors.Is(err, exec.ErrDot) { // PATH has "." in it: run it, as env(1) would
		err = nil
	}
	if err != nil {
		return cannotRun(stderr, prog, err)
	}
	return cannotRun(stderr, prog, sy.Exec(path, cfg.argv, env))
}

// cannotRun reports why prog did not start and returns env(1)'s status:
// 127 when it is not there, 126 when it is but cannot run.
func cannotRun(stderr io.Writer, prog string, err error) int {
	var ee *exec.Error
	if errors.As(err, &ee) {
		err = ee.Err
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	switch {
	case errors.Is(err, exec.ErrNotFound):
		fmt.Fprintf(stderr, "vrnic-run: %s: command not found in $PATH\n", prog)
		return exitNotFound
	case errors.Is(err, fs.ErrNotExist):
		fmt.Fprintf(stderr, "vrnic-run: %s: %v\n", prog, err)
		return exitNotFound
	}
	fmt.Fprintf(stderr, "vrnic-run: %s: %v\n", prog, err)
	return exitCannotRun
}
