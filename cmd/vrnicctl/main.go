// Command vrnicctl is the vrnicd tool. Each subcommand lives in its own file
// and registers itself from init:
//
//	func init() {
//		register(&command{Name: "stat", Args: "[--json]", Summary: "...", NArgs: 0,
//			Setup: func(fs *flag.FlagSet) runFunc {
//				asJSON := fs.Bool("json", false, "...")
//				return func(args []string, stdout, stderr io.Writer) error { ... }
//			}})
//	}
//
// Usage: vrnicctl help [COMMAND], vrnicctl COMMAND [ARGS].
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1 // the command ran and failed
	exitUsage = 2 // bad command line
)

// runFunc runs a command with its positional arguments, flags parsed. A
// returned error is printed as one line on stderr and exits 1.
type runFunc func(args []string, stdout, stderr io.Writer) error

// command is one subcommand.
type command struct {
	Name    string
	Args    string // what follows the name in a usage line, e.g. "FILE.pcap [--json]"
	Summary string // one line for vrnicctl help
	NArgs   int    // number of positional arguments; -1 for any
	// Setup defines the command's flags on fs and returns the function that
	// runs it once they are parsed. Flags may come before or after
	// positional arguments.
	Setup func(fs *flag.FlagSet) runFunc
}

var commands = map[string]*command{}

// register adds a subcommand; two with one name is a programming error.
func register(c *command) {
	if _, dup := commands[c.Name]; dup || c.Name == "help" {
		panic("vrnicctl: command registered twice: " + c.Name)
	}
	commands[c.Name] = c
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run dispatches a command line (without the program name) and returns the
// exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) == 1 {
			usage(stdout)
			return exitOK
		}
		c, ok := commands[args[1]]
		if !ok {
			fmt.Fprintf(stderr, "vrnicctl: unknown command %q; run 'vrnicctl help'\n", args[1])
			return exitUsage
		}
		commandUsage(c, stdout)
		return exitOK
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "vrnicctl: unknown command %q; run 'vrnicctl help'\n", name)
		return exitUsage
	}
	fs := flag.NewFlagSet("vrnicctl "+c.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { commandUsage(c, stderr) }
	runIt := c.Setup(fs)
	pos, err := parseArgs(fs, args[1:])
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case err != nil: // flag has printed the error and the usage
		return exitUsage
	case c.NArgs >= 0 && len(pos) != c.NArgs:
		fmt.Fprintf(stderr, "vrnicctl %s: want %d argument(s), got %d\n", c.Name, c.NArgs, len(pos))
		commandUsage(c, stderr)
		return exitUsage
	}
	if err := runIt(pos, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "vrnicctl %s: %s\n", c.Name, strings.ReplaceAll(err.Error(), "\n", " "))
		return exitFail
	}
	return exitOK
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: vrnicctl COMMAND [ARGS]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].Summary)
	}
	fmt.Fprintln(w, "\nRun 'vrnicctl help COMMAND' for a command's arguments and flags.")
}

func commandUsage(c *command, w io.Writer) {
	fmt.Fprintf(w, "usage: vrnicctl %s %s\n\n%s\n", c.Name, c.Args, c.Summary)
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	c.Setup(fs)
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprintln(w, "\nflags:")
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
}

// parseArgs parses flags anywhere among the arguments ("decode x.pcap
// --json" as well as "decode --json x.pcap"); "--" ends flag parsing. It
// returns the positional arguments.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// Parse stops at the first positional argument, or after a "--",
		// which it consumes.
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
