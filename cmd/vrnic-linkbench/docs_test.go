package main

import (
	"bytes"
	"flag"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/vrnic/vrnicd/cmd/internal/docgen/docgentest"
)

// Every flag of every command (what the command's flag set prints for
// -h) is in vrnic-linkbench(1) under that command and in the
// completions; each command of the page is one dispatch runs; the page
// has its examples.
func TestManAndCompletion(t *testing.T) {
	p := docPage()
	flagLine := regexp.MustCompile(`(?m)^  -([A-Za-z0-9-]+)`)
	var accepted []docgentest.Option
	for _, c := range p.Commands {
		var help bytes.Buffer
		if err := dispatch([]string{c.Name, "-h"}, io.Discard, &help); err != flag.ErrHelp {
			t.Errorf("%s -h: %v, want flag.ErrHelp", c.Name, err)
		}
		var names []string
		for _, m := range flagLine.FindAllStringSubmatch(help.String(), -1) {
			names = append(names, m[1])
			o := docgentest.Option{Command: c.Name, Long: m[1]}
			if len(m[1]) == 1 {
				o.Short, o.Long = m[1][0], ""
			}
			accepted = append(accepted, o)
		}
		if len(c.Flags) != len(names) {
			t.Errorf("%s: %d flags documented, its flag set has %d", c.Name, len(c.Flags), len(names))
		}
		// A few each command must have, so that reading -h cannot
		// silently find nothing.
		want := map[string][]string{"bw": {"tx", "rx", "D", "b", "q", "rx-mode", "spin", "op", "p", "n", "ipv6"},
			"lat": {"a", "b", "iters", "ring", "timeout", "spin", "op", "p", "n", "ipv6"}, "size": {"op", "p", "ipv6"}}[c.Name]
		for _, w := range want {
			if !slices.Contains(names, w) {
				t.Errorf("%s -h lacks -%s", c.Name, w)
			}
		}
		for _, f := range c.Flags {
			if f.Help == "" || (len(f.Long) != 1 && f.Long != "" && f.Short != 0) {
				t.Errorf("%s: flag %+v", c.Name, f)
			}
		}
	}
	if len(p.Commands) != 3 {
		t.Errorf("%d commands documented", len(p.Commands))
	}
	if err := dispatch([]string{"nosuch"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "want bw, lat or size") {
		t.Errorf("unknown command: %v", err)
	}
	docgentest.Check(t, p, accepted)
	var man bytes.Buffer
	if err := p.Man(&man); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{".SH EXAMPLES", `vrnic\-linkbench bw \-\-tx A:veth0 \-\-rx B:veth1`, `vrnic\-linkbench lat`, `\fB\-\-rx\-mode\fR \fIring|recvmmsg\fR`,
		`\fB\-D\fR \fISECONDS\fR`, "vrnicd (8)", "vrnic\\-perf (1)"} {
		if !strings.Contains(man.String(), s) {
			t.Errorf("vrnic-linkbench(1) lacks %q", s)
		}
	}
}
