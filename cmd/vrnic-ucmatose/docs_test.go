package main

import (
	"strings"
	"testing"

	"github.com/vrnic/vrnicd/cmd/internal/docgen/docgentest"
)

// Every option of vrnic-ucmatose's getopt table is in vrnic-ucmatose(1)
// and the completions, documented once, with an argument exactly when it
// takes one; the page documents nothing the table lacks and has its
// examples.
func TestManAndCompletion(t *testing.T) {
	docgentest.CheckGetopt(t, options, optionDocs, docPage(), ".SH EXAMPLES", `vrnic\-ucmatose \-b 192.0.2.1`, `vrnic\-ucmatose \-s 192.0.2.1`, "ucmatose (1)", "vrnicd (8)", "VRNICD_SOCKET")
}

// The options the page calls refused are refused by the parser, and the
// values it calls accepted are accepted.
func TestRefusedAreRefused(t *testing.T) {
	for _, args := range [][]string{{"-f", "ip"}, {"-f", "ipv6"}, {"-f", "name"}, {"-P", "tcp"}} {
		if _, err := parseArgs(args); err != nil {
			t.Errorf("%q: %v", args, err)
		}
	}
	for _, args := range [][]string{{"-f", "gid"}, {"-P", "ib"}} {
		if _, err := parseArgs(args); err == nil {
			t.Errorf("%q: accepted, documented as refused", args)
		}
	}
	for _, f := range optionDocs {
		if !strings.HasSuffix(f.Help, refused) {
			continue
		}
		args := []string{"-" + string(f.Short)}
		if f.Arg != "" {
			args = append(args, "1")
		}
		if _, err := parseArgs(args); err == nil {
			t.Errorf("%q: accepted, documented as refused", args)
		}
	}
}
