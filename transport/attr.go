package transport

import (
	"errors"
	"fmt"
	"time"

	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/transport/wire"
)

// AttrMask selects the QP attributes a Modify sets, numbered as enum
// ibv_qp_attr_mask.
type AttrMask uint32

const (
	AttrState            AttrMask = 1 << 0
	AttrCurState         AttrMask = 1 << 1
	AttrEnSQDAsyncNotify AttrMask = 1 << 2
	AttrAccessFlags      AttrMask = 1 << 3
	AttrPKeyIndex        AttrMask = 1 << 4
	AttrPort             AttrMask = 1 << 5
	AttrQKey             AttrMask = 1 << 6
	AttrAV               AttrMask = 1 << 7
	AttrPathMTU          AttrMask = 1 << 8
	AttrTimeout          AttrMask = 1 << 9
	AttrRetryCnt         AttrMask = 1 << 10
	AttrRNRRetry         AttrMask = 1 << 11
	AttrRQPSN            AttrMask = 1 << 12
	AttrMaxQPRdAtomic    AttrMask = 1 << 13
	AttrAltPath          AttrMask = 1 << 14
	AttrMinRNRTimer      AttrMask = 1 << 15
	AttrSQPSN            AttrMask = 1 << 16
	AttrMaxDestRdAtomic  AttrMask = 1 << 17
	AttrPathMigState     AttrMask = 1 << 18
	AttrCap              AttrMask = 1 << 19
	AttrDestQPN          AttrMask = 1 << 20
)

// MTU is an IB path MTU, numbered as enum ibv_mtu (1 = 256 … 5 = 4096).
type MTU uint8

const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes is the MTU in bytes, 0 if the value is not a valid MTU.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// MTUForNetdev is the largest IB MTU a link MTU carries, as rxe computes it:
// the link MTU less the worst-case RoCEv2 headers (RXE_MAX_HDR_LENGTH, 80
// bytes), rounded down to an IB MTU. 1500 gives 1024; 4176 and more give 4096.
func MTUForNetdev(linkMTU int) MTU {
	room := linkMTU - 80
	for m := MTU4096; m >= MTU256; m-- {
		if m.Bytes() <= room {
			return m
		}
	}
	return MTU256
}

// QPAttr holds the modifiable QP attributes (struct ibv_qp_attr): a
// modify sets the fields its AttrMask names, a query reports them all. It
// is the one definition the engine, the daemon's rings and server and the
// client SDK (verbs.QPAttr) share.
type QPAttr struct {
	State    QPState // qp_state: the state to move to (AttrState)
	CurState QPState // cur_qp_state: the state the caller believes the QP is in (AttrCurState)
	PathMTU  MTU     // path_mtu: the largest payload of a packet, MTU256 … MTU4096 (RC, UC)
	QKey     uint32  // qkey: the Q_Key of UD sends and the one receives must carry (UD)
	RQPSN    uint32  // rq_psn: the PSN expected of the first request received (RTR)
	SQPSN    uint32  // sq_psn: the PSN of the first request sent (RTS)
	DestQPN  uint32  // dest_qp_num: the remote QP (RC, UC)
	// AccessFlags is qp_access_flags: the remote operations the responder
	// allows (mem.RemoteWrite, mem.RemoteRead, mem.RemoteAtomic).
	AccessFlags mem.Access
	AV          AddressVector // ah_attr: the primary path, where packets go (RC, UC)
	PKeyIndex   uint16        // pkey_index: index in the port's P_Key table
	Port        uint8         // port_num: the device's port (1)
	// MaxRdAtomic is max_rd_atomic: RDMA READs and atomics the QP may have
	// outstanding as the requester.
	MaxRdAtomic uint8
	// MaxDestRdAtomic is max_dest_rd_atomic: those it answers at once as
	// the responder (the resources it keeps for duplicates).
	MaxDestRdAtomic uint8
	MinRNRTimer     uint8 // min_rnr_timer: the 5-bit delay code of the RNR NAKs it sends (IBA table 45)
	Timeout         uint8 // timeout: Local ACK Timeout, 4.096 µs × 2^Timeout; 0 waits forever
	RetryCnt        uint8 // retry_cnt: retransmissions after a timeout or sequence NAK before WCRetryExcErr (0-7)
	RNRRetry        uint8 // rnr_retry: retries after an RNR NAK before WCRNRRetryExcErr (0-7; 7 = infinite)
	SQDrainNotify   bool  // en_sqd_async_notify: an SQ-drained event when SQD has drained (AttrEnSQDAsyncNotify)
}

// LocalAckTimeout is the retransmit timeout of a Timeout attribute:
// 4.096 µs × 2^t; 0 means none (wait forever).
func LocalAckTimeout(t uint8) time.Duration {
	if t == 0 || t > 31 {
		return 0
	}
	return time.Duration(4096<<t) * time.Nanosecond
}

// rnrTimerMicros is IBA table 45: the RNR NAK timer codes in µs.
var rnrTimerMicros = [32]int64{
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
}

// RNRTimer is the delay an RNR NAK with timer code c asks for.
func RNRTimer(c uint8) time.Duration {
	return time.Duration(rnrTimerMicros[c&0x1f]) * time.Microsecond
}

// QPCap are the queue sizes fixed at create time (struct ibv_qp_cap): what
// the consumer asks for, and on return what the QP has.
type QPCap struct {
	MaxSendWR     uint32 // max_send_wr: send WRs outstanding (posted and not completed)
	MaxRecvWR     uint32 // max_recv_wr: receive WRs outstanding (none with an SRQ)
	MaxSendSGE    uint32 // max_send_sge: SGEs in one send WR
	MaxRecvSGE    uint32 // max_recv_sge: SGEs in one receive WR
	MaxInlineData uint32 // max_inline_data: bytes a SendInline WR may carry
}

// Errors of Modify and of posting.
var (
	ErrInvalid  = errors.New("invalid argument") // EINVAL
	ErrState    = errors.New("QP state does not allow this")
	ErrFull     = errors.New("queue full") // ENOMEM, as ibv_post_send reports it
	ErrNotFound = errors.New("no such object")
)

// transition rows: required and optional attributes per QP type, as
// libibverbs/the kernel's ib_modify_qp_is_ok define them.
type transition struct {
	valid    bool
	req, opt [5]AttrMask // indexed by QPType (1 GSI … 4 UD)
}

var transitions [StateErr + 1][StateErr + 1]transition

func init() {
	all := func(m AttrMask) [5]AttrMask { return [5]AttrMask{0, m, m, m, m} }
	per := func(gsi, rc, uc, ud AttrMask) [5]AttrMask { return [5]AttrMask{0, gsi, rc, uc, ud} }
	t := &transitions
	for s := StateReset; s <= StateErr; s++ {
		t[s][StateReset] = transition{valid: true}
		t[s][StateErr] = transition{valid: true}
	}
	t[StateReset][StateInit] = transition{valid: true,
		req: per(AttrPKeyIndex|AttrQKey, AttrPKeyIndex|AttrPort|AttrAccessFlags, AttrPKeyIndex|AttrPort|AttrAccessFlags, AttrPKeyIndex|AttrPort|AttrQKey)}
	t[StateInit][StateInit] = transition{valid: true,
		opt: per(AttrPKeyIndex|AttrQKey, AttrPKeyIndex|AttrPort|AttrAccessFlags, AttrPKeyIndex|AttrPort|AttrAccessFlags, AttrPKeyIndex|AttrPort|AttrQKey)}
	t[StateInit][StateRTR] = transition{valid: true,
		req: per(0, AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer, AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN, 0),
		opt: per(AttrPKeyIndex|AttrQKey, AttrAltPath|AttrAccessFlags|AttrPKeyIndex, AttrAltPath|AttrAccessFlags|AttrPKeyIndex, AttrPKeyIndex|AttrQKey)}
	t[StateRTR][StateRTS] = transition{valid: true,
		req: per(AttrSQPSN, AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrSQPSN|AttrMaxQPRdAtomic, AttrSQPSN, AttrSQPSN),
		opt: per(AttrCurState|AttrQKey, AttrCurState|AttrAltPath|AttrAccessFlags|AttrMinRNRTimer|AttrPathMigState,
			AttrCurState|AttrAltPath|AttrAccessFlags|AttrPathMigState, AttrCurState|AttrQKey)}
	rtsOpt := per(AttrCurState|AttrQKey, AttrCurState|AttrAccessFlags|AttrAltPath|AttrPathMigState|AttrMinRNRTimer,
		AttrCurState|AttrAccessFlags|AttrAltPath|AttrPathMigState, AttrCurState|AttrQKey)
	t[StateRTS][StateRTS] = transition{valid: true, opt: rtsOpt}
	t[StateRTS][StateSQD] = transition{valid: true, opt: all(AttrEnSQDAsyncNotify)}
	t[StateSQD][StateRTS] = transition{valid: true, opt: rtsOpt}
	t[StateSQD][StateSQD] = transition{valid: true, opt: per(AttrPKeyIndex|AttrQKey,
		AttrPort|AttrAV|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxQPRdAtomic|AttrMaxDestRdAtomic|AttrAltPath|AttrAccessFlags|AttrPKeyIndex|AttrMinRNRTimer|AttrPathMigState,
		AttrAV|AttrAltPath|AttrAccessFlags|AttrPKeyIndex|AttrPathMigState, AttrPKeyIndex|AttrQKey)}
	t[StateSQE][StateRTS] = transition{valid: true, opt: per(AttrCurState|AttrQKey, 0, AttrCurState|AttrAccessFlags, AttrCurState|AttrQKey)}
}

// Limits the device enforces on attribute values.
const (
	MaxRdAtomic = 128 // max_qp_rd_atom / max_qp_init_rd_atom, as rxe
	GSIQPN      = 1
)

// checkModify validates a modify request as ib_modify_qp_is_ok does, plus
// the value checks rxe_qp_chk_attr makes. It returns the state the QP
// goes to.
func checkModify(typ QPType, cur QPState, a *QPAttr, mask AttrMask) (QPState, error) {
	next, err := checkTransition(typ, cur, a, mask)
	if err != nil {
		return cur, err
	}
	if err := checkLimits(a, mask); err != nil {
		return cur, err
	}
	if err := checkIdentifiers(a, mask); err != nil {
		return cur, err
	}
	return next, nil
}

// checkTransition checks the state change against the transition table:
// cur_state, a valid transition, and the attributes it requires and allows
// on this QP type.
func checkTransition(typ QPType, cur QPState, a *QPAttr, mask AttrMask) (QPState, error) {
	next := cur
	if mask&AttrState != 0 {
		next = a.State
	}
	if next > StateErr {
		return cur, fmt.Errorf("%w: state %d", ErrInvalid, next)
	}
	if mask&AttrCurState != 0 {
		if a.CurState != cur {
			return cur, fmt.Errorf("%w: cur_state %v, QP is %v", ErrInvalid, a.CurState, cur)
		}
		if cur != StateRTR && cur != StateRTS && cur != StateSQD && cur != StateSQE {
			return cur, fmt.Errorf("%w: cur_state given in %v", ErrInvalid, cur)
		}
	}
	tr := transitions[cur][next]
	if !tr.valid {
		return cur, fmt.Errorf("%w: %v → %v is not a QP transition", ErrInvalid, cur, next)
	}
	req, opt := tr.req[typ], tr.opt[typ]
	if mask&req != req {
		return cur, fmt.Errorf("%w: %v → %v on %v needs attributes %#x, got %#x", ErrInvalid, cur, next, typ, uint32(req), uint32(mask&req))
	}
	if extra := mask &^ (req | opt | AttrState); extra != 0 {
		return cur, fmt.Errorf("%w: attributes %#x not allowed on %v %v → %v", ErrInvalid, uint32(extra), typ, cur, next)
	}
	return next, nil
}

// checkLimits checks the attributes a modify sets against the ranges IBA
// and the device allow.
func checkLimits(a *QPAttr, mask AttrMask) error {
	if mask&AttrPathMTU != 0 && a.PathMTU.Bytes() == 0 {
		return fmt.Errorf("%w: path MTU %d", ErrInvalid, a.PathMTU)
	}
	if mask&AttrMaxQPRdAtomic != 0 && a.MaxRdAtomic > MaxRdAtomic {
		return fmt.Errorf("%w: max_rd_atomic %d > %d", ErrInvalid, a.MaxRdAtomic, MaxRdAtomic)
	}
	if mask&AttrMaxDestRdAtomic != 0 && a.MaxDestRdAtomic > MaxRdAtomic {
		return fmt.Errorf("%w: max_dest_rd_atomic %d > %d", ErrInvalid, a.MaxDestRdAtomic, MaxRdAtomic)
	}
	if mask&AttrRetryCnt != 0 && a.RetryCnt > 7 {
		return fmt.Errorf("%w: retry_cnt %d > 7", ErrInvalid, a.RetryCnt)
	}
	if mask&AttrRNRRetry != 0 && a.RNRRetry > 7 {
		return fmt.Errorf("%w: rnr_retry %d > 7", ErrInvalid, a.RNRRetry)
	}
	if mask&AttrMinRNRTimer != 0 && a.MinRNRTimer > 31 {
		return fmt.Errorf("%w: min_rnr_timer %d > 31", ErrInvalid, a.MinRNRTimer)
	}
	if mask&AttrTimeout != 0 && a.Timeout > 31 {
		return fmt.Errorf("%w: timeout %d > 31", ErrInvalid, a.Timeout)
	}
	return nil
}

// checkIdentifiers checks the P_Key index, port, PSNs, destination QPN and
// access flags a modify sets.
func checkIdentifiers(a *QPAttr, mask AttrMask) error {
	if mask&AttrPKeyIndex != 0 && a.PKeyIndex != 0 {
		return fmt.Errorf("%w: pkey_index %d (the P_Key table has one entry)", ErrInvalid, a.PKeyIndex)
	}
	if mask&AttrPort != 0 && a.Port != 1 {
		return fmt.Errorf("%w: port %d (the device has port 1)", ErrInvalid, a.Port)
	}
	if mask&(AttrRQPSN) != 0 && a.RQPSN > wire.PSNMask {
		return fmt.Errorf("%w: rq_psn %#x is not 24 bits", ErrInvalid, a.RQPSN)
	}
	if mask&(AttrSQPSN) != 0 && a.SQPSN > wire.PSNMask {
		return fmt.Errorf("%w: sq_psn %#x is not 24 bits", ErrInvalid, a.SQPSN)
	}
	if mask&AttrDestQPN != 0 && (a.DestQPN > wire.QPNMask || a.DestQPN == 0) {
		return fmt.Errorf("%w: dest_qp_num %#x", ErrInvalid, a.DestQPN)
	}
	if mask&AttrAccessFlags != 0 && a.AccessFlags&^(mem.LocalWrite|mem.RemoteWrite|mem.RemoteRead|mem.RemoteAtomic|mem.MWBind|mem.FlushGlobal|mem.FlushPersistent) != 0 {
		return fmt.Errorf("%w: qp_access_flags %#x", ErrInvalid, uint32(a.AccessFlags))
	}
	return nil
}
