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
// Usage: vrnicctl help [COMMAND], vrnicctl [--socket PATH] [--json] COMMAND
// [ARGS]: the commands' common flags may also come before the command.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/vrnic/vrnicd/cmd/internal/docgen"
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
	if ok, code := docgen.Handle(args, docPage, stdout, stderr); ok {
		return code
	}
	lead, args, err := leadingFlags(args)
	if err != nil {
		fmt.Fprintf(stderr, "vrnicctl: %v; run 'vrnicctl help'\n", err)
		return exitUsage
	}
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
	pos, err := parseArgs(fs, append(lead, args[1:]...))
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
		var ue *usageError
		if errors.As(err, &ue) { // an argument the flag package could not judge
			fmt.Fprintf(stderr, "vrnicctl %s: %s\n", c.Name, ue.msg)
			commandUsage(c, stderr)
			return exitUsage
		}
		fmt.Fprintf(stderr, "vrnicctl %s: %s\n", c.Name, strings.ReplaceAll(err.Error(), "\n", " "))
		return exitFail
	}
	return exitOK
}

// globalFlags may come before the command (vrnicctl --socket S stat); they
// are handed to the command as its own flags. Value: whether one takes an
// argument.
var globalFlags = map[string]bool{"socket": true, "json": false}

// leadingFlags takes the global flags off the front of args and returns
// them with the rest (the command and its arguments).
func leadingFlags(args []string) (lead, rest []string, err error) {
	for len(args) > 0 {
		a := args[0]
		name, _, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		takesArg, known := globalFlags[name]
		switch {
		case !strings.HasPrefix(a, "-") || a == "-" || a == "--":
			return lead, args, nil
		case a == "-h" || a == "-help" || a == "--help":
			return lead, args, nil
		case !known:
			return nil, nil, fmt.Errorf("unknown flag %s before the command", a)
		case takesArg && !hasVal:
			if len(args) < 2 {
				return nil, nil, fmt.Errorf("flag %s needs an argument", a)
			}
			lead, args = append(lead, a, args[1]), args[2:]
		default:
			lead, args = append(lead, a), args[1:]
		}
	}
	return lead, args, nil
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: vrnicctl COMMAND [ARGS]")
	fmt.Fprintln(w, "       vrnicctl [--socket PATH] [--json] COMMAND [ARGS]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].Summary)
	}
	fmt.Fprintln(w, "\nRun 'vrnicctl help COMMAND' for a command's arguments and flags. --socket and --json")
	fmt.Fprintln(w, "may come before or after the command; without --socket the socket is $VRNICD_SOCKET,")
	fmt.Fprintln(w, "else /run/vrnicd/vrnicd.sock.")
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
