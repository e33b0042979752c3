package transport

import (
	"errors"
	"fmt"
	"time"

	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/transport/wire"
	"github.com/vrnic/vrnicd/verbsock/ibv"
)

// AttrMask, MTU, QPAttr and QPCap are defined in verbsock/ibv (the
// client-visible vocabulary); these are aliases.
type (
	AttrMask = ibv.AttrMask
	MTU      = ibv.MTU
	QPAttr   = ibv.QPAttr
	QPCap    = ibv.QPCap
)

const (
	AttrState            = ibv.QPAttrState
	AttrCurState         = ibv.QPAttrCurState
	AttrEnSQDAsyncNotify = ibv.QPAttrEnSQDAsyncNotify
	AttrAccessFlags      = ibv.QPAttrAccessFlags
	AttrPKeyIndex        = ibv.QPAttrPKeyIndex
	AttrPort             = ibv.QPAttrPort
	AttrQKey             = ibv.QPAttrQKey
	AttrAV               = ibv.QPAttrAV
	AttrPathMTU          = ibv.QPAttrPathMTU
	AttrTimeout          = ibv.QPAttrTimeout
	AttrRetryCnt         = ibv.QPAttrRetryCnt
	AttrRNRRetry         = ibv.QPAttrRNRRetry
	AttrRQPSN            = ibv.QPAttrRQPSN
	AttrMaxQPRdAtomic    = ibv.QPAttrMaxQPRdAtomic
	AttrAltPath          = ibv.QPAttrAltPath
	AttrMinRNRTimer      = ibv.QPAttrMinRNRTimer
	AttrSQPSN            = ibv.QPAttrSQPSN
	AttrMaxDestRdAtomic  = ibv.QPAttrMaxDestRdAtomic
	AttrPathMigState     = ibv.QPAttrPathMigState
	AttrCap              = ibv.QPAttrCap
	AttrDestQPN          = ibv.QPAttrDestQPN
)

const (
	MTU256  = ibv.MTU256
	MTU512  = ibv.MTU512
	MTU1024 = ibv.MTU1024
	MTU2048 = ibv.MTU2048
	MTU4096 = ibv.MTU4096
)

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
