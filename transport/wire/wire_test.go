package wire

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/vrnic/vrnicd/header"
)

// Hand-built packets with known fields. The bytes and the ICRC values were
// produced independently of this package (Python's zlib.crc32 over the masked
// pseudo-header), so these tests do not check the code against itself.
var fixtures = []struct {
	name   string
	hex    string
	icrc   uint32
	fields PacketFields
}{
	{
		name: "ipv4 RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE pad 1",
		hex:  "45020044000040000111f588c000020ac0000214c12312b7003000000b90ffff0000012380abcdef1122334455667788deadbeef0000000301020304616263005eb2c98b",
		icrc: 0x8bc9b25e,
		fields: PacketFields{
			BTH:     BTHFields{Opcode: RCRDMAWriteOnlyWithImm, SE: true, PadCnt: 1, PKey: 0xffff, DestQP: 0x123, AckReq: true, PSN: 0xabcdef},
			RETH:    RETHFields{VA: 0x1122334455667788, RKey: 0xdeadbeef, Length: 3},
			Imm:     0x01020304,
			Payload: []byte("abc"),
		},
	},
	{
		name: "ipv6 UD_SEND_ONLY pad 3 traffic class and flow label set",
		hex:  "6b81234500281140fe800000000000000000000000000001fe800000000000000000000000000002c12312b7002800006430ffff0000001200000001111111110000003468656c6c6f0000003d1bd5ad",
		icrc: 0xadd51b3d,
		fields: PacketFields{
			BTH:     BTHFields{Opcode: UDSendOnly, PadCnt: 3, PKey: 0xffff, DestQP: 0x12, PSN: 1},
			DETH:    DETHFields{QKey: 0x11111111, SrcQP: 0x34},
			Payload: []byte("hello"),
		},
	},
	{
		name: "ipv4 RC_ATOMIC_ACKNOWLEDGE with BECN",
		hex:  "45000038000040004011b696c0000214c000020ac12312b7002400001200ffff4000004200fffffe1f00000501020304050607089a16df1d",
		icrc: 0x1ddf169a,
		fields: PacketFields{
			BTH:          BTHFields{Opcode: RCAtomicAcknowledge, PKey: 0xffff, BECN: true, DestQP: 0x42, PSN: 0xfffffe},
			AETH:         AETHFields{Syndrome: 0x1f, MSN: 5},
			AtomicAckETH: 0x0102030405060708,
		},
	},
}

func TestHandBuiltFixtures(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			ip, err := hex.DecodeString(fx.hex)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ICRC(ip)
			if err != nil || got != fx.icrc {
				t.Fatalf("ICRC = %#08x, %v; want %#08x", got, err, fx.icrc)
			}
			if err := VerifyICRC(ip); err != nil {
				t.Fatal(err)
			}
			off := header.IPv4HeaderLen
			if ip[0]>>4 == 6 {
				off = header.IPv6HeaderLen
			}
			off += header.UDPHeaderLen
			var p Packet
			if err := p.Parse(ip[off:]); err != nil {
				t.Fatal(err)
			}
			f := p.Fields()
			if f.BTH != fx.fields.BTH || f.RETH != fx.fields.RETH || f.DETH != fx.fields.DETH ||
				f.AETH != fx.fields.AETH || f.AtomicAckETH != fx.fields.AtomicAckETH || f.Imm != fx.fields.Imm ||
				!bytes.Equal(f.Payload, fx.fields.Payload) {
				t.Errorf("decoded fields\n got %+v\nwant %+v", f, fx.fields)
			}
			// Encoding the known fields reproduces the transport bytes; the
			// BECN bit is variant, so the ICRC is unaffected by it.
			buf := make([]byte, len(ip))
			copy(buf, ip[:off])
			if n := fx.fields.Encode(buf[off:]); n != len(ip)-off {
				t.Fatalf("Encode wrote %d, want %d", n, len(ip)-off)
			}
			if err := PutICRC(buf); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf, ip) {
				t.Errorf("encoded\n got %x\nwant %x", buf, ip)
			}
		})
	}
}

func TestParseRejectsMalformed(t *testing.T) {
	good, _ := hex.DecodeString(fixtures[0].hex)
	roce := good[header.IPv4HeaderLen+header.UDPHeaderLen:]
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrTruncated},
		{"BTH only, no ICRC", roce[:BTHLen], ErrTruncated},
		{"headers cut", roce[:BTHLen+RETHLen], ErrTruncated},
		{"unknown opcode 0x15", func() []byte { b := bytes.Clone(roce); b[0] = 0x15; return b }(), ErrUnknownOpcode},
		{"RD opcode", func() []byte { b := bytes.Clone(roce); b[0] = 0x44; return b }(), ErrUnknownOpcode},
		{"PadCnt beyond payload", func() []byte {
			b := make([]byte, BTHLen+AETHLen+ICRCLen)
			BTH(b).Encode(&BTHFields{Opcode: RCAcknowledge, PadCnt: 2})
			return b
		}(), ErrPadCnt},
	}
	for _, tt := range tests {
		var p Packet
		if err := p.Parse(tt.b); err != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
	}
}

func TestICRCRejectsNonRoCE(t *testing.T) {
	good, _ := hex.DecodeString(fixtures[0].hex)
	opts := bytes.Clone(good)
	opts[0] = 0x46
	for _, tt := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrShortPacket},
		{"short", good[:30], ErrShortPacket},
		{"IPv4 options", opts, ErrIPOptions},
		{"version 5", append([]byte{0x50}, good[1:]...), ErrIPVersion},
	} {
		if _, err := ICRC(tt.b); err != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
	}
}

// Offsets and lengths as kernel rxe's rxe_opcode.c lays them out.
func TestOpcodeTableMatchesKernelLayout(t *testing.T) {
	tests := []struct {
		op      Opcode
		name    string
		hdrLen  int
		headers []Header
		flags   OpFlags
		notFlag OpFlags
	}{
		{RCSendFirst, "RC_SEND_FIRST", 12, nil, FlagRequest | FlagPayload | FlagRecvWQE | FlagStart, FlagEnd | FlagComplete},
		{RCSendMiddle, "RC_SEND_MIDDLE", 12, nil, FlagMiddle | FlagPayload, FlagRecvWQE | FlagStart | FlagEnd},
		{RCSendLastWithImmediate, "RC_SEND_LAST_WITH_IMMEDIATE", 16, []Header{HdrImmDt}, FlagEnd | FlagComplete | FlagImm, FlagRecvWQE},
		{RCRDMAWriteMiddle, "RC_RDMA_WRITE_MIDDLE", 12, nil, FlagWrite | FlagMiddle, FlagRecvWQE},
		{RCRDMAWriteOnly, "RC_RDMA_WRITE_ONLY", 28, []Header{HdrRETH}, FlagWrite | FlagStart | FlagEnd, FlagRecvWQE},
		{RCRDMAWriteOnlyWithImm, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 32, []Header{HdrRETH, HdrImmDt}, FlagRecvWQE | FlagComplete | FlagImm, 0},
		{RCRDMAWriteLastWithImm, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", 16, []Header{HdrImmDt}, FlagRecvWQE | FlagEnd, FlagStart},
		{RCRDMAReadRequest, "RC_RDMA_READ_REQUEST", 28, []Header{HdrRETH}, FlagRequest | FlagRead, FlagPayload},
		{RCRDMAReadResponseFirst, "RC_RDMA_READ_RESPONSE_FIRST", 16, []Header{HdrAETH}, FlagResponse | FlagStart | FlagPayload, FlagEnd | FlagRequest},
		{RCRDMAReadResponseMiddle, "RC_RDMA_READ_RESPONSE_MIDDLE", 12, nil, FlagResponse | FlagMiddle, 0},
		{RCRDMAReadResponseOnly, "RC_RDMA_READ_RESPONSE_ONLY", 16, []Header{HdrAETH}, FlagResponse | FlagStart | FlagEnd, 0},
		{RCAcknowledge, "RC_ACKNOWLEDGE", 16, []Header{HdrAETH}, FlagResponse, FlagPayload},
		{RCAtomicAcknowledge, "RC_ATOMIC_ACKNOWLEDGE", 24, []Header{HdrAETH, HdrAtomicAckETH}, FlagResponse, FlagPayload},
		{RCCompareSwap, "RC_COMPARE_SWAP", 40, []Header{HdrAtomicETH}, FlagRequest | FlagAtomic, FlagPayload},
		{RCFetchAdd, "RC_FETCH_ADD", 40, []Header{HdrAtomicETH}, FlagRequest | FlagAtomic, FlagPayload},
		{RCSendOnlyWithInvalidate, "RC_SEND_ONLY_WITH_INVALIDATE", 16, []Header{HdrIETH}, FlagRecvWQE | FlagInv, 0},
		{RCFlush, "RC_FLUSH", 32, []Header{HdrFETH, HdrRETH}, FlagRequest | FlagFlush, FlagPayload},
		{RCAtomicWrite, "RC_ATOMIC_WRITE", 28, []Header{HdrRETH}, FlagRequest | FlagAtomicWrite | FlagPayload, FlagRecvWQE},
		{UCSendOnly, "UC_SEND_ONLY", 12, nil, FlagRecvWQE | FlagStart | FlagEnd, 0},
		{UCRDMAWriteFirst, "UC_RDMA_WRITE_FIRST", 28, []Header{HdrRETH}, FlagWrite | FlagStart, FlagEnd},
		{UDSendOnly, "UD_SEND_ONLY", 20, []Header{HdrDETH}, FlagRecvWQE | FlagSend, 0},
		{UDSendOnlyWithImmediate, "UD_SEND_ONLY_WITH_IMMEDIATE", 24, []Header{HdrDETH, HdrImmDt}, FlagRecvWQE | FlagImm, 0},
		{CNP, "CNP", 28, []Header{HdrCNPReserved}, FlagCNP, FlagRequest | FlagResponse},
	}
	for _, tt := range tests {
		i := tt.op.Info()
		if i == nil {
			t.Errorf("%#x missing", uint8(tt.op))
			continue
		}
		if i.Name != tt.name || tt.op.String() != tt.name {
			t.Errorf("%#x: name %q, want %q", uint8(tt.op), i.Name, tt.name)
		}
		if i.HdrLen != tt.hdrLen {
			t.Errorf("%s: HdrLen %d, want %d", tt.name, i.HdrLen, tt.hdrLen)
		}
		for k := range MaxExtHeaders {
			var want Header
			if k < len(tt.headers) {
				want = tt.headers[k]
			}
			if i.Headers[k] != want {
				t.Errorf("%s: header %d is %v, want %v", tt.name, k, i.Headers[k], want)
			}
		}
		if !i.Has(tt.flags) {
			t.Errorf("%s: flags %#x lack %#x", tt.name, i.Flags, tt.flags)
		}
		if tt.notFlag != 0 && i.Flags&tt.notFlag != 0 {
			t.Errorf("%s: flags %#x have %#x", tt.name, i.Flags, i.Flags&tt.notFlag)
		}
	}
	// Every valid opcode is exactly one of request, response, CNP.
	n := 0
	for c := range 256 {
		i := Opcode(c).Info()
		if i == nil {
			continue
		}
		n++
		k := 0
		for _, f := range []OpFlags{FlagRequest, FlagResponse, FlagCNP} {
			if i.Flags&f != 0 {
				k++
			}
		}
		if k != 1 {
			t.Errorf("%s: not exactly one of request/response/CNP", i.Name)
		}
		if (Opcode(c).Transport() == TransportUC) && i.Flags&FlagResponse != 0 {
			t.Errorf("%s: UC has no responses", i.Name)
		}
	}
	if n != 25+12+2+1 {
		t.Errorf("%d opcodes in the table, want 40 (25 RC, 12 UC, 2 UD, CNP)", n)
	}
}

func TestPSNArithmeticWraps(t *testing.T) {
	tests := []struct {
		a, b   PSN
		diff   int32
		before bool
	}{
		{0, 0, 0, false},
		{1, 0, 1, false},
		{0, 1, -1, true},
		{0, 0xFFFFFF, 1, false}, // 0 comes right after 2^24-1
		{0xFFFFFF, 0, -1, true},
		{0x7FFFFF, 0, 0x7FFFFF, false}, // half the space ahead
		{0x800000, 0, -0x800000, true}, // exactly half: treated as behind, as rxe does
		{5, 0xFFFFF0, 21, false},
	}
	for _, tt := range tests {
		if d := tt.a.Diff(tt.b); d != tt.diff {
			t.Errorf("%#x.Diff(%#x) = %d, want %d", tt.a, tt.b, d, tt.diff)
		}
		if tt.a.Before(tt.b) != tt.before {
			t.Errorf("%#x.Before(%#x) = %v", tt.a, tt.b, !tt.before)
		}
	}
	if got := PSN(0xFFFFFE).Add(5); got != 3 {
		t.Errorf("Add wrap: %#x", got)
	}
	if got := PSN(2).Sub(5); got != 0xFFFFFD {
		t.Errorf("Sub wrap: %#x", got)
	}
	if got := PSN(0xFFFFF0).Distance(0x10); got != 0x20 {
		t.Errorf("Distance wrap: %#x", got)
	}
	if PSN(0).Add(1<<24) != 0 {
		t.Error("Add of 2^24 is not the identity")
	}
}

func TestHeaderViewsRoundTrip(t *testing.T) {
	b := make([]byte, BTHLen)
	f := BTHFields{Opcode: RCFetchAdd, SE: true, MigReq: true, PadCnt: 3, TVer: 0xf, PKey: 0x7fff,
		FECN: true, BECN: true, DestQP: 0xFFFFFF, AckReq: true, PSN: 0x800001}
	BTH(b).Encode(&f)
	if got := BTH(b).Fields(); got != f {
		t.Errorf("BTH round trip\n got %+v\nwant %+v", got, f)
	}
	BTH(b).SetPadCnt(1)
	BTH(b).SetAckReq(false)
	BTH(b).SetPSN(0x123456)
	if BTH(b).PadCnt() != 1 || BTH(b).AckReq() || BTH(b).PSN() != 0x123456 || BTH(b).DestQP() != 0xFFFFFF || !BTH(b).SE() {
		t.Errorf("BTH setters disturbed neighbours: %x", b)
	}
	a := make([]byte, AtomicETHLen)
	af := AtomicETHFields{VA: 1<<63 | 8, RKey: 0xabcdef01, SwapAdd: ^uint64(0), Compare: 42}
	AtomicETH(a).Encode(&af)
	if AtomicETH(a).Fields() != af {
		t.Errorf("AtomicETH round trip: %+v", AtomicETH(a).Fields())
	}
	fe := make([]byte, FETHLen)
	FETH(fe).Encode(&FETHFields{Selectivity: FlushSelMR, Placement: FlushPlacePersistence})
	if FETH(fe).Selectivity() != FlushSelMR || FETH(fe).Placement() != FlushPlacePersistence || fe[3] != 0x12 {
		t.Errorf("FETH %x", fe)
	}
	ae := make([]byte, AETHLen)
	AETH(ae).Encode(&AETHFields{Syndrome: AETHRNRNak | 12, MSN: 0xFFFFFF})
	if SyndromeType(AETH(ae).Syndrome()) != AETHRNRNak || SyndromeValue(AETH(ae).Syndrome()) != 12 || AETH(ae).MSN() != 0xFFFFFF {
		t.Errorf("AETH %x", ae)
	}
}

func TestHotPathDoesNotAllocate(t *testing.T) {
	ip, _ := hex.DecodeString(fixtures[0].hex)
	roce := ip[header.IPv4HeaderLen+header.UDPHeaderLen:]
	var p Packet
	allocs := testing.AllocsPerRun(100, func() {
		_ = p.Parse(roce)
		_ = p.BTH.PSN() + p.RETH.RKey()
		_ = VerifyICRC(ip)
	})
	if allocs != 0 {
		t.Errorf("Parse+VerifyICRC: %v allocs/op, want 0", allocs)
	}
}
