package getopt

import (
	"errors"
	"fmt"
	"io"
	"strconv"
)

// UsageError is a bad command line. The tools print it, then their
// usage, and exit with status 1, as rdma-core's tools do (see Report).
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Usagef is a UsageError with a formatted message: the one way the tools
// make theirs.
func Usagef(format string, a ...any) error {
	return &UsageError{fmt.Sprintf(format, a...)}
}

// Options is Parse for a command that takes no operands, its errors
// UsageErrors.
func Options(opts []Option, args []string) ([]Opt, error) {
	parsed, operands, err := Parse(opts, args)
	if err != nil {
		return nil, Usagef("%v", err)
	}
	if len(operands) > 0 {
		return nil, Usagef("unexpected argument %q", operands[0])
	}
	return parsed, nil
}

// Server is the server operand of a perftest-style command line
// ("[options] [server]"): none (a server) or one; more is a UsageError.
func Server(operands []string) (string, error) {
	switch len(operands) {
	case 0:
		return "", nil
	case 1:
		return operands[0], nil
	}
	return "", Usagef("unexpected arguments %q", operands[1:])
}

// Report is how a tool answers a command line it could not use: err on
// stderr and, when err is a UsageError, usage on stdout.
func Report(err error, stdout, stderr io.Writer, usage func(io.Writer)) {
	fmt.Fprintln(stderr, err)
	if u := (*UsageError)(nil); errors.As(err, &u) {
		usage(stdout)
	}
}

// Range parses an option's decimal count from lo to hi (the callers'
// messages name the option).
func Range(o Opt, lo, hi int) (int, error) {
	v, err := strconv.Atoi(o.Arg)
	if err != nil || v < lo || v > hi {
		return 0, fmt.Errorf("%q is not a number from %d to %d", o.Arg, lo, hi)
	}
	return v, nil
}
