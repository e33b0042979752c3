package main

import (
	"testing"

	"github.com/vrnic/vrnicd/cmd/internal/docgen/docgentest"
)

// Every option of every mode, and --mode, --socket and --help, are in
// vrnic-pingpong(1) and the completions.
func TestManAndCompletion(t *testing.T) {
	accepted := []docgentest.Option{{Long: "mode"}, {Long: "socket"}, {Short: 'h', Long: "help"}}
	for _, m := range modes {
		for _, o := range m.options() {
			accepted = append(accepted, docgentest.Option{Short: o.Short, Long: o.Long})
		}
	}
	docgentest.Check(t, docPage(), accepted)
}
