package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/verbsock/server/servertest"
)

// daemon is a vrnicd device served on a Unix socket.
type daemon = servertest.Daemon

func twoDaemons(t *testing.T) [2]daemon { return servertest.TwoDaemons(t, 1500) }

type result struct {
	stdout, stderr string
	err            error
}

// runPair runs "vrnic-perf TEST args" as the server on daemon 0 and as the
// client on daemon 1, in-process, the OOB exchange over 127.0.0.1.
func runPair(t *testing.T, ds [2]daemon, test string, args ...string) (srv, cli result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	listening := make(chan net.Addr, 1)
	onListen = func(a net.Addr) { listening <- a }
	defer func() { onListen = nil }()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var o, e bytes.Buffer
		err := run(ctx, append([]string{test, "--socket", ds[0].Socket, "-p", "0"}, args...), &o, &e)
		srv = result{o.String(), e.String(), err}
		if err != nil {
			cancel()
		}
	}()
	select {
	case a := <-listening:
		var o, e bytes.Buffer
		port := fmt.Sprint(a.(*net.TCPAddr).Port)
		err := run(ctx, append(append([]string{test, "--socket", ds[1].Socket, "-p", port}, args...), "127.0.0.1"), &o, &e)
		cli = result{o.String(), e.String(), err}
		if err != nil {
			cancel()
		}
	case <-ctx.Done():
	}
	wg.Wait()
	return srv, cli
}
