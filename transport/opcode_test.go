package transport_test

import (
	"testing"

	"github.com/vrnic/vrnicd/transport"
)

// TestOpcodeAllowed checks the service each QP type offers (IBA 9.7.x and
// kernel rxe's wr_opcode_info): UC has SEND and RDMA WRITE but no READ,
// atomics or FLUSH; UD and GSI have SEND only; RC has everything.
func TestOpcodeAllowed(t *testing.T) {
	all := []transport.WROpcode{transport.WRRDMAWrite, transport.WRRDMAWriteWithImm, transport.WRSend,
		transport.WRSendWithImm, transport.WRRDMARead, transport.WRAtomicCmpAndSwp, transport.WRAtomicFetchAdd,
		transport.WRLocalInv, transport.WRBindMW, transport.WRSendWithInv, transport.WRRegMR, transport.WRFlush,
		transport.WRAtomicWrite}
	uc := map[transport.WROpcode]bool{transport.WRRDMAWrite: true, transport.WRRDMAWriteWithImm: true,
		transport.WRSend: true, transport.WRSendWithImm: true, transport.WRLocalInv: true, transport.WRBindMW: true,
		transport.WRRegMR: true}
	ud := map[transport.WROpcode]bool{transport.WRSend: true, transport.WRSendWithImm: true}
	for _, o := range all {
		if !transport.OpcodeAllowed(transport.QPTypeRC, o) {
			t.Errorf("RC refuses %v", o)
		}
		if got := transport.OpcodeAllowed(transport.QPTypeUC, o); got != uc[o] {
			t.Errorf("UC %v: allowed %v, want %v", o, got, uc[o])
		}
		for _, typ := range []transport.QPType{transport.QPTypeUD, transport.QPTypeGSI} {
			if got := transport.OpcodeAllowed(typ, o); got != ud[o] {
				t.Errorf("%v %v: allowed %v, want %v", typ, o, got, ud[o])
			}
		}
	}
	if transport.OpcodeAllowed(transport.QPTypeRC, transport.WROpcode(0xee)) {
		t.Error("RC allows an opcode that does not exist")
	}
	if transport.OpcodeAllowed(transport.QPType(0), transport.WRSend) {
		t.Error("an unknown QP type allows SEND")
	}
}
