package mad

import (
	"bytes"
	"encoding/binary"
	"path/filepath"
	"testing"

	"github.com/vrnic/vrnicd/transport/wire/rocelayers/rocetest"
)

// Every CM MAD kernel rdma_cm sent in rdma_cm_rping.pcap decodes, and
// encoding the decoded header and message gives back its 256 bytes: no
// field is lost, moved or widened, and reserved bits are zero as sent.
func TestGoldenRpingMADsReencode(t *testing.T) {
	dir, err := rocetest.Dir()
	if err != nil {
		t.Fatal(err)
	}
	frames, err := rocetest.ReadFrames(filepath.Join(dir, "rdma_cm_rping.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	// Ethernet, IPv4 without options, UDP 4791, BTH, DETH, then the MAD.
	const off = 14 + 20 + 8 + 12 + 8
	var got []uint16
	for _, f := range frames {
		d := f.Data
		if len(d) < off+Size || d[14] != 0x45 || d[23] != 17 || binary.BigEndian.Uint16(d[36:]) != 4791 ||
			d[42] != 0x64 || d[47] != 0 || d[48] != 0 || d[49] != 1 { // UD SEND_ONLY to QP1
			continue
		}
		b := d[off : off+Size]
		h, m, err := Decode(b)
		if err != nil || m == nil {
			t.Fatalf("frame %d: %v", f.N, err)
		}
		if h.BaseVersion != BaseVersion || h.MgmtClass != ClassCM || h.ClassVersion != CMClassVersion || h.Method != MethodSend {
			t.Errorf("frame %d: header %+v", f.N, h)
		}
		if re := AppendCM(nil, h, m); !bytes.Equal(re, b) {
			t.Errorf("frame %d %s: re-encoded\n got %x\nwant %x", f.N, AttrName(ClassCM, h.AttributeID), re, b)
		}
		got = append(got, h.AttributeID)
	}
	want := []uint16{AttrConnectRequest, AttrConnectReply, AttrReadyToUse, AttrDisconnectRequest, AttrDisconnectReply}
	if len(got) != len(want) {
		t.Fatalf("CM MADs %x, want %x", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("MAD %d is %#x, want %#x", i, got[i], want[i])
		}
	}
}
