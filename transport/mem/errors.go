package mem

import (
	"errors"
	"syscall"

	"github.com/vrnic/vrnicd/transport/wire"
)

// Op is the operation that failed; with the ErrKind it decides the IBA error
// class (see Class).
type Op uint8

const (
	OpVerb             Op = iota // a synchronous verb: reg/rereg/dereg MR, alloc/dealloc PD, MR, MW
	OpRemote                     // responder check of a RETH/AtomicETH rkey (Table.Remote)
	OpLocal                      // an SGE's lkey (Table.Local), requester or responder side
	OpFastReg                    // IB_WR_REG_MR executed by the send owner (Table.FastReg)
	OpLocalInvalidate            // IB_WR_LOCAL_INV (Table.LocalInvalidate)
	OpBindMW                     // IB_WR_BIND_MW or ibv_bind_mw (Table.BindMWWR, Table.BindMW)
	OpRemoteInvalidate           // the IETH rkey of a SEND_WITH_INV at the responder
	numOps
)

var opNames = [numOps]string{"verb", "remote access", "local access", "REG_MR", "LOCAL_INV", "BIND_MW", "SEND_WITH_INV"}

func (o Op) String() string {
	if o < numOps {
		return opNames[o]
	}
	return "op?"
}

// ErrKind says precisely which rule a request broke.
type ErrKind uint8

const (
	KindNone         ErrKind = iota
	KindInvalidArg           // malformed arguments: access combination, length, page list, atomic size
	KindNoObject             // no live object at the key's index, a key in the wrong table, unknown PD
	KindKeyMismatch          // the object exists but its key differs in some of the 32 bits
	KindWrongPD              // the object belongs to another protection domain
	KindWrongQP              // a type 2B window used or invalidated through a QP it is not bound to
	KindWrongType            // the operation is not allowed on this kind of object
	KindWrongState           // lookups: not VALID (FREE, unbound window); REG_MR/BIND_MW 2B: not FREE
	KindAccessDenied         // the object's access rights do not allow the operation
	KindOutOfRange           // outside the region or window, or the arithmetic would overflow
	KindMisaligned           // atomic target not 8-byte aligned
	KindBusy                 // memory windows are bound to the MR; the PD still has objects
	KindNoSpace              // the table is full
	KindNotSupported         // e.g. on-demand paging
	numKinds
)

var kindNames = [numKinds]string{
	"no error", "invalid argument", "no such object", "key mismatch", "wrong PD", "wrong QP",
	"wrong object type", "wrong state", "access denied", "out of range", "misaligned atomic",
	"busy", "table full", "not supported",
}

func (k ErrKind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return "kind?"
}

// Errno is the errno a verb returns for this kind.
func (k ErrKind) Errno() syscall.Errno {
	switch k {
	case KindNone:
		return 0
	case KindBusy:
		return syscall.EBUSY
	case KindNoSpace:
		return syscall.ENOMEM
	case KindNotSupported:
		return syscall.EOPNOTSUPP
	default:
		return syscall.EINVAL
	}
}

// Class is the IBA consequence of an error: what the responder puts on the
// wire and which completion status a work request gets.
//
//	Op                       Kind                        Class                 wire / completion
//	OpRemote                 KindMisaligned,InvalidArg   ClassInvalidRequest   NAK 0x61; peer's WC REM_INV_REQ_ERR
//	OpRemote                 any other                   ClassRemoteAccess     NAK 0x62; peer's WC REM_ACCESS_ERR
//	OpLocal                  any                         ClassLocalProtection  WC LOC_PROT_ERR (see below)
//	OpFastReg                any                         ClassLocalQPOperation WC LOC_QP_OP_ERR (rxe)
//	OpLocalInvalidate        any                         ClassLocalQPOperation WC LOC_QP_OP_ERR (rxe)
//	OpBindMW                 any                         ClassMWBind           WC MW_BIND_ERR
//	OpRemoteInvalidate       any                         ClassInvalidateRKey   recv WC REM_INV_REQ_ERR, QP to ERR
//	OpVerb                   any                         ClassVerb             return Errno()
//
// The NAKs are RC's; on UC the responder drops the message instead (rxe:
// class D/E). An OpLocal failure on the requester side completes the send WR
// with LOC_PROT_ERR. On the responder side (a receive WQE's SGE) IBA's answer
// is NAK remote operational error 0x63 with the receive completing in error;
// rxe reports that receive as LOC_QP_OP_ERR ("malformed WQE"), the engine
// chooses. A failed SEND_WITH_INV invalidation is rxe's "class J": no NAK,
// the receive completes with REM_INV_REQ_ERR and the QP goes to ERR.
type Class uint8

const (
	ClassNone Class = iota
	ClassVerb
	ClassRemoteAccess
	ClassInvalidRequest
	ClassLocalProtection
	ClassLocalQPOperation
	ClassMWBind
	ClassInvalidateRKey
	numClasses
)

var classNames = [numClasses]string{"none", "verb error", "remote access error", "invalid request",
	"local protection error", "local QP operation error", "MW bind error", "invalidate rkey error"}

func (c Class) String() string {
	if c < numClasses {
		return classNames[c]
	}
	return "class?"
}

// NAK is the AETH syndrome the responder sends for this class (RC), and
// whether there is one.
func (c Class) NAK() (syndrome uint8, ok bool) {
	switch c {
	case ClassRemoteAccess:
		return wire.NakRemoteAccess, true
	case ClassInvalidRequest:
		return wire.NakInvalidRequest, true
	}
	return 0, false
}

// Error is every error this package returns. Values are preallocated, one per
// (Op, Kind), so failing lookups do not allocate: compare with errors.As or
// use KindOf/ClassOf. Error also matches its errno: errors.Is(err, syscall.EBUSY).
type Error struct {
	Op   Op
	Kind ErrKind
	msg  string
}

func (e *Error) Error() string { return e.msg }

// Class maps the error to its IBA consequence; see Class.
func (e *Error) Class() Class {
	switch e.Op {
	case OpVerb:
		return ClassVerb
	case OpRemote:
		if e.Kind == KindMisaligned || e.Kind == KindInvalidArg {
			return ClassInvalidRequest
		}
		return ClassRemoteAccess
	case OpLocal:
		return ClassLocalProtection
	case OpFastReg, OpLocalInvalidate:
		return ClassLocalQPOperation
	case OpBindMW:
		return ClassMWBind
	case OpRemoteInvalidate:
		return ClassInvalidateRKey
	}
	return ClassNone
}

// Errno is the errno for a verb returning this error.
func (e *Error) Errno() syscall.Errno { return e.Kind.Errno() }

// Is matches a syscall.Errno equal to Errno().
func (e *Error) Is(target error) bool {
	n, ok := target.(syscall.Errno)
	return ok && n == e.Errno()
}

var errTable [numOps][numKinds]Error

func init() {
	for o := Op(0); o < numOps; o++ {
		for k := ErrKind(1); k < numKinds; k++ {
			errTable[o][k] = Error{Op: o, Kind: k, msg: "mem: " + o.String() + ": " + k.String()}
		}
	}
}

func mkerr(o Op, k ErrKind) error { return &errTable[o][k] }

// KindOf returns the ErrKind of an error from this package, KindNone for nil
// or foreign errors.
func KindOf(err error) ErrKind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindNone
}

// ClassOf returns the Class of an error from this package, ClassNone for nil
// or foreign errors.
func ClassOf(err error) Class {
	var e *Error
	if errors.As(err, &e) {
		return e.Class()
	}
	return ClassNone
}
