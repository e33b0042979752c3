// Package rocetest gives tests the golden RoCEv2 captures of testdata/roce
// (made by kernel rxe, real ICRCs) and the per-packet listing of their
// README, so decoders are checked against what the capture tooling and
// tshark saw rather than against numbers copied into each test; and
// BuildFrame, the one builder of RoCEv2 frames for tests.
package rocetest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/google/gopacket"
	"github.com/google/gopacket/pcapgo"
)

// Dir is the absolute path of testdata/roce at the module root, found by
// walking up from the working directory (a test's package directory) to
// go.mod, so tests in any package can use it.
func Dir() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			break
		}
		up := filepath.Dir(d)
		if up == d {
			return "", errors.New("rocetest: no go.mod above the working directory")
		}
		d = up
	}
	d = filepath.Join(d, "testdata", "roce")
	if _, err := os.Stat(filepath.Join(d, "README.md")); err != nil {
		return "", fmt.Errorf("rocetest: golden captures not found: %w", err)
	}
	return d, nil
}

// Files lists the captures (*.pcap) in Dir, sorted.
func Files() ([]string, error) {
	d, err := Dir()
	if err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(d, "*.pcap"))
	if err == nil && len(files) == 0 {
		err = fmt.Errorf("rocetest: no captures in %s", d)
	}
	return files, err
}

// Frame is one frame of a capture; N counts from 1 as tshark does.
type Frame struct {
	N    int
	Data []byte
	CI   gopacket.CaptureInfo
}

// ReadFrames reads every frame of a classic pcap.
func ReadFrames(path string) ([]Frame, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []Frame
	for n := 1; ; n++ {
		data, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s frame %d: %w", path, n, err)
		}
		out = append(out, Frame{n, data, ci})
	}
}

// Line is one RoCEv2 packet of the README listing.
type Line struct {
	Frame  int
	Src    string
	Sport  int
	Dst    string
	Opcode string // as wire.Opcode names it (the README abbreviates RDMA ones)
	QP     uint32
	PSN    uint32
	Ack    bool
	Len    int    // bytes after the BTH without the ICRC: headers, payload, pad
	ICRC   string // the four ICRC bytes in wire order, hex
	OK     bool
	Text   string // the README line as written
}

// Capture is a README section.
type Capture struct {
	Lines          []Line
	Count, OK, Bad int                   // the summary line
	Tables         [][]map[string]string // tab-separated tables (tshark output), row by row
}

var (
	sectionRE = regexp.MustCompile(`^## (\S+\.pcap)$`)
	lineRE    = regexp.MustCompile(`^#(\d+) (\S+):(\d+) > (\S+) (\S+) qp=0x([0-9a-f]{6}) psn=(\d+) ack=([01]) len=(\d+) icrc=([0-9a-f]{8}) (ok|bad)$`)
	countRE   = regexp.MustCompile(`^(\d+) RoCEv2 packets, (\d+) ICRC ok, (\d+) bad$`)
)

// WireOpcode maps the README's opcode names (rxe-peer's pcap-roce writes
// RC_WRITE_FIRST, RC_READ_REQUEST) to the wire table's.
func WireOpcode(s string) string {
	for _, p := range []string{"RC_", "UC_"} {
		for _, op := range []string{"WRITE_", "READ_"} {
			if strings.HasPrefix(s, p+op) {
				return p + "RDMA_" + s[len(p):]
			}
		}
	}
	return s
}

// Listing parses the README of Dir into one Capture per file name.
func Listing() (map[string]*Capture, error) {
	d, err := Dir()
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(d, "README.md"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]*Capture{}
	var cur *Capture
	var header []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		s := sc.Text()
		if m := sectionRE.FindStringSubmatch(s); m != nil {
			cur = &Capture{}
			out[m[1]] = cur
			header = nil
			continue
		}
		if cur == nil {
			continue
		}
		if m := lineRE.FindStringSubmatch(s); m != nil {
			n, _ := strconv.Atoi(m[1])
			sport, _ := strconv.Atoi(m[3])
			qp, _ := strconv.ParseUint(m[6], 16, 32)
			psn, _ := strconv.ParseUint(m[7], 10, 32)
			l, _ := strconv.Atoi(m[9])
			cur.Lines = append(cur.Lines, Line{Frame: n, Src: m[2], Sport: sport, Dst: m[4],
				Opcode: WireOpcode(m[5]), QP: uint32(qp), PSN: uint32(psn), Ack: m[8] == "1",
				Len: l, ICRC: m[10], OK: m[11] == "ok", Text: s})
			continue
		}
		if m := countRE.FindStringSubmatch(s); m != nil {
			cur.Count, _ = strconv.Atoi(m[1])
			cur.OK, _ = strconv.Atoi(m[2])
			cur.Bad, _ = strconv.Atoi(m[3])
			continue
		}
		switch {
		case strings.HasPrefix(s, "frame.number\t"):
			header = strings.Split(s, "\t")
			cur.Tables = append(cur.Tables, nil)
		case header != nil && strings.Contains(s, "\t"):
			row := map[string]string{}
			for i, v := range strings.Split(s, "\t") {
				if i < len(header) && v != "" {
					row[header[i]] = v
				}
			}
			t := &cur.Tables[len(cur.Tables)-1]
			*t = append(*t, row)
		case s == "```":
			header = nil
		}
	}
	return out, sc.Err()
}
