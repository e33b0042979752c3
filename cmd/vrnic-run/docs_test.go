package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/vrnic/vrnicd/cmd/internal/docgen/docgentest"
)

// Every option of vrnic-run's table is in vrnic-run(1) and the
// completions, and the page names the variables and the examples.
func TestManAndCompletion(t *testing.T) {
	var accepted []docgentest.Option
	for _, o := range options {
		accepted = append(accepted, docgentest.Option{Short: o.Short, Long: o.Long})
	}
	p := docPage()
	docgentest.Check(t, p, accepted)
	var man bytes.Buffer
	if err := p.Man(&man); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"VRNICD_SOCKET", "VRNIC_LIBDIR", "VRNIC_POLL_YIELD", "LD_LIBRARY_PATH", ".SH EXAMPLES", ".SH LIMITATIONS",
		`vrnic\-run ibv_devinfo`, `ibv_rc_pingpong`, `vrnic\-run \-\-socket /run/vrnicd/vrnicd.sock ib_write_bw \-x 1`, "setuid", "fork"} {
		if !strings.Contains(man.String(), s) {
			t.Errorf("vrnic-run(1) lacks %q", s)
		}
	}
}
