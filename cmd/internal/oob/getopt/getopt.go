// Package getopt parses command lines the way glibc's getopt_long does,
// so the vrnic tools take the kernel tools' command lines verbatim:
// clustered short options (-ec), attached or separate arguments (-s64,
// -s 64), long options with = or a separate argument (--size=64,
// --size 64) and unambiguous prefixes (--it for --iters), options and
// operands in any order (GNU permutation), "--" to end the options.
//
// It lives under cmd/internal/oob because the tools that need it are the
// ones that speak the kernel tools' out-of-band protocols.
package getopt

import (
	"fmt"
	"strconv"
	"strings"
)

// Option is one option a command accepts.
type Option struct {
	Short  byte   // 0 if the option has only a long form
	Long   string // "" if it has only a short form
	HasArg bool
}

// Opt is one parsed option occurrence.
type Opt struct {
	Option *Option
	Arg    string
}

// Name is how the user wrote the option's name, for messages.
func (o Opt) Name() string {
	if o.Option.Short != 0 {
		return "-" + string(o.Option.Short)
	}
	return "--" + o.Option.Long
}

// Parse splits args (without the program name) into options, in order, and
// operands.
func Parse(opts []Option, args []string) ([]Opt, []string, error) {
	var out []Opt
	var operands []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return out, append(operands, args[i+1:]...), nil
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			o, err := findLong(opts, name)
			if err != nil {
				return nil, nil, err
			}
			switch {
			case o.HasArg && !hasVal:
				if i+1 >= len(args) {
					return nil, nil, fmt.Errorf("option '--%s' requires an argument", o.Long)
				}
				i++
				val = args[i]
			case !o.HasArg && hasVal:
				return nil, nil, fmt.Errorf("option '--%s' doesn't allow an argument", o.Long)
			}
			out = append(out, Opt{o, val})
		case len(a) > 1 && a[0] == '-':
			for j := 1; j < len(a); j++ {
				o := findShort(opts, a[j])
				if o == nil {
					return nil, nil, fmt.Errorf("invalid option -- '%c'", a[j])
				}
				if !o.HasArg {
					out = append(out, Opt{o, ""})
					continue
				}
				val := a[j+1:]
				if val == "" {
					if i+1 >= len(args) {
						return nil, nil, fmt.Errorf("option requires an argument -- '%c'", a[j])
					}
					i++
					val = args[i]
				}
				out = append(out, Opt{o, val})
				break
			}
		default:
			operands = append(operands, a)
		}
	}
	return out, operands, nil
}

func findShort(opts []Option, c byte) *Option {
	for i := range opts {
		if opts[i].Short == c {
			return &opts[i]
		}
	}
	return nil
}

// findLong finds an exact long name, else the one option it abbreviates.
func findLong(opts []Option, name string) (*Option, error) {
	var match *Option
	n := 0
	for i := range opts {
		o := &opts[i]
		if o.Long == "" {
			continue
		}
		if o.Long == name {
			return o, nil
		}
		if strings.HasPrefix(o.Long, name) && name != "" {
			match = o
			n++
		}
	}
	switch n {
	case 0:
		return nil, fmt.Errorf("unrecognized option '--%s'", name)
	case 1:
		return match, nil
	}
	return nil, fmt.Errorf("option '--%s' is ambiguous", name)
}

// Int parses an option's number as strtol(arg, NULL, 0) would for a
// well-formed one: decimal, 0x hex or 0 octal, optionally signed; unlike
// strtol, trailing garbage is an error rather than ignored.
func Int(o Opt) (int64, error) {
	s := o.Arg
	neg := strings.HasPrefix(s, "-")
	if neg || strings.HasPrefix(s, "+") {
		s = s[1:]
	}
	base := 10
	switch {
	case strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X"):
		base, s = 16, s[2:]
	case len(s) > 1 && s[0] == '0':
		base, s = 8, s[1:]
	}
	v, err := strconv.ParseInt(s, base, 64)
	if err != nil || s == "" || s[0] == '-' || s[0] == '+' {
		return 0, fmt.Errorf("%s: %q is not a number", o.Name(), o.Arg)
	}
	if neg {
		v = -v
	}
	return v, nil
}
