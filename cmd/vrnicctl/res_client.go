package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// quotaNames name Limits' fields, in its order, in res client's table and
// JSON.
var quotaNames = []string{"pd", "cq", "qp", "srq", "mr", "mw", "ah", "mem", "mem_bytes", "mr_bytes", "mcast"}

// quotaValues are l's fields in quotaNames' order.
func quotaValues(l verbs.Limits) []uint64 {
	return []uint64{uint64(l.MaxPD), uint64(l.MaxCQ), uint64(l.MaxQP), uint64(l.MaxSRQ), uint64(l.MaxMR),
		uint64(l.MaxMW), uint64(l.MaxAH), uint64(l.MaxMem), l.MaxMemBytes, l.MaxMRBytes, uint64(l.MaxMcast)}
}

// quotaMap is l as a JSON object's fields.
func quotaMap(l verbs.Limits) map[string]uint64 {
	m := map[string]uint64{}
	for i, v := range quotaValues(l) {
		m[quotaNames[i]] = v
	}
	return m
}

// sizeText is a byte count in IEC units, exact to one decimal
// (4294967296: 4G), as quotas are usually round.
func sizeText(n uint64) string {
	units := []string{"", "K", "M", "G", "T", "P"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return strings.TrimSuffix(strconv.FormatFloat(v, 'f', 1, 64), ".0") + units[i]
}

// quotaCells are "used/limit" for each quota, bytes in IEC units.
func quotaCells(used, limit verbs.Limits) []string {
	u, l := quotaValues(used), quotaValues(limit)
	cells := make([]string, len(u))
	for i := range u {
		if strings.HasSuffix(quotaNames[i], "_bytes") {
			cells[i] = sizeText(u[i]) + "/" + sizeText(l[i])
		} else {
			cells[i] = fmt.Sprintf("%d/%d", u[i], l[i])
		}
	}
	return cells
}

// users are the uids of cs, each once, in the order they first come.
func users(cs []verbs.ClientInfo) []verbs.ClientInfo {
	var out []verbs.ClientInfo
	for _, c := range cs {
		if !slices.ContainsFunc(out, func(u verbs.ClientInfo) bool { return u.UID == c.UID }) {
			out = append(out, c)
		}
	}
	return out
}

// clientsText prints one line per connection with its quotas as
// used/limit, then one per uid with what all its connections hold against
// the uid's quotas.
func clientsText(cs []verbs.ClientInfo, w io.Writer) error {
	head := []string{"CLIENT", "PID", "COMM", "UID"}
	for _, n := range quotaNames {
		head = append(head, strings.ToUpper(n))
	}
	rows := [][]string{head}
	for _, c := range cs {
		name := comm(c.Owner)
		if name == "" {
			name = "-"
		}
		row := []string{strconv.FormatUint(uint64(c.ID), 10), strconv.Itoa(c.Owner), name, strconv.Itoa(c.UID)}
		rows = append(rows, append(row, quotaCells(c.Used, c.Limit)...))
	}
	for _, u := range users(cs) {
		row := []string{"uid", "-", "-", strconv.Itoa(u.UID)}
		rows = append(rows, append(row, quotaCells(u.UserUsed, u.UserLimit)...))
	}
	return writeTable(w, rows)
}

type jsonQuota struct {
	Used  map[string]uint64 `json:"used"`
	Limit map[string]uint64 `json:"limit"`
}

// clientsJSON writes {"clients": [...], "users": [...]}: each
// connection's quotas, and each uid's.
func clientsJSON(cs []verbs.ClientInfo, w io.Writer) error {
	type client struct {
		Client uint32 `json:"client"`
		PID    int    `json:"pid"`
		Comm   string `json:"comm"`
		UID    int    `json:"uid"`
		jsonQuota
	}
	type user struct {
		UID int `json:"uid"`
		jsonQuota
	}
	out := struct {
		Clients []client `json:"clients"`
		Users   []user   `json:"users"`
	}{Clients: []client{}, Users: []user{}}
	for _, c := range cs {
		out.Clients = append(out.Clients, client{c.ID, c.Owner, comm(c.Owner), c.UID, jsonQuota{quotaMap(c.Used), quotaMap(c.Limit)}})
	}
	for _, u := range users(cs) {
		out.Users = append(out.Users, user{u.UID, jsonQuota{quotaMap(u.UserUsed), quotaMap(u.UserLimit)}})
	}
	return writeJSON(w, out)
}
