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
		{"SQE_WR_ID", sqeWRID}, {"SQE_FLAGS", sqeFlags}, {"SQE_OPCODE", sqeOpcode}, {"SQE_NUM_SGE", sqeNumSGE},
		{"SQE_INLINE_LEN", sqeInlineLen}, {"SQE_IMM", sqeImm}, {"SQE_RKEY", sqeRKey},
		{"SQE_REMOTE_ADDR", sqeRemoteAddr}, {"SQE_COMPARE_ADD", sqeCompareAdd}, {"SQE_SWAP", sqeSwap},
		{"SQE_AH", sqeAH}, {"SQE_REMOTE_QPN", sqeRemoteQPN}, {"SQE_REMOTE_QKEY", sqeRemoteQKey},
		{"SQE_FLUSH_TYPE", sqeFlushType}, {"SQE_FLUSH_LEVEL", sqeFlushLevel}, {"SQE_NUM_PAGES", sqeNumPages},
		{"SQE_OP", sqeOp},
		{"SQE_REG_KEY", sqeOp + 0}, {"SQE_REG_ACCESS", sqeOp + 4}, {"SQE_REG_PAGE_SIZE", sqeOp + 8},
		{"SQE_REG_MEM", sqeOp + 12}, {"SQE_REG_IOVA", sqeOp + 16}, {"SQE_REG_LENGTH", sqeOp + 24},
		{"SQE_REG_MEM_OFFSET", sqeOp + 32},
		{"SQE_BIND_MW_KEY", sqeOp + 0}, {"SQE_BIND_ACCESS", sqeOp + 4}, {"SQE_BIND_MR_KEY", sqeOp + 8},
		{"SQE_BIND_ADDR", sqeOp + 16}, {"SQE_BIND_LENGTH", sqeOp + 24},
		{"RQE_DESC_SIZE", RQEDescSize}, {"RQE_WR_ID", rqeWRID}, {"RQE_NUM_SGE", rqeNumSGE},
		{"CQE_SIZE", CQESize}, {"CQE_WR_ID", cqeWRID}, {"CQE_STATUS", cqeStatus}, {"CQE_OPCODE", cqeOpcode},
		{"CQE_PKEY_INDEX", cqePKeyIndex}, {"CQE_FLAGS", cqeFlags}, {"CQE_BYTE_LEN", cqeByteLen},
		{"CQE_IMM", cqeImm}, {"CQE_QPN", cqeQPN}, {"CQE_SRC_QP", cqeSrcQP}, {"CQE_VENDOR_ERR", cqeVendorErr},
	}
}
