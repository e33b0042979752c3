package main

import (
	"testing"

	"github.com/vrnic/vrnicd/cmd/internal/docgen/docgentest"
)

// Every option of vrnic-udaddy's getopt table is in vrnic-udaddy(1)
// and the completions, documented once, with an argument exactly when it
// takes one; the page documents nothing the table lacks and has its
// examples.
func TestManAndCompletion(t *testing.T) {
	docgentest.CheckGetopt(t, options, optionDocs, docPage(), ".SH EXAMPLES", `vrnic\-udaddy \-b 192.0.2.1`, `vrnic\-udaddy \-s 192.0.2.1`, "udaddy (1)", "vrnicd (8)", "VRNICD_SOCKET")
}

// What the page calls refused is refused by the parser, and what it
// calls accepted is accepted.
func TestRefusedAreRefused(t *testing.T) {
	for _, args := range [][]string{{"-t", "1"}, {"-P", "ipoib"}, {"-f", "gid"}, {"-p", "0x106"}} {
		if _, err := parseArgs(args); err == nil {
			t.Errorf("%q: accepted, documented as refused", args)
		}
	}
	for _, args := range [][]string{{"-P", "udp"}, {"-p", "0x111"}, {"-f", "ip"}, {"-f", "ipv6"}, {"-f", "name"}, {"--port", "7000"}} {
		if _, err := parseArgs(args); err != nil {
			t.Errorf("%q: %v", args, err)
		}
	}
}
