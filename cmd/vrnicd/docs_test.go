package main

import (
	"flag"
	"testing"

	"github.com/vrnic/vrnicd/cmd/internal/docgen/docgentest"
)

// Every flag vrnicd's parser defines is in vrnicd(8) and the completions.
func TestManAndCompletion(t *testing.T) {
	o, _ := parseArgs(nil)
	var accepted []docgentest.Option
	o.fs.VisitAll(func(f *flag.Flag) {
		if f.Name != "h" {
			accepted = append(accepted, docgentest.Option{Long: f.Name})
		}
	})
	docgentest.Check(t, docPage(), accepted)
	for _, args := range [][]string{{"--generate-man"}, {"--generate-completion", "bash"}, {"--generate-completion=fish"}} {
		if code, out, errs := runIn(args...); code != 0 || out == "" || errs != "" {
			t.Errorf("%q: %d %q %q", args, code, out[:min(len(out), 80)], errs)
		}
	}
	if code, _, errs := runIn("--generate-completion", "tcsh"); code != 2 || errs == "" {
		t.Errorf("--generate-completion tcsh: %d %q", code, errs)
	}
}
