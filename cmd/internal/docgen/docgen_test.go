package docgen

import "testing"

func TestFromHelp(t *testing.T) {
	const help = `Usage: x [options]

Attach modes:
  --iface tap:NAME     create TAP device NAME;
                       needs CAP_NET_ADMIN.
  --iface IFACE        raw mode.
Options:
  --socket-group GROUP group of the socket (default: the
                       daemon's own group)
  -p, --port=<port>       listen on <port>
  -g, --gid-idx=<gid index> local port gid index
  --help               print this help
  -V, --version           the version
`
	for _, tt := range []struct {
		short           byte
		long, arg, text string
	}{
		{0, "iface", "tap:NAME|IFACE", "tap:NAME: create TAP device NAME; needs CAP_NET_ADMIN. IFACE: raw mode."},
		{0, "socket-group", "GROUP", "group of the socket (default: the daemon's own group)"},
		{'p', "port", "<port>", "listen on <port>"},
		{'g', "gid-idx", "<gid_index>", "local port gid index"},
		{0, "help", "", "print this help"},
		{'V', "", "", "the version"},
		{0, "absent", "", ""},
	} {
		arg, text := FromHelp(help, tt.short, tt.long)
		if arg != tt.arg || text != tt.text {
			t.Errorf("%c %s: arg %q text %q; want %q %q", tt.short, tt.long, arg, text, tt.arg, tt.text)
		}
	}
}

func TestRoffEscapes(t *testing.T) {
	if got := roff(".start\n'quote -x \\n"); got != "\\&.start\n\\&'quote \\-x \\en" {
		t.Errorf("roff: %q", got)
	}
}
