package rocetest

import (
	"path/filepath"
	"testing"
)

// Every capture has a README section whose listing agrees with its summary.
func TestListingCoversEveryCapture(t *testing.T) {
	files, err := Files()
	if err != nil {
		t.Fatal(err)
	}
	l, err := Listing()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		c := l[filepath.Base(f)]
		if c == nil {
			t.Errorf("%s: no README section", filepath.Base(f))
			continue
		}
		if len(c.Lines) == 0 || len(c.Lines) != c.Count || c.OK != c.Count || c.Bad != 0 {
			t.Errorf("%s: %d lines, summary %d/%d/%d", filepath.Base(f), len(c.Lines), c.Count, c.OK, c.Bad)
		}
		frames, err := ReadFrames(f)
		if err != nil {
			t.Fatal(err)
		}
		if last := c.Lines[len(c.Lines)-1].Frame; last > len(frames) {
			t.Errorf("%s: listing names frame %d of %d", filepath.Base(f), last, len(frames))
		}
	}
	if WireOpcode("RC_WRITE_FIRST") != "RC_RDMA_WRITE_FIRST" || WireOpcode("RC_READ_RESPONSE_ONLY") != "RC_RDMA_READ_RESPONSE_ONLY" ||
		WireOpcode("RC_SEND_ONLY") != "RC_SEND_ONLY" {
		t.Error("WireOpcode")
	}
}
