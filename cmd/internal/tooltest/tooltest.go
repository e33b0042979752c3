// Package tooltest runs a tool of cmd/ (vrnic-pingpong, vrnic-perf) as a
// server and a client in the test's own process, their TCP exchange over
// 127.0.0.1.
package tooltest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Result is one run of a tool.
type Result struct {
	Stdout, Stderr string
	Err            error
}

// Tool is what RunPair runs.
type Tool struct {
	// Run is the tool's whole program, as main calls it.
	Run func(ctx context.Context, args []string, stdout, stderr io.Writer) error
	// OnListen is the tool's hook that is told the server's address.
	OnListen *func(net.Addr)
	// StopOnClientError ends the server's run when the client's fails:
	// a server that would wait long for a client that is gone. Without
	// it a test can see how the server gives up on its own.
	StopOnClientError bool
}

// RunPair runs the server with srvArgs and, once it listens, the client
// with cliArgs(port) and "127.0.0.1" appended. A failing server ends the
// client's run too (their context ends), as does the timeout.
func (tl Tool) RunPair(timeout time.Duration, srvArgs []string, cliArgs func(port string) []string) (srv, cli Result) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	listening := make(chan net.Addr, 1)
	*tl.OnListen = func(a net.Addr) { listening <- a }
	defer func() { *tl.OnListen = nil }()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var o, e bytes.Buffer
		err := tl.Run(ctx, srvArgs, &o, &e)
		srv = Result{o.String(), e.String(), err}
		if err != nil {
			cancel()
		}
	}()
	select {
	case a := <-listening:
		var o, e bytes.Buffer
		port := fmt.Sprint(a.(*net.TCPAddr).Port)
		err := tl.Run(ctx, append(cliArgs(port), "127.0.0.1"), &o, &e)
		cli = Result{o.String(), e.String(), err}
		if err != nil && tl.StopOnClientError {
			cancel()
		}
	case <-ctx.Done():
	}
	wg.Wait()
	return srv, cli
}
