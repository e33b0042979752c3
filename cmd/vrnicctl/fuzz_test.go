package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/gopacket"

	"github.com/vrnic/vrnicd/transport/wire"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/rocetest"
)

// FuzzDecodeFrame: the per-frame decoder never panics (the parser's panic
// recovery is off here, so a panic in any layer surfaces), and what it
// returns marshals and prints.
func FuzzDecodeFrame(f *testing.F) {
	files, err := rocetest.Files()
	if err != nil {
		f.Fatal(err)
	}
	for _, path := range files {
		frames, err := rocetest.ReadFrames(path)
		if err != nil {
			f.Fatal(err)
		}
		for _, fr := range frames {
			f.Add(fr.Data, uint16(0))
		}
	}
	f.Add(opcodeFrame(f, wire.RCFlush, 0, true, true), uint16(0))
	f.Add(opcodeFrame(f, wire.CNP, 0, false, false), uint16(3))
	f.Fuzz(func(t *testing.T, data []byte, cut uint16) {
		d := newFrameDecoder()
		d.parser.IgnorePanic = true
		ci := gopacket.CaptureInfo{CaptureLength: len(data), Length: len(data) + int(cut)}
		rec := d.decode(7, data, ci)
		if rec == nil {
			return
		}
		if rec.Frame != 7 {
			t.Fatalf("frame %d", rec.Frame)
		}
		b, err := json.Marshal(rec)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("invalid JSON %s: %v", b, err)
		}
		if rec.tailInfo != nil && rec.ICRC != "ok" && rec.ICRC != "bad" {
			t.Fatalf("icrc %q", rec.ICRC)
		}
		if cut > 0 && rec.Error == "" {
			t.Fatal("truncated capture without an error")
		}
		if h := rec.human(); strings.Contains(h, "\n") {
			t.Fatalf("text line has a newline: %q", h)
		}
	})
}
