// Package docgen writes the tools' man pages and shell completions from the
// same option definitions their parsers use (a flag.FlagSet, getopt's option
// table, vrnicctl's commands) and the help texts they print, so the pages
// cannot drift from the tools: every tool has hidden --generate-man and
// --generate-completion bash|zsh|fish options, and make install runs them.
package docgen

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/vrnic/vrnicd/cmd/internal/version"
)

// Flag is one option.
type Flag struct {
	Short byte   // 0: none
	Long  string // "" : none
	Arg   string // the argument's name; "" for a switch
	// OptArg: the argument may be left out (vrnicctl stat --watch).
	OptArg bool
	Help   string
	// NoComplete: the page documents the option, the completions do not
	// offer it (one the parser knows only to refuse it).
	NoComplete bool
}

// Command is one subcommand (vrnicctl's), or with Page.CommandFirst the
// word the tool's options follow (vrnic-perf's test).
type Command struct {
	Name, Args, Summary string
	Flags               []Flag
	// Omit names ("-q" or "--qp") the page's flags this command does not
	// take: the completions do not offer them after it.
	Omit []string
}

// Env is an environment variable a tool reads.
type Env struct{ Name, Help string }

// Page is one tool's documentation.
type Page struct {
	Name        string
	Section     int
	Summary     string   // NAME line
	Synopsis    []string // one usage line each, without the name
	Description []string // paragraphs
	Flags       []Flag
	Commands    []Command
	// CommandFirst: the command must be the first word and the page's
	// flags come after it (vrnic-perf TEST [options]), not before.
	CommandFirst bool
	// CommandName is what a command is called in the completions and the
	// man page's section (TESTS for "test"); "command" if empty.
	CommandName string
	Env         []Env
	Extra       []Section // more sections (SIGNALS, FILES, ...)
	SeeAlso     []string  // "vrnicctl(1)"
}

// Section is a titled section of paragraphs.
type Section struct {
	Title      string
	Paragraphs []string
}

// Handle runs a tool's hidden generators: args is the command line
// without the program name. It reports whether args asked for one, and
// the exit status.
func Handle(args []string, page func() *Page, stdout, stderr io.Writer) (bool, int) {
	if version.Handle(args, page().Name, stdout) {
		return true, 0
	}
	switch {
	case len(args) == 1 && args[0] == "--generate-man":
		if err := page().Man(stdout); err != nil {
			fmt.Fprintln(stderr, err)
			return true, 1
		}
		return true, 0
	case len(args) >= 1 && (args[0] == "--generate-completion" || strings.HasPrefix(args[0], "--generate-completion=")):
		shell, ok := strings.CutPrefix(args[0], "--generate-completion=")
		if !ok && len(args) == 2 {
			shell, ok = args[1], true
		}
		if !ok || (len(args) != 1 && len(args) != 2) {
			fmt.Fprintln(stderr, "--generate-completion: want bash, zsh or fish")
			return true, 2
		}
		if err := page().Completion(shell, stdout); err != nil {
			fmt.Fprintln(stderr, err)
			return true, 2
		}
		return true, 0
	}
	return false, 0
}

// FromHelp finds the option spelled --long (or -short) in a tool's --help
// text, laid out as "  -s, --long ARG   text" with continuation lines
// indented further, and returns its argument's name and its text. An
// option with several entries (vrnicd's --iface tap:NAME and --iface
// IFACE) gets them all: "tap:NAME|IFACE", "tap:NAME: text IFACE: text".
func FromHelp(help string, short byte, long string) (arg, text string) {
	lines := strings.Split(help, "\n")
	var args, texts []string
	for i := 0; i < len(lines); i++ {
		spec, desc, indent, ok := optionLine(lines[i])
		if !ok {
			continue
		}
		a, match := specNames(spec, short, long)
		if !match {
			continue
		}
		parts := []string{desc}
		for i+1 < len(lines) {
			next := lines[i+1]
			t := strings.TrimSpace(next)
			if t == "" || strings.HasPrefix(t, "-") || len(next)-len(strings.TrimLeft(next, " ")) <= indent {
				break
			}
			parts = append(parts, t)
			i++
		}
		args = append(args, a)
		texts = append(texts, strings.Join(strings.Fields(strings.Join(parts, " ")), " "))
	}
	switch len(texts) {
	case 0:
		return "", ""
	case 1:
		return args[0], texts[0]
	}
	for i := range texts {
		if args[i] != "" {
			texts[i] = args[i] + ": " + texts[i]
		}
	}
	return strings.Join(dedup(args), "|"), strings.Join(texts, " ")
}

// optionLine splits "  --socket PATH        text" into the option spec
// and its text: at the first run of two spaces, or, when the spec fills
// the column ("--socket-group GROUP group of ..."), after the names and
// the one argument that follows them.
func optionLine(line string) (spec, desc string, indent int, ok bool) {
	t := strings.TrimLeft(line, " ")
	indent = len(line) - len(t)
	if indent == 0 || !strings.HasPrefix(t, "-") {
		return "", "", 0, false
	}
	if i := strings.Index(t, "  "); i >= 0 {
		return t[:i], strings.TrimSpace(t[i:]), indent, true
	}
	f := strings.Fields(t)
	n := 0
	for n < len(f) && strings.HasPrefix(f[n], "-") {
		n++
	}
	switch last := f[n-1]; {
	case strings.Contains(last, "=<") && !strings.Contains(last, ">"): // --gid-idx=<gid index>
		for n < len(f) && !strings.Contains(f[n], ">") {
			n++
		}
		n = min(n+1, len(f))
	case n < len(f) && !strings.Contains(last, "=") && isArgName(f[n]):
		n++
	}
	return strings.Join(f[:n], " "), strings.Join(f[n:], " "), indent, true
}

// isArgName: PATH, tap:NAME, ADDR/LEN, <port>: an upper-case letter or
// angle brackets.
func isArgName(s string) bool {
	return strings.HasPrefix(s, "<") || strings.ToLower(s) != s
}

// specNames reads "-p, --port=<port>" or "--iface tap:NAME": whether it
// names the option, and the argument's name.
func specNames(spec string, short byte, long string) (string, bool) {
	match := false
	arg := ""
	spec = regroup(spec)
	for _, f := range strings.FieldsFunc(spec, func(r rune) bool { return r == ',' || r == ' ' }) {
		name, val, hasVal := strings.Cut(f, "=")
		switch {
		case long != "" && name == "--"+long, short != 0 && name == "-"+string(short):
			match = true
			if hasVal {
				arg = val
			}
		case !strings.HasPrefix(f, "-") && match && arg == "":
			arg = f
		}
	}
	return arg, match
}

// regroup joins the words of an argument name in angle brackets
// ("<gid index>" becomes "<gid_index>"), so it stays one field.
func regroup(spec string) string {
	b := []byte(spec)
	in := false
	for i, c := range b {
		switch {
		case c == '<':
			in = true
		case c == '>':
			in = false
		case c == ' ' && in:
			b[i] = '_'
		}
	}
	return string(b)
}

// flagNames is every spelling of f, for completions: "-p", "--port".
func flagNames(f Flag) []string {
	var n []string
	if f.Short != 0 {
		n = append(n, "-"+string(f.Short))
	}
	if f.Long != "" {
		n = append(n, "--"+f.Long)
	}
	return n
}

// commandName is what the page calls its commands.
func (p *Page) commandName() string {
	if p.CommandName == "" {
		return "command"
	}
	return p.CommandName
}

// commandFlags are the page's flags command c takes (CommandFirst).
func (p *Page) commandFlags(c Command) []Flag {
	omit := map[string]bool{}
	for _, o := range c.Omit {
		omit[o] = true
	}
	var out []Flag
	for _, f := range p.Flags {
		if !slices.ContainsFunc(flagNames(f), func(n string) bool { return omit[n] }) {
			out = append(out, f)
		}
	}
	return out
}

// SortFlags orders flags by long name (short for those without).
func SortFlags(fs []Flag) {
	key := func(f Flag) string {
		if f.Long != "" {
			return strings.ToLower(f.Long)
		}
		return string(f.Short)
	}
	slices.SortStableFunc(fs, func(a, b Flag) int { return strings.Compare(key(a), key(b)) })
}
