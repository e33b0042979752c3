package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/netip"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

func init() {
	register(&command{
		Name:    "cm",
		Args:    "[--json] [--socket PATH]",
		Summary: "list the daemon's rdma_cm connections and listeners: state, comm IDs, service ID, addresses, QPNs, owner pid",
		NArgs:   0,
		Setup: func(fs *flag.FlagSet) runFunc {
			asJSON := fs.Bool("json", false, `print one JSON object: {"cm": [{"state": "ESTABLISHED", "local_id": N, "service_id": "0x...", ...}]}`)
			return withDevice(fs, func(d *verbs.Device, stdout io.Writer) error {
				es, err := d.ListCM()
				if err != nil {
					return err
				}
				if *asJSON {
					return cmJSON(es, stdout)
				}
				return cmText(es, stdout)
			})
		},
	})
}

// jsonCM is one connection or listener in cm --json.
type jsonCM struct {
	State     string `json:"state"`
	Listener  bool   `json:"listener"`
	Active    bool   `json:"active"`
	LocalID   uint32 `json:"local_id"`
	RemoteID  uint32 `json:"remote_id"`
	ServiceID string `json:"service_id"`
	PortSpace string `json:"port_space"`
	Port      uint16 `json:"port"`
	Local     string `json:"local_addr"`
	Peer      string `json:"peer_addr"`
	QPN       uint32 `json:"qpn"`
	RemoteQPN uint32 `json:"remote_qpn"`
	PID       int    `json:"pid"`
}

// portSpaceName names rdma_cm's port spaces (rdma_cm.h enum rdma_ucm_port_space).
func portSpaceName(ps uint16) string {
	switch ps {
	case 0x0106:
		return "TCP"
	case 0x0111:
		return "UDP"
	case 0x013F:
		return "IB"
	case 0x0002:
		return "IPOIB"
	}
	return fmt.Sprintf("%#04x", ps)
}

func addrText(a netip.Addr, any string) string {
	if !a.IsValid() {
		return any
	}
	return a.String()
}

func cmJSON(es []verbs.CMEntry, w io.Writer) error {
	out := make([]jsonCM, 0, len(es))
	for _, e := range es {
		out = append(out, jsonCM{State: e.State, Listener: e.Listener, Active: e.Active, LocalID: e.LocalID,
			RemoteID: e.RemoteID, ServiceID: fmt.Sprintf("%#x", e.ServiceID), PortSpace: portSpaceName(e.PortSpace()),
			Port: e.Port(), Local: addrText(e.Local, ""), Peer: addrText(e.Peer, ""), QPN: e.QPN, RemoteQPN: e.RemoteQPN,
			PID: e.Owner})
	}
	b, err := json.Marshal(struct {
		CM []jsonCM `json:"cm"`
	}{out})
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// cmText prints a header and one line per entry; IDs and QPNs in hex, a
// listener's missing fields as "-", a wildcard bind address as "*".
func cmText(es []verbs.CMEntry, w io.Writer) error {
	b := bufio.NewWriter(w)
	const f = "%-12s %-10s %-10s %-18s %-9s %-15s %-15s %-8s %-8s %7s\n"
	fmt.Fprintf(b, f, "STATE", "LOCAL_ID", "REMOTE_ID", "SERVICE_ID", "PS:PORT", "LOCAL", "PEER", "QPN", "RQPN", "PID")
	hex := func(v uint32) string { return fmt.Sprintf("0x%08x", v) }
	qpn := func(v uint32) string { return fmt.Sprintf("0x%06x", v) }
	for _, e := range es {
		ps := fmt.Sprintf("%s:%d", portSpaceName(e.PortSpace()), e.Port())
		if e.Listener {
			fmt.Fprintf(b, f, e.State, "-", "-", fmt.Sprintf("%#x", e.ServiceID), ps, addrText(e.Local, "*"), "-", "-", "-", fmt.Sprint(e.Owner))
			continue
		}
		fmt.Fprintf(b, f, e.State, hex(e.LocalID), hex(e.RemoteID), fmt.Sprintf("%#x", e.ServiceID), ps,
			addrText(e.Local, "-"), addrText(e.Peer, "-"), qpn(e.QPN), qpn(e.RemoteQPN), fmt.Sprint(e.Owner))
	}
	return b.Flush()
}
