package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

func init() {
	register(&command{
		Name:    "res",
		Args:    "[pd|mr|mw|cq|qp|srq|ah|client] [--json] [--socket PATH]",
		Summary: "list what the device holds, as rdma resource show: counts by kind, or every object of one kind with its owner pid and process, keys and sizes; client: each connection's quotas, used and limit",
		NArgs:   -1,
		Setup: func(fs *flag.FlagSet) runFunc {
			asJSON := fs.Bool("json", false, `print one JSON object: {"device": NAME, "counts": {"pd": N, ...}}, {"mr": [{"client": N, "handle": N, "pid": N, "comm": "...", "lkey": N, ...}]} for one kind, {"clients": [...], "users": [...]} for client`)
			run := withDeviceArgs(fs, func(d *verbs.Device, args []string, stdout io.Writer) error {
				return res(d, args, *asJSON, stdout)
			})
			return func(args []string, stdout, stderr io.Writer) error {
				switch {
				case len(args) > 1:
					return &usageError{msg: fmt.Sprintf("one object kind at most, got %q", args)}
				case len(args) == 1 && args[0] != "client" && resKind(args[0]) == 0:
					return &usageError{msg: fmt.Sprintf("unknown object kind %q: pd, mr, mw, cq, qp, srq, ah or client", args[0])}
				}
				return run(args, stdout, stderr)
			}
		},
	})
}

// resKind is the kind a name names, 0 for none.
func resKind(name string) verbs.ResourceKind {
	for _, k := range verbs.ResourceKinds {
		if k.String() == name {
			return k
		}
	}
	return 0
}

// res prints the summary, one kind's objects or the clients.
func res(d *verbs.Device, args []string, asJSON bool, w io.Writer) error {
	switch {
	case len(args) == 0:
		return resSummary(d, asJSON, w)
	case args[0] == "client":
		cs, err := d.Clients()
		if err != nil {
			return err
		}
		if asJSON {
			return clientsJSON(cs, w)
		}
		return clientsText(cs, w)
	}
	k := resKind(args[0])
	rs, err := d.Resources(k)
	if err != nil {
		return err
	}
	if asJSON {
		return resJSON(k, rs, w)
	}
	return resText(k, rs, w)
}

// resSummary prints how many objects of each kind the device holds, and
// its clients, on one line as rdma resource show does ("vrnic0: pd 1 mr 2
// ... client 3"; vrnicctl's own connection is one of the clients).
func resSummary(d *verbs.Device, asJSON bool, w io.Writer) error {
	names := make([]string, 0, len(verbs.ResourceKinds)+1)
	counts := map[string]int{}
	for _, k := range verbs.ResourceKinds {
		rs, err := d.Resources(k)
		if err != nil {
			return err
		}
		names, counts[k.String()] = append(names, k.String()), len(rs)
	}
	cs, err := d.Clients()
	if err != nil {
		return err
	}
	names, counts["client"] = append(names, "client"), len(cs)
	if asJSON {
		return writeJSON(w, struct {
			Device string         `json:"device"`
			Counts map[string]int `json:"counts"`
		}{d.Name(), counts})
	}
	var b strings.Builder
	b.WriteString(d.Name() + ":")
	for _, n := range names {
		fmt.Fprintf(&b, " %s %d", n, counts[n])
	}
	_, err = fmt.Fprintln(w, b.String())
	return err
}

// writeJSON writes v as one line.
func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// resCol is one column of a kind's table, and the key of the same field
// in its JSON objects. val is a number or a string; hex > 0 prints a
// number as 0x and that many hex digits (JSON keeps the number).
type resCol struct {
	head, key string
	val       func(r *verbs.Resource) any
	hex       int
}

var (
	colClient = resCol{"CLIENT", "client", func(r *verbs.Resource) any { return r.Client }, 0}
	colHandle = resCol{"HANDLE", "handle", func(r *verbs.Resource) any { return r.Handle }, 0}
	colPD     = resCol{"PD", "pd", func(r *verbs.Resource) any { return r.PD }, 0}
	colLKey   = resCol{"LKEY", "lkey", func(r *verbs.Resource) any { return r.LKey }, 8}
	colRKey   = resCol{"RKEY", "rkey", func(r *verbs.Resource) any { return r.RKey }, 8}
	colIOVA   = resCol{"IOVA", "iova", func(r *verbs.Resource) any { return r.IOVA }, 1}
	colLength = resCol{"LENGTH", "length", func(r *verbs.Resource) any { return r.Length }, 0}
	colAccess = resCol{"ACCESS", "access", func(r *verbs.Resource) any { return r.Access.String() }, 0}
	colUsers  = resCol{"USERS", "users", func(r *verbs.Resource) any { return r.Users }, 0}
	colMaxWR  = resCol{"MAX_WR", "max_wr", func(r *verbs.Resource) any { return r.MaxWR }, 0}
	colMaxSGE = resCol{"MAX_SGE", "max_sge", func(r *verbs.Resource) any { return r.MaxSGE }, 0}
	colDest   = resCol{"DEST", "dest", func(r *verbs.Resource) any { return addrText(r.Dest, "") }, 0}
)

// resCols are each kind's columns between the handle and the owner.
var resCols = map[verbs.ResourceKind][]resCol{
	verbs.ResPD: nil,
	verbs.ResMR: {colPD, colLKey, colRKey, colIOVA, colLength, colAccess,
		{"MWS", "bound_mws", func(r *verbs.Resource) any { return r.Users }, 0}},
	verbs.ResMW: {colPD, {"TYPE", "type", func(r *verbs.Resource) any { return mwTypeName(r.MWType) }, 0}, colRKey,
		colIOVA, colLength, colAccess, {"QPN", "qpn", func(r *verbs.Resource) any { return r.QPN }, 6}},
	verbs.ResCQ: {{"CQE", "cqe", func(r *verbs.Resource) any { return r.MaxWR }, 0}, colUsers},
	verbs.ResQP: {{"QPN", "qpn", func(r *verbs.Resource) any { return r.QPN }, 6},
		{"TYPE", "type", func(r *verbs.Resource) any { return r.QPType.String() }, 0},
		{"STATE", "state", func(r *verbs.Resource) any { return r.State.String() }, 0}, colPD,
		{"SQ_WR", "max_send_wr", func(r *verbs.Resource) any { return r.MaxWR }, 0},
		{"RQ_WR", "max_recv_wr", func(r *verbs.Resource) any { return r.MaxRecvWR }, 0},
		{"SQ_SGE", "max_send_sge", func(r *verbs.Resource) any { return r.MaxSGE }, 0},
		{"SEND_CQ", "send_cq", func(r *verbs.Resource) any { return r.SendCQ }, 0},
		{"RECV_CQ", "recv_cq", func(r *verbs.Resource) any { return r.RecvCQ }, 0},
		{"SRQ", "srq", func(r *verbs.Resource) any { return r.SRQ }, 0},
		{"PEER", "peer", func(r *verbs.Resource) any { return addrText(r.Dest, "") }, 0}},
	verbs.ResSRQ: {{"SRQN", "srqn", func(r *verbs.Resource) any { return r.QPN }, 6}, colPD, colMaxWR, colMaxSGE, colUsers},
	verbs.ResAH: {colPD, colDest, {"SGID_INDEX", "sgid_index", func(r *verbs.Resource) any { return r.SGIDIndex }, 0},
		{"HOP_LIMIT", "hop_limit", func(r *verbs.Resource) any { return r.HopLimit }, 0}},
}

func mwTypeName(t int) string {
	if t == 2 {
		return "2B"
	}
	return strconv.Itoa(t)
}

// columns are all of kind k's columns, the owner's last.
func columns(k verbs.ResourceKind) []resCol {
	cols := append([]resCol{colClient, colHandle}, resCols[k]...)
	return append(cols, resCol{"PID", "pid", func(r *verbs.Resource) any { return r.Owner }, 0},
		resCol{"COMM", "comm", func(r *verbs.Resource) any { return comm(r.Owner) }, 0})
}

// cellText is a column's value in the table: hex where the column says,
// "-" for an empty string and for keys withheld.
func cellText(c resCol, r *verbs.Resource) string {
	v := c.val(r)
	if r.KeysHidden && (c.key == "lkey" || c.key == "rkey" || c.key == "iova") {
		return "-"
	}
	if s, ok := v.(string); ok {
		if s == "" {
			return "-"
		}
		return s
	}
	if c.hex > 0 {
		return fmt.Sprintf("0x%0*x", c.hex, v)
	}
	return fmt.Sprint(v)
}

// resText prints a header and one line per object, columns aligned.
func resText(k verbs.ResourceKind, rs []verbs.Resource, w io.Writer) error {
	cols := columns(k)
	rows := [][]string{make([]string, len(cols))}
	for i, c := range cols {
		rows[0][i] = c.head
	}
	for i := range rs {
		row := make([]string, len(cols))
		for j, c := range cols {
			row[j] = cellText(c, &rs[i])
		}
		rows = append(rows, row)
	}
	return writeTable(w, rows)
}

// writeTable prints rows with each column as wide as its widest cell,
// the last one unpadded.
func writeTable(w io.Writer, rows [][]string) error {
	width := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, cell := range row {
			width[i] = max(width[i], len(cell))
		}
	}
	b := bufio.NewWriter(w)
	for _, row := range rows {
		for i, cell := range row {
			if i == len(row)-1 {
				b.WriteString(cell + "\n")
				break
			}
			b.WriteString(cell + strings.Repeat(" ", width[i]-len(cell)+1))
		}
	}
	return b.Flush()
}

// resJSON writes {"KIND": [{KEY: V, ...}]}, each object's keys in the
// table's order; withheld keys are null and "keys_hidden" is true.
func resJSON(k verbs.ResourceKind, rs []verbs.Resource, w io.Writer) error {
	cols := columns(k)
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, `{%q:[`, k.String())
	for i := range rs {
		if i > 0 {
			b.WriteByte(',')
		}
		r := &rs[i]
		es := slices.Clone(cols)
		if k == verbs.ResMR || k == verbs.ResMW {
			es = append(es, resCol{key: "keys_hidden", val: func(r *verbs.Resource) any { return r.KeysHidden }})
		}
		writeJSONObject(b, "", es, func(c resCol) (string, string) {
			if r.KeysHidden && (c.key == "lkey" || c.key == "rkey" || c.key == "iova") {
				return c.key, "null"
			}
			v, _ := json.Marshal(c.val(r))
			return c.key, string(v)
		})
	}
	b.WriteString("]}\n")
	return b.Flush()
}
