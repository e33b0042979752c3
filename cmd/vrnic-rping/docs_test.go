package main

import (
	"testing"

	"github.com/vrnic/vrnicd/cmd/internal/docgen/docgentest"
)

// Every option of vrnic-rping's getopt table is in vrnic-rping(1) and the
// completions, documented once, with an argument exactly when it takes
// one; the page documents nothing the table lacks and has its examples.
func TestManAndCompletion(t *testing.T) {
	docgentest.CheckGetopt(t, options, optionDocs, docPage(), ".SH EXAMPLES", `vrnic\-rping \-s \-a 192.0.2.1`, `vrnic\-rping \-c \-a 192.0.2.1`, "rping (1)", "vrnicd (8)", DefaultSocket)
}
