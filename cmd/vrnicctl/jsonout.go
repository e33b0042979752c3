package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
)

// countersJSON writes the one object a line of stat --json and watch's
// --json: head (leading fields, each with its comma), then
// "device": {NAME: V, ...} and "qps": [{"qpn": N, NAME: V, ...}], the keys
// in the daemon's order (encoding/json would sort a map's). qp gives the
// i-th of nqp QPs' number and entries, kv an entry's name and its value
// already encoded.
func countersJSON[T any](w io.Writer, head string, device []T, nqp int, qp func(i int) (uint32, []T), kv func(T) (string, string)) error {
	b := bufio.NewWriter(w)
	b.WriteString("{" + head + `"device":`)
	writeJSONObject(b, "", device, kv)
	b.WriteString(`,"qps":[`)
	for i := range nqp {
		if i > 0 {
			b.WriteByte(',')
		}
		qpn, es := qp(i)
		writeJSONObject(b, fmt.Sprintf(`"qpn":%d`, qpn), es, kv)
	}
	b.WriteString("]}\n")
	return b.Flush()
}

// writeJSONObject writes {first, NAME: V, ...} in the entries' order.
func writeJSONObject[T any](b *bufio.Writer, first string, es []T, kv func(T) (string, string)) {
	b.WriteByte('{')
	b.WriteString(first)
	for i, e := range es {
		if i > 0 || first != "" {
			b.WriteByte(',')
		}
		name, v := kv(e)
		k, _ := json.Marshal(name)
		b.Write(k)
		b.WriteByte(':')
		b.WriteString(v)
	}
	b.WriteByte('}')
}
