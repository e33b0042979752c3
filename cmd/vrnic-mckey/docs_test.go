package main

import (
	"testing"

	"github.com/vrnic/vrnicd/cmd/internal/docgen/docgentest"
)

// Every option of vrnic-mckey's getopt table is in vrnic-mckey(1) and
// the completions, documented once, with an argument exactly when it
// takes one; the page documents nothing the table lacks and has its
// examples.
func TestManAndCompletion(t *testing.T) {
	docgentest.CheckGetopt(t, options, optionDocs, docPage(), ".SH EXAMPLES", `vrnic\-mckey \-m 239.1.1.1 \-b 192.0.2.1`,
		`vrnic\-mckey \-m 239.1.1.1 \-b 192.0.2.2 \-s`, "mckey (1)", "vrnicd (8)", "VRNICD_SOCKET")
}

// What the page calls refused is refused by the parser, and what it
// calls accepted is accepted.
func TestRefusedAreRefused(t *testing.T) {
	for _, args := range [][]string{{"-p", "0x2"}, {"-p", "0x106"}} {
		if _, err := parseArgs(args); err == nil {
			t.Errorf("%q: accepted, documented as refused", args)
		}
	}
	for _, args := range [][]string{{"-p", "0x111"}, {"-m", "239.1.1.1"}, {"-M", "ff0e::1"}, {"-s"}, {"-o"}, {"-l"}, {"-c", "2"}} {
		if _, err := parseArgs(args); err != nil {
			t.Errorf("%q: %v", args, err)
		}
	}
}
