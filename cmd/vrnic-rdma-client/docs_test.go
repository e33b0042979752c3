package main

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/vrnic/vrnicd/cmd/internal/cmtool"
	"github.com/vrnic/vrnicd/cmd/internal/docgen/docgentest"
)

// Every option vrnic-rdma-client(1) documents is in the completions and
// accepted by the parser (cmtool.ExampleArgs, whose table is its own),
// options it does not document are refused, and the page has its
// examples.
func TestManAndCompletion(t *testing.T) {
	var accepted []docgentest.Option
	for _, f := range optionDocs {
		accepted = append(accepted, docgentest.Option{Short: f.Short, Long: f.Long})
		name := "--" + f.Long
		if f.Short != 0 {
			name = "-" + string(f.Short)
		}
		val := map[byte]string{'s': "192.0.2.1", 'p': "7000", 0: "/run/vrnicd/test.sock"}[f.Short]
		if _, _, err := cmtool.ExampleArgs("vrnic-rdma-client", defaultAddr, []string{name, val}, io.Discard, io.Discard); err != nil {
			t.Errorf("%s %s: %v", name, val, err)
		}
	}
	for _, args := range [][]string{{"-b", "192.0.2.1"}, {"-h"}, {"--help"}, {"operand"}} {
		if _, _, err := cmtool.ExampleArgs("vrnic-rdma-client", defaultAddr, args, io.Discard, io.Discard); err == nil {
			t.Errorf("%q: accepted, not documented", args)
		}
	}
	p := docPage()
	docgentest.Check(t, p, accepted)
	var man bytes.Buffer
	if err := p.Man(&man); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{".SH EXAMPLES", `vrnic\-rdma\-server \-s 192.0.2.1`, `vrnic\-rdma\-client \-s 192.0.2.1`, `rdma_client (1)`, "vrnicd (8)", "VRNICD_SOCKET"} {
		if !strings.Contains(man.String(), s) {
			t.Errorf("vrnic-rdma-client(1) lacks %q", s)
		}
	}
}
