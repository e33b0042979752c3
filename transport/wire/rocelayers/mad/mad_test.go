package mad

import (
	"bytes"
	"errors"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"testing"
)

var cmAttrs = []uint16{
	AttrConnectRequest, AttrMsgRcptAck, AttrConnectReject, AttrConnectReply, AttrReadyToUse,
	AttrDisconnectRequest, AttrDisconnectReply, AttrServiceIDResReq, AttrServiceIDResReqResp,
}

// fieldMask is encode(decode(all ones)): every bit a field of the message
// owns is 1, every reserved bit 0.
func fieldMask(t testing.TB, attr uint16) []byte {
	t.Helper()
	ones := bytes.Repeat([]byte{0xFF}, CMDataLen)
	m, err := DecodeCM(attr, ones)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, CMDataLen)
	m.Encode(out)
	return out
}

// The reserved bits of each message, counted from the IBA tables (and
// include/rdma/ibta_vol1_c12.h): a field read from the wrong place or
// written with the wrong width changes the count.
func TestReservedBitsMatchSpec(t *testing.T) {
	want := map[uint16]int{
		// byte 4 (8), bytes 24-27 (32); per path: 6 after the flow label,
		// 3 after SubnetLocal, 3 after LocalACKTimeout, less SAPSupported
		// in the alternate path.
		AttrConnectRequest:      8 + 32 + 12 + 11,
		AttrMsgRcptAck:          6 + 3,
		AttrConnectReject:       6 + 1,
		AttrConnectReply:        4,
		AttrReadyToUse:          0,
		AttrDisconnectRequest:   8,
		AttrDisconnectReply:     0,
		AttrServiceIDResReq:     16,
		AttrServiceIDResReqResp: 16 + 8,
	}
	for _, attr := range cmAttrs {
		mask := fieldMask(t, attr)
		zero := 0
		for _, b := range mask {
			zero += 8 - bits.OnesCount8(b)
		}
		if zero != want[attr] {
			t.Errorf("%s: %d reserved bits, want %d (mask %x)", AttrName(ClassCM, attr), zero, want[attr], mask)
		}
	}
}

// Every field at its maximum decodes from all-ones: the widths are right.
func TestAllOnesDecodesToFieldMaxima(t *testing.T) {
	ones := bytes.Repeat([]byte{0xFF}, CMDataLen)
	var req REQ
	if err := req.Decode(ones); err != nil {
		t.Fatal(err)
	}
	if req.LocalQPN != 0xFFFFFF || req.StartingPSN != 0xFFFFFF || req.VendorID != 0xFFFFFF ||
		req.PathMTU != 15 || req.RNRRetryCount != 7 || req.RetryCount != 7 || req.TransportServiceType != 3 ||
		req.RemoteCMResponseTimeout != 31 || req.Primary.FlowLabel != 0xFFFFF || req.Primary.PacketRate != 63 ||
		req.Primary.SL != 15 || req.Alternate.LocalACKTimeout != 31 || !req.SAPSupported || !req.SRQ {
		t.Errorf("REQ from all ones: %+v", req)
	}
	var rep REP
	_ = rep.Decode(ones)
	if rep.LocalQPN != 0xFFFFFF || rep.VendorID != 0xFFFFFF || rep.TargetACKDelay != 31 ||
		rep.FailoverAccepted != 3 || rep.RNRRetryCount != 7 || !rep.SRQ || !rep.EndToEndFlowControl {
		t.Errorf("REP from all ones: %+v", rep)
	}
}

// Fields land where the IBA tables put them.
func TestREQFieldOffsets(t *testing.T) {
	req := REQ{
		LocalCommID: 0xe338f9c2, ServiceID: IPServiceID(PortSpaceTCP, 7174), LocalQPN: 0x1f,
		ResponderResources: 1, InitiatorDepth: 1, RemoteCMResponseTimeout: 20, StartingPSN: 0x294315,
		LocalCMResponseTimeout: 20, RetryCount: 7, PKey: 0xffff, PathMTU: 3, RNRRetryCount: 7, MaxCMRetries: 15,
		Primary: Path{FlowLabel: 0xbe94f, HopLimit: 64, LocalACKTimeout: 19},
	}
	b := make([]byte, CMDataLen)
	req.Encode(b)
	check := func(off int, want ...byte) {
		t.Helper()
		if got := b[off : off+len(want)]; !bytes.Equal(got, want) {
			t.Errorf("byte %d: %x, want %x", off, got, want)
		}
	}
	check(0, 0xe3, 0x38, 0xf9, 0xc2)
	check(8, 0, 0, 0, 0, 0x01, 0x06, 0x1c, 0x06)
	check(32, 0, 0, 0x1f, 1)
	check(39, 1)
	check(43, 0xa0)
	check(44, 0x29, 0x43, 0x15, 0xa7)
	check(48, 0xff, 0xff, 0x37, 0xf0)
	check(88, 0xbe, 0x94, 0xf0, 0x00, 0x00, 0x40, 0x00, 0x98)
}

func TestRandomRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, CMDataLen)
	for _, attr := range cmAttrs {
		mask := fieldMask(t, attr)
		for range 200 {
			for i := range buf {
				buf[i] = byte(r.Uint32())
			}
			m, err := DecodeCM(attr, buf)
			if err != nil {
				t.Fatal(err)
			}
			out := make([]byte, CMDataLen)
			m.Encode(out)
			for i := range out {
				if out[i] != buf[i]&mask[i] {
					t.Fatalf("%s byte %d: encoded %#x, want %#x", AttrName(ClassCM, attr), i, out[i], buf[i]&mask[i])
				}
			}
			m2, _ := DecodeCM(attr, out)
			if !reflect.DeepEqual(m, m2) {
				t.Fatalf("%s: decode(encode(m)) != m\n%+v\n%+v", AttrName(ClassCM, attr), m, m2)
			}
		}
	}
}

func TestEncodeCMWholeMAD(t *testing.T) {
	rtu := &RTU{LocalCommID: 0xe338f9c2, RemoteCommID: 0x7e43f725}
	b := bytes.Repeat([]byte{0xAA}, Size)
	n, err := EncodeCM(b, CMHeader(0x00000002c2f938e3, 0), rtu)
	if err != nil || n != Size {
		t.Fatalf("EncodeCM = %d, %v", n, err)
	}
	want := []byte{1, 7, 2, 3, 0, 0, 0, 0, 0, 0, 0, 2, 0xc2, 0xf9, 0x38, 0xe3, 0, 0x14, 0, 0, 0, 0, 0, 0,
		0xe3, 0x38, 0xf9, 0xc2, 0x7e, 0x43, 0xf7, 0x25}
	if !bytes.Equal(b[:len(want)], want) {
		t.Errorf("MAD starts %x, want %x", b[:len(want)], want)
	}
	if !bytes.Equal(b[len(want):], make([]byte, Size-len(want))) {
		t.Error("private data not zeroed")
	}
	h, m, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if h.AttributeID != AttrReadyToUse || h.TransactionID != 0x00000002c2f938e3 || !reflect.DeepEqual(m, Message(rtu)) {
		t.Errorf("decoded %+v %+v", h, m)
	}
	if _, err := EncodeCM(b[:Size-1], h, rtu); !errors.Is(err, ErrShort) {
		t.Errorf("short buffer: %v", err)
	}
}

func TestDecodeErrors(t *testing.T) {
	if _, _, err := Decode(make([]byte, HeaderLen-1)); !errors.Is(err, ErrShort) {
		t.Errorf("short header: %v", err)
	}
	h := CMHeader(1, AttrConnectRequest)
	b := make([]byte, HeaderLen+CMDataLen-1)
	h.Encode(b)
	if _, _, err := Decode(b); !errors.Is(err, ErrShort) {
		t.Errorf("short REQ: %v", err)
	}
	h.AttributeID = 0x7777
	h.Encode(b)
	if _, _, err := Decode(b); !errors.Is(err, ErrUnknownAttr) {
		t.Errorf("unknown attribute: %v", err)
	}
	h.MgmtClass = ClassSubnAdm
	h.Encode(b)
	if _, m, err := Decode(b); err != nil || m != nil {
		t.Errorf("non-CM MAD: %v %v", m, err)
	}
}

func TestNames(t *testing.T) {
	for attr, want := range map[uint16]string{
		0x10: "ConnectRequest", 0x11: "MsgRcptAck", 0x12: "ConnectReject", 0x13: "ConnectReply",
		0x14: "ReadyToUse", 0x15: "DisconnectRequest", 0x16: "DisconnectReply", 0x99: "0x0099",
	} {
		if got := AttrName(ClassCM, attr); got != want {
			t.Errorf("AttrName(%#x) = %q, want %q", attr, got, want)
		}
	}
	if AttrName(ClassSubnAdm, 0x10) != "0x0010" || MethodName(3) != "Send" || ClassName(7) != "CM" {
		t.Error("names of other classes/methods")
	}
}

func TestCMAHeader(t *testing.T) {
	for _, h := range []CMAHeader{
		{IPVersion: 4, SrcPort: 58775, Src: netip.MustParseAddr("192.0.2.12"), Dst: netip.MustParseAddr("192.0.2.11")},
		{IPVersion: 6, SrcPort: 1, Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("fe80::2")},
	} {
		b := make([]byte, CMAHeaderLen)
		if err := h.Encode(b); err != nil {
			t.Fatal(err)
		}
		got, err := ParseCMAHeader(b)
		if err != nil || got != h {
			t.Errorf("round trip %+v -> %x -> %+v, %v", h, b, got, err)
		}
	}
	b := make([]byte, CMAHeaderLen)
	h := CMAHeader{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("2001:db8::1")}
	if err := h.Encode(b); err == nil {
		t.Error("mixed IP versions encoded")
	}
	if _, err := ParseCMAHeader(b[:10]); !errors.Is(err, ErrShort) {
		t.Errorf("short cma_hdr: %v", err)
	}
	b[1] = 0x50
	if _, err := ParseCMAHeader(b); err == nil {
		t.Error("IP version 5 accepted")
	}
	if sid := IPServiceID(PortSpaceTCP, 0x1c06); sid != 0x0000000001061c06 || !IsIPServiceID(sid) ||
		ServicePort(sid) != 0x1c06 || ServiceProtocol(sid) != 0x06 {
		t.Errorf("service ID %#x", sid)
	}
	if IsIPServiceID(0x0000000002061c06) {
		t.Error("non-IP service ID taken for IP CM")
	}
}

// FuzzCM: no input panics the decoder; encode(decode(b)) is b with the
// reserved bits cleared, and decodes to the same message.
func FuzzCM(f *testing.F) {
	f.Add(uint16(AttrConnectRequest), bytes.Repeat([]byte{0xFF}, CMDataLen))
	f.Add(uint16(AttrConnectReply), make([]byte, CMDataLen))
	f.Add(uint16(AttrConnectReject), []byte{1, 2, 3})
	masks := map[uint16][]byte{}
	for _, a := range cmAttrs {
		masks[a] = fieldMask(f, a)
	}
	f.Fuzz(func(t *testing.T, attr uint16, b []byte) {
		h := CMHeader(7, attr)
		mad := make([]byte, HeaderLen+len(b))
		h.Encode(mad)
		copy(mad[HeaderLen:], b)
		_, m, err := Decode(mad)
		if err != nil {
			if m != nil {
				t.Fatal("message and error")
			}
			return
		}
		mask := masks[attr]
		out := make([]byte, CMDataLen)
		m.Encode(out)
		for i := range out {
			if out[i] != b[i]&mask[i] {
				t.Fatalf("byte %d: %#x, want %#x", i, out[i], b[i]&mask[i])
			}
		}
		m2, err := DecodeCM(attr, out)
		if err != nil || !reflect.DeepEqual(m, m2) {
			t.Fatalf("re-decode: %v", err)
		}
	})
}
