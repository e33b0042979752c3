// Package ring holds the shared-memory queues of verbsock: the send,
// receive and shared receive queues the client produces and the daemon
// consumes, and the completion queue the daemon produces and the client
// consumes. Each is a single-producer/single-consumer ring of fixed-size
// entries after a header page, in a sealed memfd both sides map.
//
// # Header (256 bytes, little-endian, indices 8-byte aligned)
//
//	off  size  field        written by
//	0    4     magic        client ("VRNR"), informational
//	4    4     kind         client (1 SQ, 2 RQ, 3 SRQ, 4 CQ), informational
//	8    4     entries      client, informational
//	12   4     entry size   client, informational
//	64   8     producer     producer: count of entries ever published
//	128  8     consumer     consumer: count of entries ever consumed
//	192  4     armed        consumer sets 1 when it found the ring empty and
//	                        will sleep; the producer that sees 1 swaps it to 0
//	                        and rings the doorbell
//	196  4     notify       CQ only: 0 disarmed, 1 next completion, 2
//	                        solicited or error (ibv_req_notify_cq)
//
// Indices run freely (no wrap); entry i is at HeaderSize + (i mod
// entries)·entry size, entries being a power of two. Each side keeps its own
// index privately and only publishes it: the daemon never reads back a
// value it wrote, and treats everything else in the mapping as hostile.
// The daemon copies each entry once, then validates the copy.
//
// The informational header fields are never read by the daemon: it sizes
// every ring from the create request and checks the memfd size against it.
//
// This package is the layout, the client's ends (Producer, CQReader, the
// entry encoders) and the daemon's ends that need no engine type (Consumer,
// CQ); entries are in the vocabulary of verbsock/ibv. The daemon's SQ and
// RQ ends, which decode entries into the engine's work requests, are
// package ring/wq, so that the client SDK links no engine package.
package ring

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"
)

// Header offsets.
const (
	HeaderSize   = 256
	offMagic     = 0
	offKind      = 4
	offEntries   = 8
	offEntrySize = 12
	offProd      = 64
	offCons      = 128
	offArmed     = 192
	offNotify    = 196
)

// Magic marks a ring header ("VRNR").
const Magic = 0x524e5256

// Kind is which queue a ring is.
type Kind uint32

const (
	KindSQ  Kind = 1
	KindRQ  Kind = 2
	KindSRQ Kind = 3
	KindCQ  Kind = 4
)

// MaxEntries bounds every ring.
const MaxEntries = 1 << 16

// Notify word values.
const (
	NotifyNone      = 0
	NotifyNext      = 1
	NotifySolicited = 2
)

// EntriesFor is the ring size for a queue of n entries: the next power of
// two (at least 1). It is 0 if n exceeds MaxEntries.
func EntriesFor(n uint32) uint32 {
	if n > MaxEntries {
		return 0
	}
	e := uint32(1)
	for e < n {
		e <<= 1
	}
	return e
}

// Bytes is the memfd size of a ring: header and entries, rounded up to
// pageSize.
func Bytes(entries uint32, entrySize, pageSize int) int {
	n := HeaderSize + int(entries)*entrySize
	return (n + pageSize - 1) / pageSize * pageSize
}

// Send queue entry (SQE) layout: a 128-byte descriptor (ibv_send_wr), then
// max_send_sge SGEs of 16 bytes, then the inline data area (max_inline_data
// rounded up to 16), the entry rounded up to 64 bytes.
//
//	off  size  field
//	0    8     wr_id
//	8    4     send_flags (IBV_SEND_FENCE 1, SIGNALED 2, SOLICITED 4, INLINE 8)
//	12   1     opcode (enum ibv_wr_opcode; 32 = REG_MR)
//	13   1     num_sge
//	14   2     inline_len
//	16   4     imm_data, or the rkey to invalidate (SEND_WITH_INV, LOCAL_INV)
//	20   4     rkey
//	24   8     remote_addr
//	32   8     compare_add
//	40   8     swap
//	48   4     ah (UD: AH handle)
//	52   4     remote_qpn (UD)
//	56   4     remote_qkey (UD)
//	60   1     flush_type
//	61   1     flush_level
//	62   2     num_pages (REG_MR: page entries in the inline area; 0 = contiguous)
//	64   64    operation area:
//	           REG_MR:  64 key, 68 access, 72 page_size, 76 mem handle (u32),
//	                    80 iova, 88 length, 96 mem offset (u64)
//	           BIND_MW: 64 mw rkey (new), 68 access, 72 mr lkey (u32),
//	                    80 addr, 88 length (u64)
//	128  16·n  SGEs: addr u64, length u32, lkey u32
//	...        inline data; REG_MR page entries: mem handle u32, 0 u32, offset u64
//
// The SQE* and RQE* offsets are exported for the daemon's decoders (package
// ring/wq).
const (
	SQEDescSize = 128
	SGESize     = 16
	PageEntry   = 16

	SQEWRID       = 0
	SQEFlags      = 8
	SQEOpcode     = 12
	SQENumSGE     = 13
	SQEInlineLen  = 14
	SQEImm        = 16
	SQERKey       = 20
	SQERemoteAddr = 24
	SQECompareAdd = 32
	SQESwap       = 40
	SQEAH         = 48
	SQERemoteQPN  = 52
	SQERemoteQKey = 56
	SQEFlushType  = 60
	SQEFlushLevel = 61
	SQENumPages   = 62
	SQEOp         = 64
)

// SQEntrySize is the SQE size for a QP's caps.
func SQEntrySize(maxSGE, maxInline uint32) int {
	return align(SQEDescSize+SGESize*int(maxSGE)+align(int(maxInline), 16), 64)
}

// SQInlineOff is where the inline area starts.
func SQInlineOff(maxSGE uint32) int { return SQEDescSize + SGESize*int(maxSGE) }

// Receive queue entry (RQE, also SRQ) layout: wr_id u64 at 0, num_sge u32
// at 8, 4 reserved bytes, then num_sge SGEs (16 bytes each), the entry
// rounded up to 64 bytes.
const (
	RQEDescSize = 16
	RQEWRID     = 0
	RQENumSGE   = 8
)

// RQEntrySize is the RQE size for max_recv_sge SGEs.
func RQEntrySize(maxSGE uint32) int { return align(RQEDescSize+SGESize*int(maxSGE), 64) }

// Completion queue entry (CQE, ibv_wc), 64 bytes:
//
//	off  size  field
//	0    8     wr_id
//	8    1     status (enum ibv_wc_status)
//	9    1     opcode (enum ibv_wc_opcode)
//	10   2     pkey_index
//	12   4     wc_flags
//	16   4     byte_len
//	20   4     imm_data (network order as on the wire) or invalidated rkey
//	24   4     qp_num
//	28   4     src_qp
//	32   4     vendor_err
//	36   28    reserved
const (
	CQESize      = 64
	cqeWRID      = 0
	cqeStatus    = 8
	cqeOpcode    = 9
	cqePKeyIndex = 10
	cqeFlags     = 12
	cqeByteLen   = 16
	cqeImm       = 20
	cqeQPN       = 24
	cqeSrcQP     = 28
	cqeVendorErr = 32
)

func align(n, a int) int { return (n + a - 1) / a * a }

var le = binary.LittleEndian

// Shared-word access. The mapping is page aligned and every offset is a
// multiple of the word size, so these are aligned atomic accesses.
func u64p(m []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&m[off])) }
func u32p(m []byte, off int) *uint32 { return (*uint32)(unsafe.Pointer(&m[off])) }

func loadProd(m []byte) uint64     { return atomic.LoadUint64(u64p(m, offProd)) }
func loadCons(m []byte) uint64     { return atomic.LoadUint64(u64p(m, offCons)) }
func storeProd(m []byte, v uint64) { atomic.StoreUint64(u64p(m, offProd), v) }
func storeCons(m []byte, v uint64) { atomic.StoreUint64(u64p(m, offCons), v) }

// InitHeader writes the informational fields of a fresh ring (client side).
func InitHeader(m []byte, k Kind, entries uint32, entrySize int) {
	le.PutUint32(m[offMagic:], Magic)
	le.PutUint32(m[offKind:], uint32(k))
	le.PutUint32(m[offEntries:], entries)
	le.PutUint32(m[offEntrySize:], uint32(entrySize))
}
