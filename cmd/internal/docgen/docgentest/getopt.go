package docgentest

import (
	"bytes"
	"strings"
	"testing"

	"github.com/vrnic/vrnicd/cmd/internal/docgen"
	"github.com/vrnic/vrnicd/cmd/internal/oob/getopt"
)

// CheckGetopt holds a getopt tool's flag documentation to its option
// table, one to one (each option documented once, with an argument exactly
// when it takes one, nothing documented that the table lacks), then runs
// Check on p and fails t unless the man page holds every string of want
// (its EXAMPLES, say).
func CheckGetopt(t *testing.T, table []getopt.Option, docs []docgen.Flag, p *docgen.Page, want ...string) {
	t.Helper()
	var accepted []Option
	for _, o := range table {
		accepted = append(accepted, Option{Short: o.Short, Long: o.Long})
		n := 0
		for _, f := range docs {
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
	if len(docs) != len(table) {
		t.Errorf("%d options documented, the table has %d", len(docs), len(table))
	}
	Check(t, p, accepted)
	ManHas(t, p, want...)
}

// ManHas fails t unless p's man page holds every string of want.
func ManHas(t *testing.T, p *docgen.Page, want ...string) {
	t.Helper()
	var man bytes.Buffer
	if err := p.Man(&man); err != nil {
		t.Fatal(err)
	}
	for _, s := range want {
		if !strings.Contains(man.String(), s) {
			t.Errorf("%s(%d) lacks %q", p.Name, p.Section, s)
		}
	}
}

// CheckParsed is CheckGetopt for a tool whose option table is not in
// reach (its parser's own): every option of docs, given values[short] (or
// values[0] for a long-only one) when it takes an argument, must parse,
// and every command line of refused must not; then Check and ManHas.
func CheckParsed(t *testing.T, docs []docgen.Flag, parse func(args []string) error, values map[byte]string,
	refused [][]string, p *docgen.Page, want ...string) {
	t.Helper()
	var accepted []Option
	for _, f := range docs {
		accepted = append(accepted, Option{Short: f.Short, Long: f.Long})
		args := []string{"--" + f.Long}
		if f.Short != 0 {
			args = []string{"-" + string(f.Short)}
		}
		if f.Arg != "" {
			args = append(args, values[f.Short])
		}
		if err := parse(args); err != nil {
			t.Errorf("%q: %v", args, err)
		}
	}
	for _, args := range refused {
		if parse(args) == nil {
			t.Errorf("%q: accepted, not documented", args)
		}
	}
	Check(t, p, accepted)
	ManHas(t, p, want...)
}
