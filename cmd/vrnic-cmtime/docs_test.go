package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/vrnic/vrnicd/cmd/internal/docgen/docgentest"
)

// Every option of vrnic-cmtime's getopt table is in vrnic-cmtime(1)
// and the completions, documented once, with an argument exactly when it
// takes one; the page documents nothing the table lacks and has its
// examples.
func TestManAndCompletion(t *testing.T) {
	var accepted []docgentest.Option
	for _, o := range options {
		accepted = append(accepted, docgentest.Option{Short: o.Short, Long: o.Long})
		n := 0
		for _, f := range optionDocs {
			if f.Short == o.Short && f.Long == o.Long {
				n++
				if (f.Arg != "") != o.HasArg {
					t.Errorf("-%c/--%s: documented argument %q, HasArg %v", o.Short, o.Long, f.Arg, o.HasArg)
				}
			}
		}
		if n != 1 {
			t.Errorf("-%c/--%s is documented %d times", o.Short, o.Long, n)
		}
	}
	if len(optionDocs) != len(options) {
		t.Errorf("%d options documented, the table has %d", len(optionDocs), len(options))
	}
	p := docPage()
	docgentest.Check(t, p, accepted)
	var man bytes.Buffer
	if err := p.Man(&man); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{".SH EXAMPLES", `vrnic\-cmtime \-b 192.0.2.1`, `vrnic\-cmtime \-s 192.0.2.1 \-c 200`, "cmtime (1)", "vrnicd (8)", "VRNICD_SOCKET"} {
		if !strings.Contains(man.String(), s) {
			t.Errorf("vrnic-cmtime(1) lacks %q", s)
		}
	}
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
