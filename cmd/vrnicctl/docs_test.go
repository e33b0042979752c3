package main

import (
	"flag"
	"testing"

	"github.com/vrnic/vrnicd/cmd/internal/docgen/docgentest"
)

// Every command and every flag of every command is in vrnicctl(1) and the
// completions, and so are the flags taken before the command.
func TestManAndCompletion(t *testing.T) {
	var accepted []docgentest.Option
	for name, c := range commands {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		c.Setup(fs)
		fs.VisitAll(func(f *flag.Flag) {
			o := docgentest.Option{Command: name, Long: f.Name}
			if len(f.Name) == 1 {
				o.Short, o.Long = f.Name[0], ""
			}
			accepted = append(accepted, o)
		})
	}
	for n := range globalFlags {
		accepted = append(accepted, docgentest.Option{Long: n})
	}
	docgentest.Check(t, docPage(), accepted)
	if rc, out, _ := runCmd("--generate-completion", "zsh"); rc != 0 || out == "" {
		t.Errorf("--generate-completion zsh: %d", rc)
	}
}
