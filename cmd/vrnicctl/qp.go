package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

func init() {
	register(&command{
		Name:    "qp",
		Args:    "[--json] [--socket PATH]",
		Summary: "list the device's QPs: number, type, state, peer QPN and address, PSNs, send window and round trip, outstanding send WQEs, owner pid and process",
		NArgs:   0,
		Setup: func(fs *flag.FlagSet) runFunc {
			asJSON := fs.Bool("json", false, `print one JSON object: {"qps": [{"qpn": N, "type": "RC", "state": "RTS", ...}]}`)
			return withDevice(fs, func(d *verbs.Device, stdout io.Writer) error {
				qps, err := d.ListQPs()
				if err != nil {
					return err
				}
				if *asJSON {
					return qpJSON(qps, stdout)
				}
				return qpText(qps, stdout)
			})
		},
	})
}

// jsonQP is one QP in qp --json.
type jsonQP struct {
	QPN         uint32 `json:"qpn"`
	Type        string `json:"type"`
	State       string `json:"state"`
	DestQPN     uint32 `json:"dest_qpn"`
	SendPSN     uint32 `json:"send_psn"`
	CompPSN     uint32 `json:"comp_psn"`
	RecvPSN     uint32 `json:"recv_psn"`
	Outstanding int    `json:"outstanding"`
	PID         int    `json:"pid"`
	Comm        string `json:"comm"`           // the owner's process name ("" if unknown)
	Peer        string `json:"peer,omitempty"` // RC/UC: the peer's address
	Window      int    `json:"window,omitempty"`
	SRTTUS      int64  `json:"srtt_us,omitempty"`
}

func qpJSON(qps []verbs.QPInfo, w io.Writer) error {
	out := struct {
		QPs []jsonQP `json:"qps"`
	}{QPs: make([]jsonQP, 0, len(qps))}
	for _, q := range qps {
		j := jsonQP{QPN: q.QPN, Type: q.Type.String(), State: q.State.String(), DestQPN: q.DestQPN,
			SendPSN: q.SendPSN, CompPSN: q.CompPSN, RecvPSN: q.RecvPSN, Outstanding: q.Outstanding, PID: q.Owner,
			Comm: comm(q.Owner), Window: q.Window, SRTTUS: q.SRTT.Microseconds()}
		if q.Peer.IsValid() {
			j.Peer = q.Peer.String()
		}
		out.QPs = append(out.QPs, j)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// qpText prints a header and one line per QP; QPNs and PSNs in hex as the
// pingpong tools print them, the peer as "-" for UD (it has none), the
// window and round trip of RC QPs.
func qpText(qps []verbs.QPInfo, w io.Writer) error {
	b := bufio.NewWriter(w)
	const f = "%-8s %-4s %-5s %-8s %-15s %-8s %-8s %-8s %6s %8s %11s %7s %s\n"
	fmt.Fprintf(b, f, "QPN", "TYPE", "STATE", "DEST_QPN", "PEER", "SQ_PSN", "COMP_PSN", "RQ_PSN", "WINDOW", "SRTT_US",
		"OUTSTANDING", "PID", "COMM")
	hex := func(v uint32) string { return fmt.Sprintf("0x%06x", v) }
	for _, q := range qps {
		dest, peer, win, rtt := hex(q.DestQPN), "-", "-", "-"
		if q.Type == verbs.QPTypeUD {
			dest = "-"
		}
		if q.Peer.IsValid() {
			peer = q.Peer.String()
		}
		if q.Type == verbs.QPTypeRC {
			win = strconv.Itoa(q.Window)
			if q.SRTT > 0 {
				rtt = strconv.FormatInt(q.SRTT.Microseconds(), 10)
			}
		}
		c := comm(q.Owner)
		if c == "" {
			c = "-"
		}
		fmt.Fprintf(b, f, hex(q.QPN), q.Type, q.State, dest, peer, hex(q.SendPSN), hex(q.CompPSN), hex(q.RecvPSN), win, rtt,
			strconv.Itoa(q.Outstanding), strconv.Itoa(q.Owner), c)
	}
	return b.Flush()
}

// comm is a process's name (/proc/PID/comm), "" when it cannot be read (it
// has gone, or lives in another PID namespace).
func comm(pid int) string {
	if pid <= 0 {
		return ""
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
