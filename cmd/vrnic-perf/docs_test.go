package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vrnic/vrnicd/cmd/internal/docgen/docgentest"
)

// Every option vrnic-perf takes is in vrnic-perf(1) and the completions;
// those it refuses are in the page.
func TestManAndCompletion(t *testing.T) {
	var accepted []docgentest.Option
	for _, o := range takenOptions {
		accepted = append(accepted, docgentest.Option{Short: o.Short, Long: o.Long})
	}
	docgentest.Check(t, docPage(), accepted)
	var man bytes.Buffer
	if err := docPage().Man(&man); err != nil {
		t.Fatal(err)
	}
	for _, o := range refusedOptions {
		if !strings.Contains(man.String(), `\fB\-\-`+strings.ReplaceAll(o.Long, "-", `\-`)+`\fR`) {
			t.Errorf("vrnic-perf(1) does not document --%s", o.Long)
		}
	}
}

// sampleArgs are arguments each test's parser takes for an option (the
// atomic tests' only message size, RDMA's only rx depth).
var sampleArgs = map[string]string{"port": "18515", "ib-dev": "vrnic0", "ib-port": "1", "mtu": "1024", "size": "8",
	"iters": "100", "tx-depth": "1", "qp-timeout": "14", "sl": "0", "gid-index": "1", "connection": "RC", "qp": "1",
	"inline_size": "0", "outs": "1", "rx-depth": "1", "cq-mod": "1", "atomic_type": "FETCH_AND_ADD", "duration": "5",
	"margin": "1", "socket": "/run/vrnicd/vrnicd.sock"}

// accepts lists the spellings of the options the parser takes in test.
func accepts(t *testing.T, test string) []string {
	var out []string
	for _, o := range options {
		args := []string{test, "--" + o.Long}
		if o.HasArg {
			a, ok := sampleArgs[o.Long]
			if !ok {
				if slices.Contains(refusedOptions, o) {
					a = "1"
				} else {
					t.Fatalf("no sample argument for --%s", o.Long)
				}
			}
			args = append(args, a)
		}
		if _, err := parseArgs(args); err == nil {
			if o.Short != 0 {
				out = append(out, "-"+string(o.Short))
			}
			out = append(out, "--"+o.Long)
		}
	}
	slices.Sort(out)
	return out
}

// The completions offer the tests as the first word, then only what the
// parser takes in that test: no perftest options vrnic-perf refuses
// (-b, --use-srq ...), none refused in that test (-q in the latency
// tests, -I in READ and atomics ...). Bash and fish run their scripts;
// zsh's is read.
func TestCompletionOffersWhatParses(t *testing.T) {
	gen := func(shell string) string {
		var b bytes.Buffer
		if err := docPage().Completion(shell, &b); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(t.TempDir(), "vrnic-perf."+shell)
		if err := os.WriteFile(f, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	words := func(out []byte) []string {
		var w []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if l != "" {
				w = append(w, strings.Fields(l)[0])
			}
		}
		slices.Sort(w)
		return w
	}
	names := slices.Sorted(slices.Values(testNames))
	if bash, err := exec.LookPath("bash"); err == nil {
		f := gen("bash")
		complete := func(line ...string) []string {
			script := `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _vrnic_perf; printf '%s\n' "${COMPREPLY[@]}"`
			out, err := exec.Command(bash, append([]string{"--norc", "-c", script, "bash", f}, line...)...).CombinedOutput()
			if err != nil {
				t.Fatalf("bash: %v %s", err, out)
			}
			return words(out)
		}
		if got := complete("vrnic-perf", ""); !slices.Equal(got, names) {
			t.Errorf("bash, first word: %q, want %q", got, names)
		}
		for _, test := range testNames {
			if got, want := complete("vrnic-perf", test, "-s", "64", "-"), accepts(t, test); !slices.Equal(got, want) {
				t.Errorf("bash, %s: %q\nwant %q", test, got, want)
			}
		}
	}
	if fish, err := exec.LookPath("fish"); err == nil {
		f := gen("fish")
		complete := func(line string) []string {
			out, err := exec.Command(fish, "--no-config", "-c", `source $argv[1]; complete -C $argv[2]`, f, line).CombinedOutput()
			if err != nil {
				t.Fatalf("fish: %v %s", err, out)
			}
			return words(out)
		}
		if got := complete("vrnic-perf "); !slices.Equal(got, names) {
			t.Errorf("fish, first word: %q, want %q", got, names)
		}
		for _, test := range testNames {
			if got, want := complete("vrnic-perf "+test+" -"), accepts(t, test); !slices.Equal(got, want) {
				t.Errorf("fish, %s: %q\nwant %q", test, got, want)
			}
		}
	}
	var zsh bytes.Buffer
	if err := docPage().Completion("zsh", &zsh); err != nil {
		t.Fatal(err)
	}
	for _, test := range testNames {
		var line string
		for _, l := range strings.Split(zsh.String(), "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), test+") _arguments ") {
				line = l
			}
		}
		acc := accepts(t, test)
		for _, o := range options {
			for _, n := range []string{"-" + string(o.Short), "--" + o.Long} {
				if n == "-\x00" {
					continue
				}
				in := strings.Contains(line, ")"+n+"[") || strings.Contains(line, ")"+n+"=[") || strings.Contains(line, "'"+n+"[") || strings.Contains(line, "'"+n+"=[")
				if in != slices.Contains(acc, n) {
					t.Errorf("zsh, %s: offers %s %v, the parser takes it %v", test, n, in, !in)
				}
			}
		}
	}
}
