package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/vrnic/vrnicd/cmd/internal/oob/getopt"
)

// Environment variables vrnic-run reads or sets. VRNICD_SOCKET and
// VRNIC_POLL_YIELD are the drop-in library's (cabi/ibverbs/device.c).
const (
	libDirEnv    = "VRNIC_LIBDIR"
	socketEnv    = "VRNICD_SOCKET" // a colon-separated list here, one device each
	pollYieldEnv = "VRNIC_POLL_YIELD"
	ldPathEnv    = "LD_LIBRARY_PATH"
	// socketDir is where the library looks without VRNICD_SOCKET.
	socketDir = "/run/vrnicd"
	// verbsLib is the drop-in library that must be in the library directory.
	verbsLib = "libibverbs.so.1"
)

// options is vrnic-run's option table (for the docs too). Only long
// options besides -h: a short one would be easy to mistake for the
// program's.
var options = []getopt.Option{
	{Long: "socket", HasArg: true},
	{Long: "libdir", HasArg: true},
	{Long: "print-env"},
	{Short: 'h', Long: "help"},
}

// config is a parsed command line.
type config struct {
	sockets  []string // --socket, in order
	libDir   string   // --libdir; "" when not given
	printEnv bool
	help     bool
	argv     []string // PROGRAM and its arguments
}

// parseArgs reads a command line (without the program name). Options end
// at the first argument that is not one, or after "--": everything from
// there on is the program's, so `vrnic-run ib_write_bw -d vrnic0` passes
// -d on. Unlike getopt.Parse there is no permutation.
func parseArgs(args []string) (*config, error) {
	cfg := &config{}
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if a == "-" || !strings.HasPrefix(a, "-") {
			break
		}
		o, val, err := option(args, &i)
		if err != nil {
			return cfg, err
		}
		switch o.Long {
		case "socket":
			if val == "" {
				return cfg, getopt.Usagef("--socket: empty path")
			}
			if strings.Contains(val, ":") {
				return cfg, getopt.Usagef("--socket %q: a path with ':' cannot go in %s (colons separate its paths)", val, socketEnv)
			}
			cfg.sockets = append(cfg.sockets, val)
		case "libdir":
			if val == "" {
				return cfg, getopt.Usagef("--libdir: empty path")
			}
			cfg.libDir = val
		case "print-env":
			cfg.printEnv = true
		case "help":
			cfg.help = true
		}
	}
	cfg.argv = args[i:]
	if len(cfg.argv) == 0 && !cfg.help && !cfg.printEnv {
		return cfg, getopt.Usagef("no program to run")
	}
	return cfg, nil
}

// option reads the option at args[*i] (and its argument, advancing *i
// past it when it is the next word), with getopt_long's messages.
// Long names may be abbreviated while unambiguous, as getopt_long's.
func option(args []string, i *int) (*getopt.Option, string, error) {
	a := args[*i]
	if !strings.HasPrefix(a, "--") {
		for j := range options {
			if len(a) == 2 && options[j].Short == a[1] {
				return &options[j], "", nil
			}
		}
		if len(a) == 2 {
			return nil, "", getopt.Usagef("invalid option -- '%c'", a[1])
		}
		return nil, "", getopt.Usagef("unrecognized option '%s'", a)
	}
	name, val, hasVal := strings.Cut(a[2:], "=")
	var o *getopt.Option
	n := 0
	for j := range options {
		if options[j].Long == name {
			o, n = &options[j], 1
			break
		}
		if strings.HasPrefix(options[j].Long, name) {
			o = &options[j]
			n++
		}
	}
	switch {
	case n == 0:
		return nil, "", getopt.Usagef("unrecognized option '--%s'", name)
	case n > 1:
		return nil, "", getopt.Usagef("option '--%s' is ambiguous", name)
	case o.HasArg && !hasVal:
		if *i+1 >= len(args) {
			return nil, "", getopt.Usagef("option '--%s' requires an argument", o.Long)
		}
		*i++
		val = args[*i]
	case !o.HasArg && hasVal:
		return nil, "", getopt.Usagef("option '--%s' doesn't allow an argument", o.Long)
	}
	return o, val, nil
}

// usage is --help; the man page's option texts come from it.
func usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: vrnic-run [--socket PATH]... [--libdir DIR] [--print-env] [--]\n")
	fmt.Fprintf(w, "                 PROGRAM [ARGS...]\n")
	fmt.Fprintf(w, "\nRuns PROGRAM, an unmodified libibverbs or librdmacm program, on vrnicd: the\n")
	fmt.Fprintf(w, "directory of vrnicd's drop-in %s and librdmacm.so.1 goes first in %s.\n", verbsLib, ldPathEnv)
	fmt.Fprintf(w, "Options end at PROGRAM (or at --); what follows is PROGRAM's.\n")
	fmt.Fprintf(w, "\nOptions:\n")
	fmt.Fprintf(w, "  --socket PATH   a vrnicd socket, one device; repeat for several: sets\n")
	fmt.Fprintf(w, "                  $%s to them, colon-joined (default: the\n", socketEnv)
	fmt.Fprintf(w, "                  inherited $%s, else every *.sock in %s)\n", socketEnv, socketDir)
	fmt.Fprintf(w, "  --libdir DIR    the drop-in libraries' directory (default $%s, else\n", libDirEnv)
	fmt.Fprintf(w, "                  ../lib/vrnicd from the directory of vrnic-run's executable)\n")
	fmt.Fprintf(w, "  --print-env     print the variables PROGRAM would get (%s, and\n", ldPathEnv)
	fmt.Fprintf(w, "                  %s and %s when set), NAME=VALUE\n", socketEnv, pollYieldEnv)
	fmt.Fprintf(w, "                  a line, shell-quoted, and exit without running it\n")
	fmt.Fprintf(w, "  -h, --help      show this help and exit\n")
	fmt.Fprintf(w, "\nExit status: PROGRAM's; 125 when vrnic-run fails, 126 when PROGRAM cannot\n")
	fmt.Fprintf(w, "be run, 127 when it is not found (as env(1)).\n")
}
