// Command vrnic-rdma-client is the vrnicd counterpart of librdmacm's
// rdma_client (examples/rdma_client.c): it connects to -s (default
// 127.0.0.1) port -p (7471), sends a 16-byte message, receives the 16-byte
// answer and disconnects, printing "rdma_client: start" and
// "rdma_client: end 0". Its peer can be the kernel's rdma_server or
// vrnic-rdma-server. It reaches the RDMA device through vrnicd's socket
// (--socket).
package main

import (
	"context"
	"fmt"
	"io"

	"github.com/vrnic/vrnicd/cmd/internal/cmtool"
	"github.com/vrnic/vrnicd/cmd/internal/tool"
)

func main() { tool.Docs(docPage); tool.Main(run) }

// defaultAddr is rdma_client's server address without -s.
const defaultAddr = "127.0.0.1"

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	addr, socket, err := cmtool.ExampleArgs("vrnic-rdma-client", defaultAddr, args, stdout, stderr)
	if err != nil {
		return err
	}
	if status := cmtool.ExampleClient(ctx, addr, socket, stdout); status != 0 {
		return fmt.Errorf("status %d", status)
	}
	return nil
}
