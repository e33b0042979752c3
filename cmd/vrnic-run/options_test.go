package main

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/vrnic/vrnicd/cmd/internal/oob/getopt"
)

// Options end at the first non-option or after "--"; what follows is the
// program's, its own options included.
func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args     string
		sockets  []string
		libDir   string
		printEnv bool
		help     bool
		argv     []string
	}{
		{args: "ibv_devinfo", argv: []string{"ibv_devinfo"}},
		{args: "ib_write_bw -d vrnic0 --socket x", argv: []string{"ib_write_bw", "-d", "vrnic0", "--socket", "x"}},
		{args: "--socket /a.sock --socket=/b.sock ib_write_bw -x 1", sockets: []string{"/a.sock", "/b.sock"}, argv: []string{"ib_write_bw", "-x", "1"}},
		{args: "--libdir /opt/l -- --weird-program -h", libDir: "/opt/l", argv: []string{"--weird-program", "-h"}},
		{args: "--libdir=/opt/l --print-env true", libDir: "/opt/l", printEnv: true, argv: []string{"true"}},
		{args: "--print-env", printEnv: true, argv: []string{}},
		{args: "--print", printEnv: true, argv: []string{}}, // an unambiguous prefix, as getopt_long
		{args: "--sock s prog", sockets: []string{"s"}, argv: []string{"prog"}},
		{args: "-h", help: true, argv: []string{}},
		{args: "--help prog", help: true, argv: []string{"prog"}},
		{args: "- x", argv: []string{"-", "x"}}, // "-" is an operand, as getopt's
	} {
		cfg, err := parseArgs(strings.Fields(tc.args))
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if !reflect.DeepEqual(cfg.sockets, tc.sockets) || cfg.libDir != tc.libDir || cfg.printEnv != tc.printEnv ||
			cfg.help != tc.help || !reflect.DeepEqual(cfg.argv, tc.argv) {
			t.Errorf("%q: got %+v", tc.args, cfg)
		}
	}
}

// Bad command lines are usage errors, with getopt_long's messages.
func TestParseArgsErrors(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"", "no program to run"},
		{"--socket", "option '--socket' requires an argument"},
		{"--socket=", "--socket: empty path"},
		{"--libdir= x", "--libdir: empty path"},
		{"--socket a:b x", `--socket "a:b": a path with ':' cannot go in VRNICD_SOCKET`},
		{"--print-env=1 x", "option '--print-env' doesn't allow an argument"},
		{"--bogus x", "unrecognized option '--bogus'"},
		{"-x prog", "invalid option -- 'x'"},
		{"-hx prog", "unrecognized option '-hx'"},
		{"--socket /s", "no program to run"},
	} {
		_, err := parseArgs(strings.Fields(tc.args))
		var u *getopt.UsageError
		if err == nil || !errors.As(err, &u) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want a usage error %q", tc.args, err, tc.want)
		}
	}
}
