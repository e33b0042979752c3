package wq

// The decoders of the entries a client writes into its SQ and RQ rings:
// each checks what it copies, so a hostile entry becomes a WR that fails
// with a completion status, never a daemon fault.

import (
	"encoding/binary"

	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/verbsock/ring"
)

var le = binary.LittleEndian

// Limits a decoded SQE is held to.
const (
	validSendFlags = transport.SendFence | transport.SendSignaled | transport.SendSolicited | transport.SendInline
	maxPageShift   = 30
)

// DecodeSQE decodes and validates one copied SQE into wr (SGL and Inline in
// the given buffers). It returns the completion status the WR must fail
// with, WCSuccess if it is well-formed. A faulted WR keeps only its ID,
// opcode and flags (so that it completes in order, signalled as posted).
func DecodeSQE(b []byte, wr *transport.SendWR, sgl []transport.SGE, inline []byte, cfg *SQConfig) transport.WCStatus {
	wr.ID = le.Uint64(b[ring.SQEWRID:])
	wr.Opcode = transport.WROpcode(b[ring.SQEOpcode])
	wr.Flags = transport.SendFlags(le.Uint32(b[ring.SQEFlags:]))
	fault := func(s transport.WCStatus) transport.WCStatus {
		*wr = transport.SendWR{ID: wr.ID, Opcode: wr.Opcode, Flags: wr.Flags & validSendFlags &^ transport.SendInline}
		return s
	}
	if wr.Flags&^validSendFlags != 0 {
		return fault(transport.WCLocQPOpErr)
	}
	// The ring does not know the QP's type: an opcode no QP type allows (RC
	// allows them all) is malformed; the engine checks the rest.
	if !transport.OpcodeAllowed(transport.QPTypeRC, wr.Opcode) {
		return fault(transport.WCLocQPOpErr)
	}
	wr.ImmData = le.Uint32(b[ring.SQEImm:])
	wr.RKey = le.Uint32(b[ring.SQERKey:])
	wr.RemoteAddr = le.Uint64(b[ring.SQERemoteAddr:])
	wr.CompareAdd = le.Uint64(b[ring.SQECompareAdd:])
	wr.Swap = le.Uint64(b[ring.SQESwap:])
	wr.FlushType = b[ring.SQEFlushType]
	wr.FlushLevel = b[ring.SQEFlushLevel]

	inOff := ring.SQInlineOff(cfg.MaxSGE)
	area := b[inOff : inOff+int(cfg.MaxInline)]
	var length uint64
	if wr.Flags&transport.SendInline != 0 {
		n := int(le.Uint16(b[ring.SQEInlineLen:]))
		if n > int(cfg.MaxInline) || n > len(inline) {
			return fault(transport.WCLocLenErr)
		}
		wr.Inline = inline[:copy(inline[:n], area[:n])]
		length = uint64(n)
	} else {
		ns := int(b[ring.SQENumSGE])
		if ns > int(cfg.MaxSGE) || ns > len(sgl) {
			return fault(transport.WCLocQPOpErr)
		}
		for i := range ns {
			o := ring.SQEDescSize + i*ring.SGESize
			s := transport.SGE{Addr: le.Uint64(b[o:]), Length: le.Uint32(b[o+8:]), LKey: le.Uint32(b[o+12:])}
			if s.Length > 0 && s.Addr+uint64(s.Length)-1 < s.Addr {
				return fault(transport.WCLocProtErr) // addr + length passes 2^64
			}
			length += uint64(s.Length)
			sgl[i] = s
		}
		if length > transport.MaxMessageSize {
			return fault(transport.WCLocLenErr)
		}
		wr.SGL = sgl[:ns]
	}
	switch wr.Opcode {
	case transport.WRRDMAWrite, transport.WRRDMAWriteWithImm, transport.WRRDMARead, transport.WRAtomicWrite,
		transport.WRAtomicCmpAndSwp, transport.WRAtomicFetchAdd:
		if length > 0 && wr.RemoteAddr+length-1 < wr.RemoteAddr {
			return fault(transport.WCLocQPOpErr) // remote range passes 2^64
		}
	case transport.WRRegMR:
		r, st := decodeRegMR(b, area, cfg)
		if st != transport.WCSuccess {
			return fault(st)
		}
		wr.RegMR = r
		wr.SGL, wr.Inline = nil, nil
	case transport.WRBindMW:
		o := b[ring.SQEOp:]
		wr.Bind = &transport.BindMWWR{MWKey: le.Uint32(o[0:]), Access: mem.Access(le.Uint32(o[4:])),
			MRKey: le.Uint32(o[8:]), Addr: le.Uint64(o[16:]), Length: le.Uint64(o[24:])}
		if wr.Bind.Length > 0 && wr.Bind.Addr+wr.Bind.Length-1 < wr.Bind.Addr {
			return fault(transport.WCMWBindErr)
		}
		wr.SGL, wr.Inline = nil, nil
	}
	// A UD send names its AH; handle 0 is never an AH, so an SQE with ah 0
	// is not a UD send (on a UD QP the engine refuses it, and it completes
	// with LOC_QP_OP_ERR).
	if h := le.Uint32(b[ring.SQEAH:]); h != 0 {
		if cfg.Resolver == nil {
			return fault(transport.WCLocQPOpErr)
		}
		av, pd, ok := cfg.Resolver.AH(h)
		if !ok || pd != cfg.PD {
			return fault(transport.WCLocQPOpErr)
		}
		wr.AH = av
		wr.RemoteQPN = le.Uint32(b[ring.SQERemoteQPN:])
		wr.RemoteQKey = le.Uint32(b[ring.SQERemoteQKey:])
		if wr.RemoteQPN > 0xFFFFFF {
			return fault(transport.WCLocQPOpErr)
		}
	}
	return transport.WCSuccess
}

func decodeRegMR(b, area []byte, cfg *SQConfig) (*transport.RegMRWR, transport.WCStatus) {
	o := b[ring.SQEOp:]
	r := &transport.RegMRWR{Key: le.Uint32(o[0:]), Access: mem.Access(le.Uint32(o[4:])), PageSize: le.Uint32(o[8:]),
		IOVA: le.Uint64(o[16:]), Length: le.Uint64(o[24:])}
	ps := uint64(r.PageSize)
	if ps < 8 || ps > 1<<maxPageShift || ps&(ps-1) != 0 || r.Length == 0 || r.IOVA+r.Length-1 < r.IOVA {
		return nil, transport.WCLocQPOpErr
	}
	if cfg.Resolver == nil {
		return nil, transport.WCLocQPOpErr
	}
	np := int(le.Uint16(b[ring.SQENumPages:]))
	if np == 0 { // contiguous: pages at mem offset, offset+page_size, ...
		// Bound the length first so that the page count cannot wrap.
		if r.Length > uint64(cfg.MaxPages)*ps {
			return nil, transport.WCLocQPOpErr
		}
		need := ((r.IOVA & (ps - 1)) + r.Length + ps - 1) / ps
		if need == 0 || need > uint64(cfg.MaxPages) {
			return nil, transport.WCLocQPOpErr
		}
		bk, ok := cfg.Resolver.Mem(le.Uint32(o[12:]))
		if !ok {
			return nil, transport.WCLocQPOpErr
		}
		base := le.Uint64(o[32:])
		r.Pages = make([]mem.Page, need)
		for i := range r.Pages {
			off := base + uint64(i)*ps
			if off < base {
				return nil, transport.WCLocQPOpErr
			}
			r.Pages[i] = mem.Page{Backing: bk, Offset: off}
		}
		return r, transport.WCSuccess
	}
	if np > len(area)/ring.PageEntry || np > cfg.MaxPages {
		return nil, transport.WCLocQPOpErr
	}
	r.Pages = make([]mem.Page, np)
	for i := range r.Pages {
		e := area[i*ring.PageEntry:]
		bk, ok := cfg.Resolver.Mem(le.Uint32(e[0:]))
		if !ok {
			return nil, transport.WCLocQPOpErr
		}
		r.Pages[i] = mem.Page{Backing: bk, Offset: le.Uint64(e[8:])}
	}
	return r, transport.WCSuccess
}

// DecodeRQE decodes and validates one copied RQE. It reports false if the
// entry was malformed: wr then carries Fault (LOC_QP_OP_ERR) and no SGEs,
// and the message that reaches it fails in RQ order.
func DecodeRQE(b []byte, wr *transport.RecvWR, sgl []transport.SGE, maxSGE uint32) bool {
	wr.ID = le.Uint64(b[ring.RQEWRID:])
	wr.Fault = transport.WCSuccess
	ns := le.Uint32(b[ring.RQENumSGE:])
	poison := func() bool {
		wr.SGL = sgl[:0]
		wr.Fault = transport.WCLocQPOpErr
		return false
	}
	if ns > maxSGE || int(ns) > len(sgl) {
		return poison()
	}
	var total uint64
	for i := range int(ns) {
		o := ring.RQEDescSize + i*ring.SGESize
		s := transport.SGE{Addr: le.Uint64(b[o:]), Length: le.Uint32(b[o+8:]), LKey: le.Uint32(b[o+12:])}
		if s.Length > 0 && s.Addr+uint64(s.Length)-1 < s.Addr {
			return poison()
		}
		total += uint64(s.Length)
		sgl[i] = s
	}
	if total > transport.MaxMessageSize {
		return poison()
	}
	wr.SGL = sgl[:ns]
	return true
}
