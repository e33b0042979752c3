package main

import (
	"strings"
	"sync"
	"testing"

	"github.com/vrnic/vrnicd/cmd/internal/tooltest"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// vrnicd is a device perftest knows: the latency tests send inline by
// default (perftest's 220 bytes for WRITE, 236 for SEND on RC), the
// bandwidth tests only with -I; a message sends inline when it fits, and
// nothing says the device has no inline feature.
func TestInline(t *testing.T) {
	ds := twoDaemons(t)
	var mu sync.Mutex
	var posted, inline int
	onPost = func(wr verbs.SendWR) {
		mu.Lock()
		defer mu.Unlock()
		posted++
		if wr.Flags&verbs.SendInline != 0 {
			inline++
		}
	}
	defer func() { onPost = nil }()
	for _, tc := range []struct {
		test, args string
		max        string // the Max inline data line's value
		inline     bool   // every WR inline, or none
	}{
		{"send_lat", "-s 64 -n 20", "236", true},
		{"write_lat", "-s 64 -n 20", "220", true},
		{"write_lat", "-s 220 -n 20", "220", true},
		{"send_lat", "-s 512 -n 20", "236", false},
		{"write_lat", "-s 64 -n 20 -I 0", "0", false},
		{"send_lat", "-s 300 -n 20 -I 512", "512", true},
		{"write_bw", "-s 64 -n 100", "0", false},
		{"send_bw", "-s 64 -n 100 -I 64", "64", true},
		{"write_bw", "-s 65 -n 100 -I 64", "64", false},
		{"read_lat", "-s 64 -n 20", "", false},
	} {
		t.Run(tc.test+" "+tc.args, func(t *testing.T) {
			mu.Lock()
			posted, inline = 0, 0
			mu.Unlock()
			srv, cli := runPair(t, ds, tc.test, append([]string{"-x", "1", "--quiet"}, strings.Fields(tc.args)...)...)
			for who, r := range map[string]result{"server": srv, "client": cli} {
				if r.Err != nil {
					t.Fatalf("%s: %v\n%s%s", who, r.Err, r.Stdout, r.Stderr)
				}
				if strings.Contains(r.Stderr, "inline") {
					t.Errorf("%s: says the device has no inline feature:\n%s%s", who, r.Stdout, r.Stderr)
				}
				if want := " Max inline data : " + tc.max + "[B]\n"; tc.max != "" && !strings.Contains(r.Stdout, want) {
					t.Errorf("%s: no %q:\n%s", who, want, r.Stdout)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			want := 0
			if tc.inline {
				want = posted
			}
			if posted == 0 || inline != want {
				t.Errorf("%d of %d WRs posted inline, want %d", inline, posted, want)
			}
		})
	}
}

// An -I above the device's max_inline_data (vrnicd's 512) passes the
// option's range check (perftest's MAX_INLINE, 912) and fails as perftest
// fails on any device: ibv_create_qp refuses the QP.
func TestInlineAboveDevice(t *testing.T) {
	ds := twoDaemons(t)
	// Each fails on its own: the server's failure must not cut the
	// client's run short before it reaches ibv_create_qp.
	tool := tooltest.Tool{Run: run, OnListen: &onListen, StopOnClientError: true, ClientOutlivesServer: true}
	srv, cli := runTool(tool, ds, "send_lat", "-x", "1", "--quiet", "-s", "64", "-n", "20", "-I", "513")
	for who, r := range map[string]result{"server": srv, "client": cli} {
		want := "Unable to create QP.\nFailed to create QP.\n Couldn't create IB resources\n"
		if r.Err == nil || !strings.Contains(r.Stderr, want) || !strings.Contains(r.Stderr, "512 inline") {
			t.Errorf("%s: %v, stderr %q; want %q and the daemon's limit", who, r.Err, r.Stderr, want)
		}
		t.Logf("%s's stderr:\n%s", who, r.Stderr)
	}
	if _, err := parseArgs(strings.Fields("send_lat -I 913")); err == nil || !strings.Contains(err.Error(), " Max inline should be between 0 and 912") {
		t.Errorf("-I 913: %v", err)
	}
}
