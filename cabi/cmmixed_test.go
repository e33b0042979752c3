package cabi

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cmtimeRow is a row of cmtime's table: step, total ms, max ms, min us,
// us per connection.
var cmtimeRow = regexp.MustCompile(`(?m)^([a-z ]+?) *: +([0-9.]+) +([0-9.]+) +([0-9.]+) +([0-9.]+)$`)

// cmtimeSteps are the rows cmtime (v44) prints for a client run without
// -b; vrnic-cmtime's are the last four (its "connect" holds the resolving).
var cmtimeSteps = []string{"create id", "resolve addr", "resolve route", "create qp", "connect", "disconnect", "destroy"}

// runServer runs a server that does not exit by itself (cmtime's) on s and
// a client on c to its end; then the server is killed, and must not have
// ended before. It returns both outputs.
func runServer(t *testing.T, s, c tool, d time.Duration, srv, cli []string) (srvOut, cliOut string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	sc, sbuf := s.command(ctx, srv...)
	if err := sc.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sc.Wait() }()
	var cerr error
	for range 100 {
		cliOut, cerr = c.run(t, d, cli...)
		if cerr == nil || !connectFailed.MatchString(cliOut) {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("server exited before a client came: %v\n%s", err, sbuf)
		case <-time.After(100 * time.Millisecond):
		}
	}
	select {
	case err := <-done:
		t.Fatalf("the server ended: %v\n%s\nclient: %v\n%s", err, sbuf, cerr, cliOut)
	default:
	}
	_ = sc.Process.Kill() // ours, by PID
	<-done
	if cerr != nil {
		t.Fatalf("client: %v\n%s\nserver:\n%s", cerr, cliOut, sbuf)
	}
	return sbuf.String(), cliOut
}

// checkCmtime checks a cmtime client's output: every step's row, no failed
// connection (cmtime reports one with "event: ..." or "failure ..." and
// still exits 0); the figures are logged.
func checkCmtime(t *testing.T, who, out string) {
	t.Helper()
	if strings.Contains(out, "event: ") || strings.Contains(out, "failure") || strings.Contains(out, "error") {
		t.Fatalf("%s reported a failure:\n%s", who, out)
	}
	got := map[string]bool{}
	for _, r := range cmtimeRow.FindAllStringSubmatch(out, -1) {
		got[r[1]] = true
		t.Logf("%s %-13s total %9s ms  max %8s ms  min %9s us  %9s us/conn", who, r[1], r[2], r[3], r[4], r[5])
	}
	steps := cmtimeSteps
	if strings.HasSuffix(who, "vrnic-cmtime") {
		steps = steps[3:]
	}
	for _, s := range steps {
		if !got[s] {
			t.Fatalf("%s: no %q row:\n%s", who, s, out)
		}
	}
}

// cmtime (librdmacm's connection-rate example) with 100 connections made
// at once and disconnected, both ends Debian's cmtime on the drop-in, and
// each end against vrnic-cmtime; the server is stopped after the client,
// and both CM tables are left with nothing but timewait.
func TestRdmacmCmtime(t *testing.T) {
	needProgram(t, "cmtime", "rdmacm-utils")
	vcm := buildGoTool(t, "vrnic-cmtime")
	tl, ds := devices(t, 1500)
	ourRdmacm(t)
	srv := ds[0].Host.Addr.String()
	for _, tc := range []struct {
		name     string
		srv, cli string
	}{
		{"cmtime", "cmtime", "cmtime"},
		{"vrnic-cmtime server", vcm, "cmtime"},
		{"vrnic-cmtime client", "cmtime", vcm},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := freePort(t)
			start := time.Now()
			so, co := runServer(t, tl[0], tl[1], 120*time.Second, []string{tc.srv, "-b", srv, "-p", port},
				[]string{tc.cli, "-s", srv, "-p", port, "-c", "100"})
			if strings.TrimSpace(so) != "" {
				t.Fatalf("the server printed:\n%s", so)
			}
			checkCmtime(t, filepath.Base(tc.cli), co)
			cmTablesClean(t, ds)
			t.Logf("%.1fs", time.Since(start).Seconds())
		})
	}
}

// rsocketsMsg is what the drop-in says at the first rsocket call.
const rsocketsMsg = "vrnicd's librdmacm has no rsockets"

// Debian's rsocket programs (riostream, rstream) on the drop-in, whose
// rsocket calls fail ENOSYS: each, server or client, exits at once with a
// failure status and says why (our message, and the program's own
// "rsocket failed: Function not implemented"), killed by no signal.
func TestRdmacmRsocketPrograms(t *testing.T) {
	needProgram(t, "rstream", "rdmacm-utils")
	tl, ds := devices(t, 1500)
	ourRdmacm(t)
	srv := ds[0].Host.Addr.String()
	for _, argv := range [][]string{
		{"rstream"}, {"rstream", "-s", srv}, {"rstream", "-s", srv, "-S", "all"}, {"rstream", "-s", srv, "-b", srv, "-k", "1"},
		{"riostream"}, {"riostream", "-s", srv}, {"riostream", "-s", srv, "-S", "all"},
	} {
		t.Run(strings.Join(argv, " "), func(t *testing.T) {
			start := time.Now()
			out, err := tl[1].run(t, 20*time.Second, argv...)
			took := time.Since(start)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || !ee.Exited() || ee.ExitCode() == 0 {
				t.Fatalf("%v (want a failure exit status) after %v:\n%s", err, took, out)
			}
			if !strings.Contains(out, rsocketsMsg) || !strings.Contains(out, "Function not implemented") {
				t.Fatalf("exit %d without saying why:\n%s", ee.ExitCode(), out)
			}
			if n := strings.Count(out, rsocketsMsg); n != 1 {
				t.Errorf("the drop-in's message %d times, want once:\n%s", n, out)
			}
			if took > 5*time.Second {
				t.Errorf("took %v to fail", took)
			}
			t.Logf("exit %d in %v: %s", ee.ExitCode(), took.Round(time.Millisecond), lastLines(out, 3))
		})
	}
}

// Debian's rdmacm programs on the drop-in against our Go tools on the
// other device, each way, outputs checked as both sides' own tests check
// them: vrnic-rping with rping (validated, 64 and 4096 bytes, and 65535),
// vrnic-ucmatose with ucmatose (4 connections), vrnic-udaddy with udaddy
// (2 peers), vrnic-perf -R with ib_send_bw -R and ib_write_lat -R.
func TestRdmacmMixedWithGoTools(t *testing.T) {
	needProgram(t, "rping", "rdmacm-utils")
	needProgram(t, "ib_send_bw", "perftest")
	tools := map[string]string{}
	for _, n := range []string{"vrnic-rping", "vrnic-ucmatose", "vrnic-udaddy", "vrnic-perf"} {
		tools[n] = buildGoTool(t, n)
	}
	tl, ds := devices(t, 1500)
	ourRdmacm(t)
	srv := ds[0].Host.Addr.String()
	type pairing struct {
		name     string
		srv, cli []string // the client's port is added with withPort (the -p flag) unless fixed
		check    func(t *testing.T, srv, cli string)
	}
	var cases []pairing
	for _, r := range []struct{ count, size int }{{20, 64}, {50, 4096}, {3, 65535}} {
		c, s := strconv.Itoa(r.count), strconv.Itoa(r.size)
		deb := func(role string) []string {
			return []string{"rping", role, "-a", srv, "-C", c, "-S", s, "-v", "-V"}
		}
		// --socket: vrnic-rping takes no $VRNICD_SOCKET
		ours := func(role string) []string {
			sock := map[string]string{"-s": ds[0].Socket, "-c": ds[1].Socket}[role]
			return []string{tools["vrnic-rping"], role, "-a", srv, "-C", c, "-S", s, "-v", "-V", "--socket", sock}
		}
		name := fmt.Sprintf("%d×%d", r.count, r.size)
		cases = append(cases,
			pairing{"vrnic-rping server, rping client " + name, ours("-s"), deb("-c"), rpingBoth(r.count, r.size)},
			pairing{"rping server, vrnic-rping client " + name, deb("-s"), ours("-c"), rpingBoth(r.count, r.size)})
	}
	const ucm, uda = "-c 4 -C 20 -S 1024", "-c 2 -C 10 -S 512"
	cases = append(cases,
		pairing{"vrnic-ucmatose server, ucmatose client", append([]string{tools["vrnic-ucmatose"]}, strings.Fields(ucm)...),
			append([]string{"ucmatose", "-s", srv}, strings.Fields(ucm)...), linesBoth(ucmatoseServer, ucmatoseClient)},
		pairing{"ucmatose server, vrnic-ucmatose client", append([]string{"ucmatose"}, strings.Fields(ucm)...),
			append([]string{tools["vrnic-ucmatose"], "-s", srv}, strings.Fields(ucm)...), linesBoth(ucmatoseServer, ucmatoseClient)},
		pairing{"vrnic-udaddy server, udaddy client", append([]string{tools["vrnic-udaddy"]}, strings.Fields(uda)...),
			append([]string{"udaddy", "-s", srv}, strings.Fields(uda)...), linesBoth(udaddyServer, udaddyClient)},
		pairing{"udaddy server, vrnic-udaddy client", append([]string{"udaddy"}, strings.Fields(uda)...),
			append([]string{tools["vrnic-udaddy"], "-s", srv}, strings.Fields(uda)...), linesBoth(udaddyServer, udaddyClient)},
	)
	for _, p := range []struct {
		deb, sub string
		args     []string
	}{{"ib_send_bw", "send_bw", []string{"-s", "4096", "-n", "500"}}, {"ib_write_lat", "write_lat", []string{"-s", "64", "-n", "300"}}} {
		ours := append([]string{tools["vrnic-perf"], p.sub, "-R"}, p.args...)
		deb := append([]string{p.deb, "-R"}, p.args...)
		cases = append(cases,
			pairing{"vrnic-perf " + p.sub + " -R server, " + p.deb + " -R client", ours, append(deb, srv), perfCM(p.deb, p.args...)},
			pairing{p.deb + " -R server, vrnic-perf " + p.sub + " -R client", deb, append(ours, srv), perfCM(p.deb, p.args...)})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			listening := func() bool { return len(ds[0].CM.Snapshot().Listeners) > 0 }
			srvOut, cliOut := runPairReady(t, tl[0], tl[1], 60*time.Second, tc.srv, func(port string) []string {
				return mixedPort(tc.cli, port)
			}, listening)
			tc.check(t, srvOut, cliOut)
			cmTablesClean(t, ds)
			t.Logf("client:\n%s", lastLines(cliOut, 3))
		})
	}
}

// mixedPort gives a client its server's port: -p after the program (and
// vrnic-perf's test name) for those that take it, nothing for the fixed
// ports of ucmatose, udaddy and their vrnic- counterparts.
func mixedPort(args []string, port string) []string {
	base := args[0][strings.LastIndex(args[0], "/")+1:]
	switch base {
	case "ucmatose", "udaddy", "vrnic-ucmatose", "vrnic-udaddy":
		return args
	case "vrnic-perf":
		return append([]string{args[0], args[1], "-p", port}, args[2:]...)
	}
	return append([]string{args[0], "-p", port}, args[1:]...)
}
