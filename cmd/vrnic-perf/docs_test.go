package main

import (
	"testing"

	"github.com/vrnic/vrnicd/cmd/internal/docgen/docgentest"
)

// Every option of vrnic-perf's getopt table is in vrnic-perf(1) and the
// completions.
func TestManAndCompletion(t *testing.T) {
	var accepted []docgentest.Option
	for _, o := range options {
		accepted = append(accepted, docgentest.Option{Short: o.Short, Long: o.Long})
	}
	docgentest.Check(t, docPage(), accepted)
}
