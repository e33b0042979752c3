package oob

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The captures in testdata (see its README) come with the tools' own
// output of the same run: the addresses each side printed are checked
// against the bytes it sent.

// printedPingpong reads "  local address:  LID 0x0000, QPN 0x000020, PSN
// 0x5420d8, GID ::ffff:192.0.2.12" lines (ud_pingpong: "PSN ...: GID").
func printedPingpong(t *testing.T, file string) (local, remote []PingpongDest) {
	t.Helper()
	re := regexp.MustCompile(`^  (local|remote) address: +LID 0x([0-9a-f]{4}), QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6})[,:] GID (\S+)$`)
	for _, l := range readLines(t, file) {
		m := re.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		var d PingpongDest
		lid, _ := strconv.ParseUint(m[2], 16, 16)
		qpn, _ := strconv.ParseUint(m[3], 16, 32)
		psn, _ := strconv.ParseUint(m[4], 16, 32)
		d.LID, d.QPN, d.PSN = uint16(lid), uint32(qpn), uint32(psn)
		if g := (m[5]); GIDString(gid4(mustAddr(t, g))) != g {
			t.Fatalf("%s: GID %q does not print back the same", file, g)
		}
		d.GID = gid4(mustAddr(t, m[5]))
		if m[1] == "local" {
			local = append(local, d)
		} else {
			remote = append(remote, d)
		}
	}
	return local, remote
}

// printedAddr is one address perftest printed, and which of the optional
// fields the line had.
type printedAddr struct {
	d               PerftestDest
	hasOut, hasRKey bool
}

// printedPerftest reads " local address: LID 0000 QPN 0x002f PSN 0x4e20e6
// [OUT 0x80] [RKey 0x000a3e VAddr 0x007f633e12a000]" lines and the
// " GID: 00:...:255:255:192:00:02:12" (decimal bytes) line after each, and
// the last report line " 8388608    10   3.87   3.87   0.000000".
func printedPerftest(t *testing.T, file string) (local, remote []printedAddr, report []string) {
	t.Helper()
	re := regexp.MustCompile(`^ (local|remote) address: LID (\S+) QPN (\S+) PSN (\S+)(?: OUT (\S+))?(?: RKey (\S+) VAddr (\S+))?$`)
	gre := regexp.MustCompile(`^ GID: ((?:\d{2,3}:){15}\d{2,3})$`)
	rre := regexp.MustCompile(`^ (\d+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)$`)
	lines := readLines(t, file)
	for i, l := range lines {
		if m := rre.FindStringSubmatch(l); m != nil {
			report = m[1:]
		}
		m := re.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		hex := func(s string) uint64 {
			v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
			if err != nil {
				t.Fatalf("%s: %q in %q", file, s, l)
			}
			return v
		}
		var a printedAddr
		a.d.LID, a.d.QPN, a.d.PSN = uint16(hex(m[2])), uint32(hex(m[3])), uint32(hex(m[4]))
		if m[5] != "" {
			a.hasOut, a.d.OutReads = true, uint16(hex(m[5]))
		}
		if m[6] != "" {
			a.hasRKey, a.d.RKey, a.d.VAddr = true, uint32(hex(m[6])), hex(m[7])
		}
		g := gre.FindStringSubmatch(lines[i+1])
		if g == nil {
			t.Fatalf("%s: no GID line after %q", file, l)
		}
		for j, b := range strings.Split(g[1], ":") {
			v, _ := strconv.Atoi(b)
			a.d.GID[j] = byte(v)
		}
		if m[1] == "local" {
			local = append(local, a)
		} else {
			remote = append(remote, a)
		}
	}
	return local, remote, report
}

// matches compares what perftest printed of an address with what it sent.
func (a printedAddr) matches(d PerftestDest) bool {
	if !a.hasOut {
		d.OutReads = 0
	}
	if !a.hasRKey {
		d.RKey, d.VAddr = 0, 0
	}
	d.SRQN = 0
	return a.d == d
}

func readLines(t *testing.T, file string) []string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestSRQPingpongCapture(t *testing.T) {
	c := readCaptureFile(t, filepath.Join("testdata", "srq_q2.pcap"))
	local, remote := printedPingpong(t, filepath.Join("testdata", "srq_q2.cli.out"))
	slocal, sremote := printedPingpong(t, filepath.Join("testdata", "srq_q2.srv.out"))
	if len(local) != 2 || len(remote) != 2 || fmt.Sprint(local, remote) != fmt.Sprint(sremote, slocal) {
		t.Fatalf("printed: client %v %v, server %v %v", local, remote, slocal, sremote)
	}
	if len(c.Chunks) != 3 || !c.Chunks[0].FromClient || c.Chunks[1].FromClient || !c.Chunks[2].FromClient {
		t.Fatalf("want client, server, client; got %d chunks", len(c.Chunks))
	}
	sizes := make([]int, SRQPingpongSlots)
	for i := range sizes {
		sizes[i] = PingpongMsgSize
	}
	cm := messages(t, "client stream", c.ToServer, append(sizes, len(doneMsg))...)
	sm := messages(t, "server stream", c.ToClient, sizes...)
	if !bytes.Equal(cm[SRQPingpongSlots], doneMsg) {
		t.Errorf("client's last message %s", quote(cm[SRQPingpongSlots]))
	}
	decode := func(who string, ms [][]byte, printed []PingpongDest) []PingpongDest {
		var ds []PingpongDest
		for i, m := range ms[:SRQPingpongSlots] {
			d, err := ParsePingpongDest(m)
			if err != nil {
				t.Fatalf("%s message %d: %v", who, i, err)
			}
			want := PingpongDest{} // slots past -q are sent zeroed
			if i < len(printed) {
				want = printed[i]
			}
			if d != want {
				t.Errorf("%s message %d: %+v, it printed %+v", who, i, d, want)
			}
			if enc := d.AppendMsg(nil); !bytes.Equal(enc, m) {
				t.Errorf("%s message %d: encoded %s, sent %s", who, i, quote(enc), quote(m))
			}
			ds = append(ds, d)
		}
		return ds
	}
	cds, sds := decode("client", cm, local), decode("server", sm, remote)
	var ca, sa []qpAddr
	for i := range local {
		ca = append(ca, qpAddr{QPN: local[i].QPN, PSN: local[i].PSN, GID: local[i].GID})
		sa = append(sa, qpAddr{QPN: remote[i].QPN, PSN: remote[i].PSN, GID: remote[i].GID})
	}
	checkRoCEPairs(t, c, ca, sa)
	replay(t, c, true, func(ctx context.Context, conn *Conn) error {
		got, err := conn.PingpongClient(ctx, cds)
		if err == nil && !equalDests(got, sds) {
			t.Errorf("client got %v…", got[:2])
		}
		return err
	})
	replay(t, c, false, func(ctx context.Context, conn *Conn) error {
		got, err := conn.PingpongServer(ctx, sds, nil)
		if err == nil && !equalDests(got, cds) {
			t.Errorf("server got %v…", got[:2])
		}
		return err
	})
}

func TestPerftestCapturesWithPrintedOutput(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script []step
		roce   bool
	}{
		{"write_bw_q2_all", bwScript(2), false},
		{"write_bw_dur", bwScript(1), false},
		{"send_bw_all", sendBWScript(1, 23), false},
		{"read_lat", readLatScript(1), true},
		{"atomic_lat", readLatScript(1), true},
		{"send_lat", sendLatScript(1), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := readCaptureFile(t, filepath.Join("testdata", tc.name+".pcap"))
			cl := decodePerftestSide(t, "client", c.ToServer, tc.script)
			sv := decodePerftestSide(t, "server", c.ToClient, tc.script)
			for _, side := range []struct {
				who        string
				mine, peer []PerftestDest
			}{{"cli", cl.dests, sv.dests}, {"srv", sv.dests, cl.dests}} {
				local, remote, report := printedPerftest(t, filepath.Join("testdata", tc.name+"."+side.who+".out"))
				if len(local) != len(side.mine) || len(remote) != len(side.peer) {
					t.Fatalf("%s printed %d local, %d remote addresses; sent %d, got %d", side.who, len(local), len(remote), len(side.mine), len(side.peer))
				}
				for i := range local {
					if !local[i].matches(side.mine[i]) || !remote[i].matches(side.peer[i]) {
						t.Errorf("%s QP %d printed %+v / %+v; exchanged %+v / %+v", side.who, i, local[i].d, remote[i].d, side.mine[i], side.peer[i])
					}
				}
				if side.who == "srv" && cl.hasReport {
					// The server prints the client's report as received.
					r := cl.report
					got := []string{fmt.Sprint(r.Size), fmt.Sprint(r.Iters), fmt.Sprintf("%.2f", r.BWPeak), fmt.Sprintf("%.2f", r.BWAvg), fmt.Sprintf("%.6f", r.MsgRateAvg)}
					if fmt.Sprint(got) != fmt.Sprint(report) {
						t.Errorf("client's report decodes as %v; the server printed %v", got, report)
					}
					checkReport(t, r)
				}
			}
			if tc.roce {
				var ca, sa []qpAddr
				for i := range cl.dests {
					ca = append(ca, qpAddr{cl.dests[i].QPN, cl.dests[i].PSN, cl.dests[i].GID, cl.dests[i].RKey, cl.dests[i].VAddr})
					sa = append(sa, qpAddr{sv.dests[i].QPN, sv.dests[i].PSN, sv.dests[i].GID, sv.dests[i].RKey, sv.dests[i].VAddr})
				}
				checkRoCEPairs(t, c, ca, sa)
			}
			replayPerftest(t, c, tc.script, cl, sv)
		})
	}
}
