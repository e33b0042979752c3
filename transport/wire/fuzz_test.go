package wire

import (
	"bytes"
	"testing"
)

func addGoldenSeeds(f *testing.F, ipToo bool) {
	for _, path := range goldenFiles(f) {
		for _, pk := range readRoCE(f, path) {
			if ipToo {
				f.Add(bytes.Clone(pk.ip))
			} else {
				f.Add(bytes.Clone(pk.roce))
			}
		}
	}
}

// FuzzParse: Parse never panics, its views stay inside the input and add up
// to it, and re-encoding the decoded fields decodes to the same fields.
func FuzzParse(f *testing.F) {
	addGoldenSeeds(f, false)
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Packet
		if err := p.Parse(b); err != nil {
			return
		}
		if got := p.Op.HdrLen + len(p.Payload) + len(p.Pad) + len(p.ICRC); got != len(b) {
			t.Fatalf("views cover %d bytes of %d", got, len(b))
		}
		if len(p.Pad) != int(p.BTH.PadCnt()) || len(p.ICRC) != ICRCLen {
			t.Fatalf("pad %d (PadCnt %d), icrc %d", len(p.Pad), p.BTH.PadCnt(), len(p.ICRC))
		}
		fields := p.Fields()
		out := make([]byte, fields.EncodedLen())
		if n := fields.Encode(out); n != len(out) {
			t.Fatalf("Encode wrote %d of %d", n, len(out))
		}
		var q Packet
		if err := q.Parse(out); err != nil {
			t.Fatalf("re-encoded packet does not parse: %v", err)
		}
		g := q.Fields()
		// Encode derives PadCnt from the payload; the decoded PadCnt of a
		// hostile packet may claim anything the length allows.
		fields.BTH.PadCnt = PadFor(len(fields.Payload))
		if g.BTH != fields.BTH || g.RETH != fields.RETH || g.AETH != fields.AETH || g.DETH != fields.DETH ||
			g.AtomicETH != fields.AtomicETH || g.AtomicAckETH != fields.AtomicAckETH || g.Imm != fields.Imm ||
			g.IETH != fields.IETH || g.FETH != fields.FETH || !bytes.Equal(g.Payload, fields.Payload) {
			t.Fatalf("round trip changed fields\n got %+v\nwant %+v", g, fields)
		}
	})
}

// FuzzICRC: ICRC never panics, leaves its input as it found it, and a packet
// that PutICRC sealed verifies.
func FuzzICRC(f *testing.F) {
	addGoldenSeeds(f, true)
	f.Fuzz(func(t *testing.T, ip []byte) {
		orig := bytes.Clone(ip)
		if _, err := ICRC(ip); err != nil {
			return
		}
		if !bytes.Equal(ip, orig) {
			t.Fatal("ICRC changed its input")
		}
		if err := PutICRC(ip); err != nil {
			t.Fatal(err)
		}
		if err := VerifyICRC(ip); err != nil {
			t.Fatalf("sealed packet does not verify: %v", err)
		}
	})
}
