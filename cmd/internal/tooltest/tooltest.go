// Package tooltest runs a tool of cmd/ as a server and a client in the
// test's own process: vrnic-pingpong and vrnic-perf with their TCP
// exchange over 127.0.0.1 (Tool), the rdma_cm tools between two
// servertest daemons (CMTool).
package tooltest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

// Result is one run of a tool.
type Result struct {
	Stdout, Stderr string
	Err            error
}

// RunFunc is a tool's whole program, as its main calls it.
type RunFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// capture runs run with args; combined sends stderr to Stdout too.
func capture(ctx context.Context, run RunFunc, args []string, combined bool) Result {
	var o, e bytes.Buffer
	stderr := io.Writer(&e)
	if combined {
		stderr = &o
	}
	err := run(ctx, args, &o, stderr)
	return Result{o.String(), e.String(), err}
}

// Tool is what RunPair runs.
type Tool struct {
	// Run is the tool's whole program, as main calls it.
	Run RunFunc
	// OnListen is the tool's hook that is told the server's address.
	OnListen *func(net.Addr)
	// StopOnClientError ends the server's run when the client's fails:
	// a server that would wait long for a client that is gone. Without
	// it a test can see how the server gives up on its own.
	StopOnClientError bool
	// ClientOutlivesServer runs the client to its own end when the
	// server fails: a test that wants both to fail on their own (as two
	// processes would, the client reading what the server sent before it
	// died).
	ClientOutlivesServer bool
}

// RunPair runs the server with srvArgs and, once it listens, the client
// with cliArgs(port) and "127.0.0.1" appended. A failing server ends the
// client's run too (their context ends) unless ClientOutlivesServer, as
// does the timeout.
func (tl Tool) RunPair(timeout time.Duration, srvArgs []string, cliArgs func(port string) []string) (srv, cli Result) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	hook := func(f func(net.Addr)) { *tl.OnListen = f }
	s, a, ok := start(ctx, hook, func(ctx context.Context) Result { return capture(ctx, tl.Run, srvArgs, false) })
	if ok {
		port := fmt.Sprint(a.(*net.TCPAddr).Port)
		cctx := s.ctx
		if tl.ClientOutlivesServer {
			cctx = ctx
		}
		cli = capture(cctx, tl.Run, append(cliArgs(port), "127.0.0.1"), false)
		if cli.Err != nil && tl.StopOnClientError {
			s.stop()
		}
	}
	return s.Wait(), cli
}

// Server is a server run in the background, from when it listens.
type Server struct {
	ctx    context.Context // ends when the server fails or is stopped
	stop   context.CancelFunc
	done   chan struct{} // closed when the server's run ends, in res
	res    Result
	unhook func() // nil once called
}

// start runs serve in the background, with hook set to be told when it
// listens, and waits for that (ok, with what hook was told) or for its
// end. A failing server ends s.ctx, so the clients run with it end too.
func start[A any](parent context.Context, hook func(func(A)), serve func(context.Context) Result) (s *Server, a A, ok bool) {
	ctx, stop := context.WithCancel(parent)
	listening := make(chan A, 1)
	// Set here and unset in Wait, not in serve's goroutine: clients in
	// the same process read the hook too.
	hook(func(a A) { listening <- a })
	s = &Server{ctx: ctx, stop: stop, done: make(chan struct{}), unhook: func() { hook(nil) }}
	go func() {
		defer close(s.done)
		if s.res = serve(ctx); s.res.Err != nil {
			stop()
		}
	}()
	select {
	case a = <-listening:
		return s, a, true
	case <-s.done:
		return s, a, false
	}
}

// Start runs serve in the background and returns once serve calls
// listening; a serve that ends before it fails the test.
func Start(t testing.TB, ctx context.Context, serve func(ctx context.Context, listening func()) Result) *Server {
	t.Helper()
	var listening func()
	s, _, ok := start(ctx, funcHook(&listening), func(ctx context.Context) Result { return serve(ctx, listening) })
	return s.started(t, ok)
}

// started fails the test if the server ended before it listened, and
// stops it when the test ends if the test has not; one that will not
// stop is left behind rather than hang the test.
func (s *Server) started(t testing.TB, ok bool) *Server {
	t.Helper()
	t.Cleanup(func() {
		s.stop()
		select {
		case <-s.done:
			s.Wait()
		case <-time.After(20 * time.Second):
		}
	})
	if !ok {
		r := s.Wait()
		t.Fatalf("server ended before listening: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
	}
	return s
}

// funcHook is start's hook for a hook of no argument.
func funcHook(p *func()) func(func(struct{})) {
	return func(f func(struct{})) {
		*p = nil
		if f != nil {
			*p = func() { f(struct{}{}) }
		}
	}
}

// Done is closed when the server's run ends (then Wait does not wait).
func (s *Server) Done() <-chan struct{} { return s.done }

// Wait waits for the server's end and gives its run.
func (s *Server) Wait() Result {
	<-s.done
	s.stop()
	if s.unhook != nil {
		s.unhook()
		s.unhook = nil
	}
	return s.res
}

// Stop ends the server's run (its context) and waits for it.
func (s *Server) Stop() Result {
	s.stop()
	return s.Wait()
}
