package ring

// Const is one named layout constant, for the C header that the drop-in
// libraries build against (verbsock/internal/cabigen): the ring layout has
// one definition, this package's.
type Const struct {
	Name  string
	Value int
}

// CLayout lists the ring layout's offsets and sizes under the names the C
// header gives them.
func CLayout() []Const {
	return []Const{
		{"RING_HEADER_SIZE", HeaderSize}, {"RING_OFF_MAGIC", offMagic}, {"RING_OFF_KIND", offKind},
		{"RING_OFF_ENTRIES", offEntries}, {"RING_OFF_ENTRY_SIZE", offEntrySize}, {"RING_OFF_PROD", offProd},
		{"RING_OFF_CONS", offCons}, {"RING_OFF_ARMED", offArmed}, {"RING_OFF_NOTIFY", offNotify},
		{"RING_MAGIC", Magic}, {"RING_KIND_SQ", int(KindSQ)}, {"RING_KIND_RQ", int(KindRQ)},
		{"RING_KIND_SRQ", int(KindSRQ)}, {"RING_KIND_CQ", int(KindCQ)}, {"RING_MAX_ENTRIES", MaxEntries},
		{"RING_NOTIFY_NONE", NotifyNone}, {"RING_NOTIFY_NEXT", NotifyNext}, {"RING_NOTIFY_SOLICITED", NotifySolicited},
		{"SQE_DESC_SIZE", SQEDescSize}, {"SGE_SIZE", SGESize}, {"PAGE_ENTRY_SIZE", PageEntry},
		{"SQE_WR_ID", SQEWRID}, {"SQE_FLAGS", SQEFlags}, {"SQE_OPCODE", SQEOpcode}, {"SQE_NUM_SGE", SQENumSGE},
		{"SQE_INLINE_LEN", SQEInlineLen}, {"SQE_IMM", SQEImm}, {"SQE_RKEY", SQERKey},
		{"SQE_REMOTE_ADDR", SQERemoteAddr}, {"SQE_COMPARE_ADD", SQECompareAdd}, {"SQE_SWAP", SQESwap},
		{"SQE_AH", SQEAH}, {"SQE_REMOTE_QPN", SQERemoteQPN}, {"SQE_REMOTE_QKEY", SQERemoteQKey},
		{"SQE_FLUSH_TYPE", SQEFlushType}, {"SQE_FLUSH_LEVEL", SQEFlushLevel}, {"SQE_NUM_PAGES", SQENumPages},
		{"SQE_OP", SQEOp},
		{"SQE_REG_KEY", SQEOp + 0}, {"SQE_REG_ACCESS", SQEOp + 4}, {"SQE_REG_PAGE_SIZE", SQEOp + 8},
		{"SQE_REG_MEM", SQEOp + 12}, {"SQE_REG_IOVA", SQEOp + 16}, {"SQE_REG_LENGTH", SQEOp + 24},
		{"SQE_REG_MEM_OFFSET", SQEOp + 32},
		{"SQE_BIND_MW_KEY", SQEOp + 0}, {"SQE_BIND_ACCESS", SQEOp + 4}, {"SQE_BIND_MR_KEY", SQEOp + 8},
		{"SQE_BIND_ADDR", SQEOp + 16}, {"SQE_BIND_LENGTH", SQEOp + 24},
		{"RQE_DESC_SIZE", RQEDescSize}, {"RQE_WR_ID", RQEWRID}, {"RQE_NUM_SGE", RQENumSGE},
		{"CQE_SIZE", CQESize}, {"CQE_WR_ID", cqeWRID}, {"CQE_STATUS", cqeStatus}, {"CQE_OPCODE", cqeOpcode},
		{"CQE_PKEY_INDEX", cqePKeyIndex}, {"CQE_FLAGS", cqeFlags}, {"CQE_BYTE_LEN", cqeByteLen},
		{"CQE_IMM", cqeImm}, {"CQE_QPN", cqeQPN}, {"CQE_SRC_QP", cqeSrcQP}, {"CQE_VENDOR_ERR", cqeVendorErr},
	}
}
