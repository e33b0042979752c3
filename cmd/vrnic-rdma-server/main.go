// Command vrnic-rdma-server is the vrnicd counterpart of librdmacm's
// rdma_server (examples/rdma_server.c): it listens on -s (default
// 0.0.0.0) port -p (7471), takes one connection, receives a 16-byte
// message, answers with 16 bytes and disconnects, printing
// "rdma_server: start" and "rdma_server: end 0". Its peer can be the
// kernel's rdma_client or vrnic-rdma-client. It reaches the RDMA device
// through vrnicd's socket (--socket).
package main

import (
	"context"
	"fmt"
	"io"

	"github.com/vrnic/vrnicd/cmd/internal/cmtool"
	"github.com/vrnic/vrnicd/cmd/internal/tool"
)

func main() { tool.Docs(docPage); tool.Main(run) }

// defaultAddr is rdma_server's address without -s.
const defaultAddr = "0.0.0.0"

// onListen, if set, is told when the server listens (tests).
var onListen func()

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	addr, socket, err := cmtool.ExampleArgs("vrnic-rdma-server", defaultAddr, args, stdout, stderr)
	if err != nil {
		return err
	}
	if status := cmtool.ExampleServer(ctx, addr, socket, stdout, onListen); status != 0 {
		return fmt.Errorf("status %d", status)
	}
	return nil
}
