package main

import (
	"strings"

	"github.com/vrnic/vrnicd/cmd/internal/docgen"
)

// docPage is vrnic-run(1), from the option table (options) and the option
// texts of --help (usage).
func docPage() *docgen.Page {
	var b strings.Builder
	usage(&b)
	help := b.String()
	var flags []docgen.Flag
	for _, o := range options {
		arg, text := docgen.FromHelp(help, o.Short, o.Long)
		flags = append(flags, docgen.Flag{Short: o.Short, Long: o.Long, Arg: arg, Help: text})
	}
	docgen.SortFlags(flags)
	return &docgen.Page{
		Name: "vrnic-run", Section: 1,
		Summary:  "run an unmodified libibverbs or librdmacm program on vrnicd",
		Synopsis: []string{"[--socket PATH]... [--libdir DIR] [--print-env] [--] PROGRAM [ARGS...]"},
		Description: []string{
			"vrnic-run runs PROGRAM, a program linked against rdma-core's libibverbs or librdmacm (ibv_devinfo, ibv_rc_pingpong, perftest's ib_write_bw, rping, ...), unmodified, on vrnicd(8): it puts the directory of vrnicd's drop-in " + verbsLib + " and librdmacm.so.1 first in " + ldPathEnv + " (keeping what was there after it), sets " + socketEnv + " when --socket is given, and executes PROGRAM in its place (execve(2)), with ARGS as they are.",
			"The drop-in library talks to vrnicd over its Unix socket: each socket is one device, named as the daemon names it. Without " + socketEnv + " it finds every *.sock in " + socketDir + " (other than metrics.sock).",
			"The libraries' directory is --libdir, else $" + libDirEnv + ", else ../lib/vrnicd from the directory of vrnic-run's own executable, symlinks resolved: bin/vrnic-run finds lib/vrnicd in the source tree, and $PREFIX/bin/vrnic-run finds $PREFIX/lib/vrnicd, where make install puts the libraries (never in the system's library directory). vrnic-run fails if " + verbsLib + " is not there.",
			"Options end at PROGRAM, the first argument that is not one of vrnic-run's options, or at --: what follows is PROGRAM's, so vrnic-run ib_write_bw -d vrnic0 passes -d to ib_write_bw.",
		},
		Flags: flags,
		Env: []docgen.Env{
			{Name: socketEnv, Help: "read by the library: the vrnicd sockets to use, one device each, separated by colons; --socket sets it (its paths made absolute), otherwise it is passed on as it is. Unset or empty: every *.sock in " + socketDir + "."},
			{Name: libDirEnv, Help: "the drop-in libraries' directory when --libdir is not given."},
			{Name: pollYieldEnv, Help: "read by the library: after this many empty ibv_poll_cq calls in a row each further empty one yields the CPU (sched_yield), so a busy-polling program leaves time to a daemon sharing its CPU; default 16, 0 never yields."},
			{Name: ldPathEnv, Help: "the libraries' directory goes first in it; what was there stays after it."},
		},
		Extra: []docgen.Section{
			{Title: "EXAMPLES", Paragraphs: []string{
				"vrnic-run ibv_devinfo: the vrnicd devices, as ibv_devinfo shows a host's RDMA devices.",
				"vrnic-run ibv_rc_pingpong -g 1 on the server and vrnic-run ibv_rc_pingpong -g 1 192.0.2.10 on the client: rdma-core's RC ping-pong between two daemons (or against a kernel rxe or hardware peer).",
				"vrnic-run --socket /run/vrnicd/vrnicd.sock ib_write_bw -x 1 (and the same with the server's address on the client): perftest's RDMA WRITE bandwidth test on that daemon's device, GID index 1 (the IPv4-mapped GID).",
				"eval \"$(vrnic-run --print-env)\"; export " + ldPathEnv + " " + socketEnv + ": the same environment in a shell, for programs started otherwise.",
			}},
			{Title: "LIMITATIONS", Paragraphs: []string{
				"A setuid or setgid program, or one with file capabilities, runs in secure-execution mode: the dynamic loader ignores " + ldPathEnv + " and it loads the system's libibverbs. So does a program whose DT_RPATH names a directory holding another " + verbsLib + ".",
				"PROGRAM must load the dynamic " + verbsLib + ": a program linked statically against libibverbs, or one that opens the library by a full path, does not use vrnicd.",
				"fork(2) after ibv_reg_mr: the child gets a private copy of registered memory; the registrations, like the device contexts, stay the parent's.",
			}},
			{Title: "EXIT STATUS", Paragraphs: []string{
				"PROGRAM's own status, since PROGRAM replaces vrnic-run; as env(1): 125 when vrnic-run itself fails (a bad command line, no library), 126 when PROGRAM is found but cannot be run, 127 when it is not found. 0 after --help or --print-env.",
			}},
		},
		SeeAlso: []string{"vrnicd(8)", "vrnicctl(1)", "ibv_devinfo(1)", "ibv_rc_pingpong(1)", "ib_write_bw(1)", "ld.so(8)", "env(1)"},
	}
}
