package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// stat --watch prints one set of rates per interval, --count of them;
// RDMA WRITEs running meanwhile show as sent_pkts per second.
func TestStatWatch(t *testing.T) {
	ha, _, sock := daemonHost(t)
	p := newRCPair(t, sock, ha)
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- writeLoop(p, stop) }()
	rc, out, errOut := runCmd("stat", "--socket", sock, "--watch", "0.2", "--count", "3", "--json")
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if rc != 0 {
		t.Fatalf("stat --watch: exit %d, stderr %q", rc, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("--count 3 printed %d lines: %q", len(lines), out)
	}
	var sent float64
	for _, l := range lines {
		var r struct {
			Time     time.Time            `json:"time"`
			Interval float64              `json:"interval_s"`
			Device   map[string]float64   `json:"device"`
			QPs      []map[string]float64 `json:"qps"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if r.Interval <= 0 || r.Time.IsZero() || len(r.QPs) != 2 {
			t.Errorf("line %q", l)
		}
		for _, n := range []string{"sent_pkts", "rcvd_pkts", "retry_exceeded_err", "icrc_errors", "frames_out"} {
			if v, ok := r.Device[n]; !ok || v < 0 {
				t.Errorf("device %s = %v, %v", n, v, ok)
			}
		}
		sent += r.Device["sent_pkts"]
	}
	if sent == 0 {
		t.Errorf("sent_pkts never moved while WRITEs ran: %q", out)
	}

	rc, out, errOut = runCmd("stat", "--socket", sock, "--watch=0.05", "--count=1")
	if rc != 0 || !regexp.MustCompile(`^\d\d:\d\d:\d\d device vrnic0, per second over \d+\.\d\d s\n`).MatchString(out) {
		t.Fatalf("stat --watch text: exit %d, %q %q", rc, out, errOut)
	}
	for _, args := range [][]string{{"stat", "5"}, {"stat", "--count", "2"}, {"stat", "--watch", "0"}, {"stat", "--watch=x"}} {
		if rc, _, errOut := runCmd(append(args, "--socket", sock)...); rc != exitUsage || !strings.Contains(errOut, "usage: vrnicctl stat") {
			t.Errorf("%q: exit %d, stderr %q; want %d and the usage", args, rc, errOut, exitUsage)
		}
	}
}

// writeLoop posts 4 KiB RDMA WRITEs one at a time until stop.
func writeLoop(p *rcPair, stop <-chan struct{}) error {
	wc := make([]verbs.WC, 1)
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		if err := p.a.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{p.mr.SGE(0, 4096)}, RemoteAddr: p.mr.Addr() + 32768, RKey: p.mr.RKey()}); err != nil {
			return err
		}
		for p.cq.Poll(wc) == 0 {
			if time.Now().After(deadline) {
				return errors.New("no completion")
			}
			time.Sleep(100 * time.Microsecond)
		}
		if wc[0].Status != verbs.WCSuccess {
			return errors.New("WRITE failed: " + wc[0].Status.String())
		}
	}
}

// stat --watch without --count runs until SIGINT, then exits 0.
func TestStatWatchStopsOnSIGINT(t *testing.T) {
	_, _, sock := daemonHost(t)
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		var errb strings.Builder
		rc := run([]string{"stat", "--socket", sock, "--watch=0.05"}, pw, &errb)
		pw.CloseWithError(errors.New(errb.String()))
		done <- rc
	}()
	if _, err := bufio.NewReader(pr).ReadString('\n'); err != nil {
		t.Fatalf("no first interval: %v", err)
	}
	go io.Copy(io.Discard, pr)
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case rc := <-done:
		if rc != exitOK {
			t.Fatalf("stat --watch after SIGINT: exit %d", rc)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stat --watch still running 10 s after SIGINT")
	}
}
