package mem

import "github.com/vrnic/vrnicd/verbsock/ibv"

// Access is a set of memory access rights, with the ibverbs bit values:
// defined in verbsock/ibv (the client-visible vocabulary), aliased here.
type Access = ibv.Access

const (
	LocalWrite      = ibv.AccessLocalWrite      // IBV_ACCESS_LOCAL_WRITE
	RemoteWrite     = ibv.AccessRemoteWrite     // IBV_ACCESS_REMOTE_WRITE
	RemoteRead      = ibv.AccessRemoteRead      // IBV_ACCESS_REMOTE_READ
	RemoteAtomic    = ibv.AccessRemoteAtomic    // IBV_ACCESS_REMOTE_ATOMIC
	MWBind          = ibv.AccessMWBind          // IBV_ACCESS_MW_BIND
	ZeroBased       = ibv.AccessZeroBased       // IBV_ACCESS_ZERO_BASED
	OnDemand        = ibv.AccessOnDemand        // IBV_ACCESS_ON_DEMAND: not supported (EOPNOTSUPP)
	HugeTLB         = ibv.AccessHugeTLB         // IBV_ACCESS_HUGETLB: accepted, no meaning here
	FlushGlobal     = ibv.AccessFlushGlobal     // IBV_ACCESS_FLUSH_GLOBAL
	FlushPersistent = ibv.AccessFlushPersistent // IBV_ACCESS_FLUSH_PERSISTENT

	// RelaxedOrdering is the first of the optional bits (IBV_ACCESS_OPTIONAL_FIRST).
	// Optional bits may be ignored by a provider; the kernel accepts them
	// anywhere in OptionalAccess, and so do we (they are dropped).
	RelaxedOrdering = ibv.AccessRelaxedOrdering
	OptionalAccess  = ibv.AccessOptional

	// RemoteAccess is every right a remote peer can use.
	RemoteAccess = RemoteRead | RemoteWrite | RemoteAtomic | FlushGlobal | FlushPersistent

	mrAccessMask = LocalWrite | RemoteWrite | RemoteRead | RemoteAtomic | MWBind |
		ZeroBased | OnDemand | HugeTLB | FlushGlobal | FlushPersistent
	mwAccessMask = RemoteRead | RemoteWrite | RemoteAtomic | ZeroBased | FlushGlobal | FlushPersistent
	flushAccess  = FlushGlobal | FlushPersistent
	// writeAccess is what makes a region or window writable by a peer; IBA
	// requires LocalWrite beside it (C10-74, and ib_check_mr_access).
	writeAccess = RemoteWrite | RemoteAtomic
)

// checkMRAccess applies ib_check_mr_access (and rxe's supported set) to the
// rights asked for a memory region, and returns them with the optional bits
// removed.
func checkMRAccess(a Access) (Access, ErrKind) {
	a &^= OptionalAccess
	if a&^mrAccessMask != 0 {
		return 0, KindInvalidArg
	}
	if a&writeAccess != 0 && a&LocalWrite == 0 {
		return 0, KindInvalidArg
	}
	if a&OnDemand != 0 {
		return 0, KindNotSupported
	}
	return a &^ HugeTLB, KindNone
}
