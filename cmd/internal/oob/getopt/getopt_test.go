package getopt

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

var opts = []Option{
	{'p', "port", true}, {'s', "size", true}, {'e', "events", false}, {'c', "chk", false},
	{'g', "gid-idx", true}, {0, "report_gbits", false}, {0, "report-both", false}, {'n', "iters", true},
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args     string
		want     string // name=arg ...
		operands []string
	}{
		{"-d -g 1 -s 2500 -n 2 192.0.2.11", "", nil}, // -d unknown here: error case below
		{"-g 1 -s 2500 -n 2 192.0.2.11", "-g=1 -s=2500 -n=2", []string{"192.0.2.11"}},
		{"-ec -s64", "-e= -c= -s=64", nil},
		{"-ecs 64", "-e= -c= -s=64", nil},
		{"host --size=1024 --iters 5", "-s=1024 -n=5", []string{"host"}},
		{"--it 7 --gid 2", "-n=7 -g=2", nil}, // unambiguous prefixes
		{"--report_gbits -- -s", "--report_gbits=", []string{"-s"}},
		{"-", "", []string{"-"}},
	} {
		got, operands, err := Parse(opts, strings.Fields(tc.args))
		if tc.want == "" && tc.operands == nil && strings.Contains(tc.args, "-d") {
			if err == nil || !strings.Contains(err.Error(), "invalid option -- 'd'") {
				t.Errorf("%q: err %v", tc.args, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		var s []string
		for _, o := range got {
			s = append(s, o.Name()+"="+o.Arg)
		}
		if strings.Join(s, " ") != tc.want || !reflect.DeepEqual(operands, tc.operands) {
			t.Errorf("%q: got %v %q, want %s %q", tc.args, s, operands, tc.want, tc.operands)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for args, want := range map[string]string{
		"-s":             "option requires an argument -- 's'",
		"--size":         "option '--size' requires an argument",
		"--events=1":     "option '--events' doesn't allow an argument",
		"--report":       "option '--report' is ambiguous",
		"--nope":         "unrecognized option '--nope'",
		"-x":             "invalid option -- 'x'",
		"host -p 1 -q 2": "invalid option -- 'q'",
	} {
		_, _, err := Parse(opts, strings.Fields(args))
		if err == nil || err.Error() != want {
			t.Errorf("%q: got %v, want %q", args, err, want)
		}
	}
}

func TestInt(t *testing.T) {
	for arg, want := range map[string]int64{"18515": 18515, "0x10": 16, "010": 8, "0": 0, "-1": -1, "+3": 3} {
		v, err := Int(Opt{&opts[0], arg})
		if err != nil || v != want {
			t.Errorf("%q: %d %v", arg, v, err)
		}
	}
	for _, arg := range []string{"", "12ab", "0x", "1.5", "--1"} {
		if _, err := Int(Opt{&opts[0], arg}); err == nil || !strings.Contains(err.Error(), "-p: ") {
			t.Errorf("%q accepted (%v)", arg, err)
		}
	}
}

// TestOptions: operands and Parse's errors are UsageErrors.
func TestOptions(t *testing.T) {
	got, err := Options(opts, []string{"-e", "-p", "7"})
	if err != nil || len(got) != 2 || got[1].Arg != "7" {
		t.Fatalf("got %v %v", got, err)
	}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"-e", "x"}, `unexpected argument "x"`},
		{[]string{"-z"}, "invalid option -- 'z'"},
	} {
		_, err := Options(opts, tc.args)
		if u := (*UsageError)(nil); !errors.As(err, &u) || err.Error() != tc.msg {
			t.Errorf("%v: got %v, want the UsageError %q", tc.args, err, tc.msg)
		}
	}
}

func TestServer(t *testing.T) {
	for _, tc := range []struct {
		operands []string
		want     string
		ok       bool
	}{
		{nil, "", true}, {[]string{"h"}, "h", true}, {[]string{"h", "x", "y"}, "", false},
	} {
		got, err := Server(tc.operands)
		if u := (*UsageError)(nil); got != tc.want || (err == nil) != tc.ok || (err != nil && !errors.As(err, &u)) {
			t.Errorf("%q: got %q, %v", tc.operands, got, err)
		}
	}
	if _, err := Server([]string{"h", "x", "y"}); err == nil || err.Error() != `unexpected arguments ["x" "y"]` {
		t.Errorf("got %v", err)
	}
}
