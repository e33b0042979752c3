package cabi

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link/linktest"
)

// realDaemons runs two vrnicd processes in raw mode on the two ends of a
// veth pair, each in its own network namespace (198.51.100.1 and .2), as
// users run it, and returns a tool for each side.
func realDaemons(t *testing.T) [2]tool {
	t.Helper()
	linktest.RequireRoot(t)
	lib := filepath.Dir(ourLib(t))
	bin := buildGoTool(t, "vrnicd")
	nsA, nsB := linktest.NewNS(t, "cabA"), linktest.NewNS(t, "cabB")
	linktest.VethPair(t, nsA, "vcab0", nsB, "vcab1")
	nsA.Exec(t, "ip", "addr", "add", "198.51.100.1/24", "dev", "vcab0")
	nsB.Exec(t, "ip", "addr", "add", "198.51.100.2/24", "dev", "vcab1")
	dir := t.TempDir()
	var tl [2]tool
	for i, x := range []struct {
		ns    *linktest.NS
		iface string
	}{{nsA, "vcab0"}, {nsB, "vcab1"}} {
		sock := filepath.Join(dir, x.iface+".sock")
		log, err := os.Create(filepath.Join(dir, x.iface+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("ip", "netns", "exec", x.ns.Name, bin, "--iface", x.iface, "--socket", sock)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill() // by PID: ours
			_ = cmd.Wait()
			log.Close()
			if t.Failed() {
				b, _ := os.ReadFile(log.Name())
				t.Logf("vrnicd %s:\n%s", x.iface, b)
			}
		})
		deadline := time.Now().Add(15 * time.Second)
		for {
			if _, err := os.Stat(sock); err == nil {
				break
			}
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(log.Name())
				t.Fatalf("vrnicd on %s made no socket in 15 s:\n%s", x.iface, b)
			}
			time.Sleep(50 * time.Millisecond)
		}
		tl[i] = tool{lib, sock, x.ns.Name}
	}
	return tl
}

// Debian's programs on vrnicd processes over a real link: what a user runs.
func TestProgramsOnRealDaemons(t *testing.T) {
	needProgram(t, "ibv_rc_pingpong", "ibverbs-utils")
	needProgram(t, "ib_write_bw", "perftest")
	tl := realDaemons(t)
	out, err := tl[0].run(t, 10*time.Second, "ibv_devinfo")
	if err != nil || !strings.Contains(out, "PORT_ACTIVE") {
		t.Fatalf("ibv_devinfo: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		prog string
		args []string
	}{
		{"ibv_rc_pingpong", []string{"-n", "500", "-s", "4096", "-c"}},
		{"ibv_ud_pingpong", []string{"-n", "500", "-s", "1000", "-c", "-e"}},
		{"ibv_srq_pingpong", []string{"-n", "500", "-q", "4", "-s", "4096", "-c"}},
		{"ib_write_bw", []string{"-s", "65536", "-n", "1000"}},
		{"ib_read_bw", []string{"-s", "65536", "-n", "500", "--use_old_post_send"}},
		{"ib_send_bw", []string{"-s", "64", "-n", "5000"}},
		{"ib_write_lat", []string{"-s", "8", "-n", "1000"}},
		{"ib_send_lat", []string{"-s", "8", "-n", "1000"}},
	} {
		t.Run(tc.prog+strings.Join(tc.args, ""), func(t *testing.T) {
			gid := "-g"
			if strings.HasPrefix(tc.prog, "ib_") {
				gid = "-x"
			}
			srv := append([]string{tc.prog, gid, "1"}, tc.args...)
			srvOut, cliOut := runPair(t, tl[0], tl[1], 90*time.Second, srv, func(port string) []string {
				return append(append([]string{tc.prog, "-p", port, gid, "1"}, tc.args...), "198.51.100.1")
			})
			if strings.HasPrefix(tc.prog, "ibv_") {
				checkPingpong(t, srvOut, cliOut, 500)
				t.Logf("%s", ppIters.FindString(cliOut))
				return
			}
			checkPerftest(t, tc.prog, tc.args, srvOut, cliOut)
			t.Logf("%s%s", bwLine.FindString(cliOut), latLine.FindString(cliOut))
		})
	}
}
