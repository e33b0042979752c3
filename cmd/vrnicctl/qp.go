package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

func init() {
	register(&command{
		Name:    "qp",
		Args:    "[--json] [--socket PATH]",
		Summary: "list the device's QPs: number, type, state, peer, PSNs, outstanding send WQEs, owner pid",
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
}

func qpJSON(qps []verbs.QPInfo, w io.Writer) error {
	out := struct {
		QPs []jsonQP `json:"qps"`
	}{QPs: make([]jsonQP, 0, len(qps))}
	for _, q := range qps {
		out.QPs = append(out.QPs, jsonQP{QPN: q.QPN, Type: q.Type.String(), State: q.State.String(), DestQPN: q.DestQPN,
			SendPSN: q.SendPSN, CompPSN: q.CompPSN, RecvPSN: q.RecvPSN, Outstanding: q.Outstanding, PID: q.Owner})
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// qpText prints a header and one line per QP; QPNs and PSNs in hex as the
// pingpong tools print them, the peer as "-" for UD (it has none).
func qpText(qps []verbs.QPInfo, w io.Writer) error {
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, "%-8s %-4s %-5s %-8s %-8s %-8s %-8s %11s %7s\n",
		"QPN", "TYPE", "STATE", "DEST_QPN", "SQ_PSN", "COMP_PSN", "RQ_PSN", "OUTSTANDING", "PID")
	hex := func(v uint32) string { return fmt.Sprintf("0x%06x", v) }
	for _, q := range qps {
		dest := hex(q.DestQPN)
		if q.Type == verbs.QPTypeUD {
			dest = "-"
		}
		fmt.Fprintf(b, "%-8s %-4s %-5s %-8s %-8s %-8s %-8s %11d %7d\n",
			hex(q.QPN), q.Type, q.State, dest, hex(q.SendPSN), hex(q.CompPSN), hex(q.RecvPSN), q.Outstanding, q.Owner)
	}
	return b.Flush()
}
