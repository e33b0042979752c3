// Package docgentest checks a tool's generated man page and completions
// against the options its parser accepts.
package docgentest

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/vrnic/vrnicd/cmd/internal/docgen"
)

// Option is one option the tool's parser accepts; Command is "" for a
// tool-wide one.
type Option struct {
	Command string
	Short   byte
	Long    string
}

// Check renders p's man page and its bash, zsh and fish completions and
// fails t unless every accepted option is in each, documented (not
// "(undocumented)"), and every command is offered. Each completion must
// parse in its shell and the page pass groff's warnings (when they are
// installed).
func Check(t *testing.T, p *docgen.Page, accepted []Option) {
	t.Helper()
	var man bytes.Buffer
	if err := p.Man(&man); err != nil {
		t.Fatal(err)
	}
	comp := map[string]string{}
	for _, sh := range []string{"bash", "zsh", "fish"} {
		var b bytes.Buffer
		if err := p.Completion(sh, &b); err != nil {
			t.Fatal(err)
		}
		comp[sh] = b.String()
	}
	m := man.String()
	if strings.Contains(m, "(undocumented)") {
		t.Errorf("%s(%d) has undocumented options:\n%s", p.Name, p.Section, m)
	}
	esc := func(s string) string { return strings.ReplaceAll(s, "-", `\-`) }
	cmds := map[string]bool{}
	for _, c := range p.Commands {
		cmds[c.Name] = true
	}
	for _, o := range accepted {
		var spell []string
		if o.Short != 0 {
			spell = append(spell, "-"+string(o.Short))
		}
		if o.Long != "" {
			spell = append(spell, "--"+o.Long)
		}
		for _, s := range spell {
			if !strings.Contains(m, `\fB`+esc(s)+`\fR`) {
				t.Errorf("%s(%d) does not document %s %s", p.Name, p.Section, o.Command, s)
			}
			if !strings.Contains(comp["bash"], s) || !strings.Contains(comp["zsh"], s) {
				t.Errorf("the bash or zsh completion of %s lacks %s %s", p.Name, o.Command, s)
			}
		}
		fish := ""
		if o.Long != "" {
			fish = " -l " + o.Long
		} else {
			fish = " -s " + string(o.Short)
		}
		if !strings.Contains(comp["fish"], fish) {
			t.Errorf("the fish completion of %s lacks %s%s", p.Name, o.Command, fish)
		}
		if o.Command != "" {
			if !cmds[o.Command] || !strings.Contains(comp["bash"], o.Command+")") || !strings.Contains(comp["fish"], "-a "+o.Command) {
				t.Errorf("command %s missing from %s's page or completions", o.Command, p.Name)
			}
		}
	}
	// Each shell parses its completion without running it (bash -n, zsh
	// -n, fish --no-execute), when the shell is installed.
	for _, sh := range []struct{ name, flag string }{{"bash", "-n"}, {"zsh", "-n"}, {"fish", "--no-execute"}} {
		bin, err := exec.LookPath(sh.name)
		if err != nil {
			continue
		}
		cmd := exec.Command(bin, sh.flag)
		cmd.Stdin = strings.NewReader(comp[sh.name])
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s %s on the completion: %v %s", sh.name, sh.flag, err, out)
		}
	}
	if groff, err := exec.LookPath("groff"); err == nil {
		cmd := exec.Command(groff, "-man", "-Tutf8", "-ww", "-z")
		cmd.Stdin = strings.NewReader(m)
		if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("groff on %s(%d): %v %s", p.Name, p.Section, err, out)
		}
	}
}
