package main

import (
	"strings"
	"testing"
	"time"
)

func TestEventsAndProgress(t *testing.T) {
	ds := twoDaemons(t)
	for _, tc := range []struct{ test, args string }{
		{"send_bw", "-e -s 1024 -n 200"},
		{"read_bw", "-e -s 4096 -n 100"},
		{"send_lat", "-e -s 64 -n 50"},
		{"read_lat", "-e -n 50"},
		{"atomic_bw", "-e -A CMP_AND_SWAP -n 50"},
		{"send_bw", "-q 3 -s 512 -n 100"},
		{"read_bw", "-q 2 -o 2 -s 100000 -n 20"},
		{"send_lat", "-a -n 5"},
		{"write_lat", "-D 2 -s 8"},
	} {
		t.Run(tc.test+" "+tc.args, func(t *testing.T) {
			if raceEnabled && strings.Contains(tc.args, "-a") {
				t.Skip("8 MiB ping-pongs: 30 s under the race detector (runs without it)")
			}
			srv, cli := runPair(t, ds, tc.test, append([]string{"-x", "1", "--quiet"}, strings.Fields(tc.args)...)...)
			for who, r := range map[string]result{"server": srv, "client": cli} {
				if r.Err != nil {
					t.Fatalf("%s: %v\n%s%s", who, r.Err, r.Stdout, r.Stderr)
				}
			}
			if strings.Contains(tc.args, "-e") && !strings.Contains(cli.Stdout, " Test with events. Using vrnic1_comp0\n") {
				t.Errorf("no events line:\n%s", cli.Stdout)
			}
			if n := strings.Count(cli.Stdout, "\n"); n < 20 {
				t.Errorf("client output:\n%s", cli.Stdout)
			}
		})
	}
	// A long run prints progress on stderr (and nothing more on stdout).
	defer func(d time.Duration) { progressEvery = d }(progressEvery)
	progressEvery = 10 * time.Millisecond
	srv, cli := runPair(t, ds, "write_bw", "-x", "1", "-s", "4096", "-n", "3000")
	if srv.Err != nil || cli.Err != nil {
		t.Fatalf("%v %v", srv.Err, cli.Err)
	}
	if !strings.Contains(cli.Stderr, "vrnic-perf: ") || !strings.Contains(cli.Stderr, " of 3000 iterations (") || strings.Contains(cli.Stdout, "vrnic-perf:") {
		t.Errorf("progress: stderr %q", cli.Stderr)
	}
}
