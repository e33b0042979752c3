package main

import (
	"testing"

	"github.com/vrnic/vrnicd/cmd/internal/docgen/docgentest"
)

// Every option of vrnic-cmtime's getopt table is in vrnic-cmtime(1)
// and the completions, documented once, with an argument exactly when it
// takes one; the page documents nothing the table lacks and has its
// examples.
func TestManAndCompletion(t *testing.T) {
	docgentest.CheckGetopt(t, options, optionDocs, docPage(), ".SH EXAMPLES", `vrnic\-cmtime \-b 192.0.2.1`, `vrnic\-cmtime \-s 192.0.2.1 \-c 200`, "cmtime (1)", "vrnicd (8)", "VRNICD_SOCKET")
}

// -t is accepted and unused, as the page says; -b is not for the client.
func TestAcceptedAsDocumented(t *testing.T) {
	if _, err := parseArgs([]string{"-s", "192.0.2.1", "-t", "500"}); err != nil {
		t.Errorf("-t 500: %v", err)
	}
	if _, err := parseArgs([]string{"-s", "192.0.2.1", "-b", "192.0.2.2"}); err == nil {
		t.Error("-s with -b: accepted")
	}
}
