package cabi

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Debian's rdmacm-utils and perftest's rdma_cm mode, unmodified, on the
// drop-in librdmacm.so.1 (beside the drop-in libibverbs.so.1), both ends on
// vrnicd devices: the addresses are the devices' own (their GIDs), and
// rdma_cm does all the connecting, no TCP.

// needRdmacm skips unless the drop-in librdmacm was built beside libibverbs.
func needRdmacm(t *testing.T, tl tool) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(tl.libDir, "librdmacm.so.1")); err != nil {
		t.Skipf("the drop-in librdmacm.so.1 is not built (make cabi): %v", err)
	}
}

// deviceAddr is a device's IPv4 address: its IPv4-mapped GID.
func deviceAddr(t *testing.T, tl tool) string {
	t.Helper()
	out, err := tl.run(t, 10*time.Second, "ibv_devinfo", "-v")
	if err != nil {
		t.Fatalf("ibv_devinfo: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`::ffff:([0-9.]+), RoCE v2`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no IPv4 GID:\n%s", out)
	}
	return m[1]
}

var (
	rpingLine   = regexp.MustCompile(`(?m)^ping data: rdma-ping-(\d+): `)
	cmDone      = regexp.MustCompile(`(?m)^return status 0$`)
	rdmaSrvDone = regexp.MustCompile(`(?m)^rdma_server: end 0$`)
	rdmaCliDone = regexp.MustCompile(`(?m)^rdma_client: end 0$`)
)

func TestRdmacmPrograms(t *testing.T) {
	needProgram(t, "rping", "rdmacm-utils")
	tl, _ := devices(t, 1500)
	needRdmacm(t, tl[0])
	srvAddr := deviceAddr(t, tl[0])
	for _, tc := range []struct {
		name  string
		srv   []string
		cli   []string
		check func(t *testing.T, srv, cli string)
	}{
		{"rping", []string{"rping", "-s", "-a", srvAddr, "-C", "20", "-v"}, []string{"rping", "-c", "-a", srvAddr, "-C", "20", "-v"},
			func(t *testing.T, srv, cli string) {
				if n := len(rpingLine.FindAllString(cli, -1)); n != 20 {
					t.Fatalf("client printed %d pings, want 20:\n%s", n, cli)
				}
			}},
		{"rping 65535 validated", []string{"rping", "-s", "-a", srvAddr, "-C", "5", "-S", "65535", "-V"},
			[]string{"rping", "-c", "-a", srvAddr, "-C", "5", "-S", "65535", "-V"}, nil},
		{"ucmatose", []string{"ucmatose", "-c", "4", "-C", "20", "-S", "4096"},
			[]string{"ucmatose", "-s", srvAddr, "-c", "4", "-C", "20", "-S", "4096"}, checkBoth(cmDone, cmDone)},
		{"udaddy", []string{"udaddy", "-c", "2", "-C", "10"}, []string{"udaddy", "-s", srvAddr, "-c", "2", "-C", "10"},
			checkBoth(cmDone, cmDone)},
		{"rdma_server/client", []string{"rdma_server"}, []string{"rdma_client", "-s", srvAddr},
			checkBoth(rdmaSrvDone, rdmaCliDone)},
		{"ib_send_bw -R", []string{"ib_send_bw", "-R", "-n", "500"}, []string{"ib_send_bw", "-R", "-n", "500", srvAddr},
			func(t *testing.T, srv, cli string) { checkPerftest(t, "ib_send_bw", nil, srv, cli) }},
		{"ib_write_bw -R -q 2", []string{"ib_write_bw", "-R", "-q", "2", "-n", "500"},
			[]string{"ib_write_bw", "-R", "-q", "2", "-n", "500", srvAddr},
			func(t *testing.T, srv, cli string) { checkPerftest(t, "ib_write_bw", nil, srv, cli) }},
		{"ib_read_lat -R", []string{"ib_read_lat", "-R", "-n", "300"}, []string{"ib_read_lat", "-R", "-n", "300", srvAddr},
			func(t *testing.T, srv, cli string) { checkPerftest(t, "ib_read_lat", []string{"-s", "2"}, srv, cli) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srvOut, cliOut := runPair(t, tl[0], tl[1], 60*time.Second, tc.srv, func(port string) []string {
				return withPort(tc.cli, port)
			})
			if tc.check != nil {
				tc.check(t, srvOut, cliOut)
			}
			t.Logf("client:\n%s", lastLines(cliOut, 4))
		})
	}
}

// withPort gives a client its server's port the way each program takes it
// (rping and perftest: -p; the librdmacm examples: -p is the port space,
// their port is fixed, so their servers were not moved either).
func withPort(args []string, port string) []string {
	switch args[0] {
	case "rping", "ib_send_bw", "ib_write_bw", "ib_read_lat", "ib_write_lat", "ib_send_lat", "ib_read_bw":
		return append(append([]string{args[0]}, "-p", port), args[1:]...)
	}
	return args
}

func checkBoth(srv, cli *regexp.Regexp) func(t *testing.T, s, c string) {
	return func(t *testing.T, s, c string) {
		if !srv.MatchString(s) || !cli.MatchString(c) {
			t.Fatalf("server:\n%s\nclient:\n%s", s, c)
		}
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
