package main

import (
	"io"
	"testing"

	"github.com/vrnic/vrnicd/cmd/internal/cmtool"
	"github.com/vrnic/vrnicd/cmd/internal/docgen/docgentest"
)

// Every option vrnic-rdma-client(1) documents is in the completions and
// accepted by the parser (cmtool.ExampleArgs, whose table is its own),
// options it does not document are refused, and the page has its
// examples.
func TestManAndCompletion(t *testing.T) {
	parse := func(args []string) error {
		_, _, err := cmtool.ExampleArgs("vrnic-rdma-client", defaultAddr, args, io.Discard, io.Discard)
		return err
	}
	docgentest.CheckParsed(t, optionDocs, parse, map[byte]string{'s': "192.0.2.1", 'p': "7000", 0: "/run/vrnicd/test.sock"},
		[][]string{{"-b", "192.0.2.1"}, {"-h"}, {"--help"}, {"operand"}}, docPage(), ".SH EXAMPLES", `vrnic\-rdma\-server \-s 192.0.2.1`, `vrnic\-rdma\-client \-s 192.0.2.1`, `rdma_client (1)`, "vrnicd (8)", "VRNICD_SOCKET")
}
