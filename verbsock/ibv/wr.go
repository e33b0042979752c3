package ibv

// WROpcode is a send work request opcode, numbered as enum ibv_wr_opcode;
// WRRegMR, which only kernel ULPs post (IB_WR_REG_MR), gets a number of its own.
type WROpcode uint8

const (
	WRRDMAWrite        WROpcode = 0
	WRRDMAWriteWithImm WROpcode = 1
	WRSend             WROpcode = 2
	WRSendWithImm      WROpcode = 3
	WRRDMARead         WROpcode = 4
	WRAtomicCmpAndSwp  WROpcode = 5
	WRAtomicFetchAdd   WROpcode = 6
	WRLocalInv         WROpcode = 7
	WRBindMW           WROpcode = 8
	WRSendWithInv      WROpcode = 9
	WRFlush            WROpcode = 14
	WRAtomicWrite      WROpcode = 15
	WRRegMR            WROpcode = 32
)

var wrNames = map[WROpcode]string{
	WRRDMAWrite: "RDMA_WRITE", WRRDMAWriteWithImm: "RDMA_WRITE_WITH_IMM", WRSend: "SEND",
	WRSendWithImm: "SEND_WITH_IMM", WRRDMARead: "RDMA_READ", WRAtomicCmpAndSwp: "ATOMIC_CMP_AND_SWP",
	WRAtomicFetchAdd: "ATOMIC_FETCH_AND_ADD", WRLocalInv: "LOCAL_INV", WRBindMW: "BIND_MW",
	WRSendWithInv: "SEND_WITH_INV", WRFlush: "FLUSH", WRAtomicWrite: "ATOMIC_WRITE", WRRegMR: "REG_MR",
}

func (o WROpcode) String() string {
	if s, ok := wrNames[o]; ok {
		return s
	}
	return "WROpcode(?)"
}

// OpcodeAllowed reports whether a QP of type t accepts work requests of
// opcode o, as kernel rxe's post_send does (rxe_opcode.c's wr_opcode_info
// masks): RC every opcode, UC no READ, atomics or FLUSH, UD and GSI only
// SEND and SEND with immediate. It is the one definition the engine, the
// daemon's ring decoder and the client SDK share.
func OpcodeAllowed(t QPType, o WROpcode) bool {
	switch t {
	case QPTypeRC:
		switch o {
		case WRRDMAWrite, WRRDMAWriteWithImm, WRSend, WRSendWithImm, WRRDMARead, WRAtomicCmpAndSwp,
			WRAtomicFetchAdd, WRLocalInv, WRBindMW, WRSendWithInv, WRRegMR, WRFlush, WRAtomicWrite:
			return true
		}
	case QPTypeUC:
		switch o {
		case WRRDMAWrite, WRRDMAWriteWithImm, WRSend, WRSendWithImm, WRLocalInv, WRBindMW, WRRegMR:
			return true
		}
	case QPTypeUD, QPTypeGSI:
		return o == WRSend || o == WRSendWithImm
	}
	return false
}

// SendFlags are enum ibv_send_flags.
type SendFlags uint32

const (
	SendFence     SendFlags = 1
	SendSignaled  SendFlags = 2
	SendSolicited SendFlags = 4
	SendInline    SendFlags = 8
)

// SGE is one scatter/gather element (struct ibv_sge): Length bytes at
// Addr in the MR named by LKey.
type SGE struct {
	Addr   uint64 // addr: the first byte, in the MR's address space (its IOVA)
	Length uint32 // length: bytes
	LKey   uint32 // lkey: the local key of the MR the bytes lie in
}
