package main

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/cmd/internal/oob"
	"github.com/vrnic/vrnicd/cmd/internal/oob/getopt"
)

// The expected lines are what rdma-core 44's tools printed on kernel rxe
// (cmd/internal/oob/testdata has whole runs), values and all.

func TestAddressLines(t *testing.T) {
	gid := func(s string) [16]byte { return netip.MustParseAddr(s).As16() }
	var b bytes.Buffer
	printLocal(&b, modes["rc"], oob.PingpongDest{QPN: 0x1e, PSN: 0x1e618a, GID: gid("::ffff:192.0.2.12")})
	printRemote(&b, oob.PingpongDest{QPN: 0x1e, PSN: 0x543d77, GID: gid("::ffff:192.0.2.11")})
	printLocal(&b, modes["ud"], oob.PingpongDest{QPN: 0x1f, PSN: 0x935c92, GID: gid("::ffff:192.0.2.12")})
	printLocal(&b, modes["srq"], oob.PingpongDest{QPN: 0x20, PSN: 0x5420d8, GID: gid("fe80::5054:ff:fe6a:a9f1")})
	printRemote(&b, oob.PingpongDest{LID: 0x12, QPN: 0xabcdef, PSN: 0x1})
	want := "  local address:  LID 0x0000, QPN 0x00001e, PSN 0x1e618a, GID ::ffff:192.0.2.12\n" +
		"  remote address: LID 0x0000, QPN 0x00001e, PSN 0x543d77, GID ::ffff:192.0.2.11\n" +
		"  local address:  LID 0x0000, QPN 0x00001f, PSN 0x935c92: GID ::ffff:192.0.2.12\n" +
		"  local address:  LID 0x0000, QPN 0x000020, PSN 0x5420d8, GID fe80::5054:ff:fe6a:a9f1\n" +
		"  remote address: LID 0x0012, QPN 0xabcdef, PSN 0x000001, GID ::\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestSummaryLines(t *testing.T) {
	for _, tc := range []struct {
		size, iters int
		usec        int64
		want        string
	}{
		// ibv_rc_pingpong -s 2500 -n 20, ibv_ud_pingpong -s 512 -n 20,
		// ibv_srq_pingpong -q 2 -n 20 (4096 B) on rxe.
		{2500, 20, 95332, "100000 bytes in 0.10 seconds = 8.39 Mbit/sec\n20 iters in 0.10 seconds = 4766.60 usec/iter\n"},
		{512, 20, 45461, "20480 bytes in 0.05 seconds = 3.60 Mbit/sec\n20 iters in 0.05 seconds = 2273.05 usec/iter\n"},
		{4096, 20, 144765, "163840 bytes in 0.14 seconds = 9.05 Mbit/sec\n20 iters in 0.14 seconds = 7238.25 usec/iter\n"},
		// usec is a C float: 2^24+1 µs is 2^24.
		{1, 1, 1<<24 + 1, "2 bytes in 16.78 seconds = 0.00 Mbit/sec\n1 iters in 16.78 seconds = 16777216.00 usec/iter\n"},
		{4096, 1000, 0, "8192000 bytes in 0.00 seconds = inf Mbit/sec\n1000 iters in 0.00 seconds = 0.00 usec/iter\n"},
		{4096, 0, 0, "0 bytes in 0.00 seconds = -nan Mbit/sec\n0 iters in 0.00 seconds = -nan usec/iter\n"},
	} {
		var b bytes.Buffer
		printSummary(&b, tc.size, tc.iters, time.Duration(tc.usec)*time.Microsecond)
		if b.String() != tc.want {
			t.Errorf("%d × %d in %d µs:\ngot  %q\nwant %q", tc.size, tc.iters, tc.usec, b.String(), tc.want)
		}
	}
}

func TestParseArgs(t *testing.T) {
	cfg, err := parseArgs(strings.Fields("-d rxe0 -g 1 -s 2500 -n 2 192.0.2.11"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.mode.name != "rc" || cfg.ibDev != "rxe0" || cfg.gidx != 1 || cfg.size != 2500 || cfg.iters != 2 ||
		cfg.servername != "192.0.2.11" || cfg.port != 18515 || cfg.mtu != 1024 || cfg.rxDepth != 500 || cfg.numQP != 1 || cfg.socket != DefaultSocket {
		t.Errorf("%+v", cfg)
	}
	cfg, err = parseArgs(strings.Fields("--mode=ud --socket /tmp/x.sock -ec --iters 7"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.mode.name != "ud" || cfg.size != 1024 || !cfg.events || !cfg.validate || cfg.iters != 7 || cfg.socket != "/tmp/x.sock" || cfg.gidx != -1 {
		t.Errorf("%+v", cfg)
	}
	cfg, err = parseArgs(strings.Fields("--mode srq -q 8 -r 64"))
	if err != nil || cfg.numQP != 8 || cfg.rxDepth != 64 {
		t.Errorf("%+v %v", cfg, err)
	}
	for args, want := range map[string]string{
		"--mode ud -m 1024":    "invalid option -- 'm'", // ud_pingpong has no -m
		"-q 2":                 "invalid option -- 'q'",
		"-m 1000":              "-m 1000: want 256, 512, 1024, 2048 or 4096",
		"-o":                   "-o: not supported by vrnicd",
		"-s 0":                 "-s 0: out of range",
		"-p 70000":             "-p 70000: out of range",
		"-n x":                 `-n: "x" is not a number`,
		"a b":                  `unexpected arguments ["b"]`,
		"--mode xx":            `--mode "xx": want rc, uc, ud or srq`,
		"--mode srq -q 9 -r 8": "rx_depth 8 is too small for 9 QPs -- must have at least one receive per QP",
		"--mode srq -q 256":    "num_qp 256 must be less than 255",
		"-i 2":                 "-i 2: out of range 1…1",
	} {
		_, err := parseArgs(strings.Fields(args))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", args, err, want)
		}
	}
}

func TestRunUsageAndErrors(t *testing.T) {
	ctx := context.Background()
	var o, e bytes.Buffer
	if err := run(ctx, []string{"--mode", "srq", "--help"}, &o, &e); err != nil || !strings.Contains(o.String(), "-q, --num-qp=<num>") {
		t.Errorf("help: %v %q", err, o.String())
	}
	o.Reset()
	e.Reset()
	err := run(ctx, []string{"--mode", "ud", "-m", "1024"}, &o, &e)
	var u *getopt.UsageError
	if !errors.As(err, &u) || !strings.Contains(o.String(), "Usage:") || strings.Contains(o.String(), "--mtu") {
		t.Errorf("bad option: %v, usage %q", err, o.String())
	}
	o.Reset()
	e.Reset()
	err = run(ctx, []string{"--socket", "/nonexistent/vrnicd.sock", "-g", "1"}, &o, &e)
	if err == nil || !strings.Contains(e.String(), "Couldn't get context for vrnicd at /nonexistent/vrnicd.sock") {
		t.Errorf("no daemon: %v %q", err, e.String())
	}
}
