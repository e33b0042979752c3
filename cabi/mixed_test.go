package cabi

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// buildGoTool builds one of our Go tools (cmd/NAME) for the test.
func buildGoTool(t *testing.T, name string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	if b, err := exec.Command("go", "build", "-o", out, "../cmd/"+name).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", name, err, b)
	}
	return out
}

// Debian's programs under the drop-in library against our Go tools on the
// other device, each way: the two speak the same TCP exchange and RDMA.
func TestMixedWithGoTools(t *testing.T) {
	needProgram(t, "ibv_rc_pingpong", "ibverbs-utils")
	needProgram(t, "ib_write_bw", "perftest")
	pp, perf := buildGoTool(t, "vrnic-pingpong"), buildGoTool(t, "vrnic-perf")
	tl, ds := devices(t, 1500)
	g0, g1 := gidIndex(ds[0]), gidIndex(ds[1])
	for _, tc := range []struct {
		name     string
		srv      []string
		cli      func(port string) []string
		pingpong bool
	}{
		{"ibv_rc_pingpong server, vrnic-pingpong client",
			[]string{"ibv_rc_pingpong", "-g", g0, "-n", "100", "-s", "4096", "-c"},
			func(p string) []string {
				return []string{pp, "--socket", ds[1].Socket, "-p", p, "-g", g1, "-n", "100", "-s", "4096", "-c", "127.0.0.1"}
			}, true},
		{"vrnic-pingpong server, ibv_rc_pingpong client",
			[]string{pp, "--socket", ds[0].Socket, "-g", g0, "-n", "100", "-s", "4096", "-c"},
			func(p string) []string {
				return []string{"ibv_rc_pingpong", "-p", p, "-g", g1, "-n", "100", "-s", "4096", "-c", "127.0.0.1"}
			}, true},
		{"ib_write_bw server, vrnic-perf client",
			[]string{"ib_write_bw", "-x", g0, "-s", "65536", "-n", "200"},
			func(p string) []string {
				return []string{perf, "write_bw", "--socket", ds[1].Socket, "-p", p, "-x", g1, "-s", "65536", "-n", "200", "127.0.0.1"}
			}, false},
		{"vrnic-perf server, ib_send_lat client",
			[]string{perf, "send_lat", "--socket", ds[0].Socket, "-x", g0, "-s", "8", "-n", "200"},
			func(p string) []string {
				return []string{"ib_send_lat", "-p", p, "-x", g1, "-s", "8", "-n", "200", "127.0.0.1"}
			}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srvOut, cliOut := runPair(t, tl[0], tl[1], 60*time.Second, tc.srv, tc.cli)
			if tc.pingpong {
				checkPingpong(t, srvOut, cliOut, 100)
				return
			}
			prog := filepath.Base(tc.cli("0")[0])
			if strings.HasPrefix(prog, "vrnic-perf") {
				prog = "ib_" + tc.cli("0")[1]
			}
			checkPerftest(t, prog, tc.cli("0")[1:], srvOut, cliOut)
		})
	}
}
