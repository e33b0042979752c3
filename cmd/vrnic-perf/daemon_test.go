package main

import (
	"testing"
	"time"

	"github.com/vrnic/vrnicd/cmd/internal/tooltest"
	"github.com/vrnic/vrnicd/verbsock/server/servertest"
)

// daemon is a vrnicd device served on a Unix socket.
type daemon = servertest.Daemon

func twoDaemons(t *testing.T) [2]daemon { return servertest.TwoDaemons(t, 1500) }

type result = tooltest.Result

// runPair runs "vrnic-perf TEST args" as the server on daemon 0 and as the
// client on daemon 1, in-process, the OOB exchange over 127.0.0.1.
func runPair(t *testing.T, ds [2]daemon, test string, args ...string) (srv, cli result) {
	t.Helper()
	// A perftest server would wait hours for a client that failed.
	return runTool(tooltest.Tool{Run: run, OnListen: &onListen, StopOnClientError: true}, ds, test, args...)
}

// runTool is runPair with tool's choices.
func runTool(tool tooltest.Tool, ds [2]daemon, test string, args ...string) (srv, cli result) {
	return tool.RunPair(90*time.Second, append([]string{test, "--socket", ds[0].Socket, "-p", "0"}, args...),
		func(port string) []string {
			return append([]string{test, "--socket", ds[1].Socket, "-p", port}, args...)
		})
}
