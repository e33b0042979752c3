package mem

import (
	"strconv"
	"strings"
)

// Access is a set of memory access rights, with the ibverbs bit values
// (enum ibv_access_flags; the kernel's IB_ACCESS_* use the same bits).
type Access uint32

const (
	LocalWrite      Access = 1 << 0 // IBV_ACCESS_LOCAL_WRITE
	RemoteWrite     Access = 1 << 1 // IBV_ACCESS_REMOTE_WRITE
	RemoteRead      Access = 1 << 2 // IBV_ACCESS_REMOTE_READ
	RemoteAtomic    Access = 1 << 3 // IBV_ACCESS_REMOTE_ATOMIC
	MWBind          Access = 1 << 4 // IBV_ACCESS_MW_BIND
	ZeroBased       Access = 1 << 5 // IBV_ACCESS_ZERO_BASED
	OnDemand        Access = 1 << 6 // IBV_ACCESS_ON_DEMAND: not supported (EOPNOTSUPP)
	HugeTLB         Access = 1 << 7 // IBV_ACCESS_HUGETLB: accepted, no meaning here
	FlushGlobal     Access = 1 << 8 // IBV_ACCESS_FLUSH_GLOBAL
	FlushPersistent Access = 1 << 9 // IBV_ACCESS_FLUSH_PERSISTENT

	// RelaxedOrdering is the first of the optional bits (IBV_ACCESS_OPTIONAL_FIRST).
	// Optional bits may be ignored by a provider; the kernel accepts them
	// anywhere in OptionalAccess, and so do we (they are dropped).
	RelaxedOrdering Access = 1 << 20
	OptionalAccess  Access = (1<<30 - 1) &^ (1<<20 - 1)

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

var accessNames = [...]struct {
	a    Access
	name string
}{
	{LocalWrite, "LOCAL_WRITE"},
	{RemoteWrite, "REMOTE_WRITE"},
	{RemoteRead, "REMOTE_READ"},
	{RemoteAtomic, "REMOTE_ATOMIC"},
	{MWBind, "MW_BIND"},
	{ZeroBased, "ZERO_BASED"},
	{OnDemand, "ON_DEMAND"},
	{HugeTLB, "HUGETLB"},
	{FlushGlobal, "FLUSH_GLOBAL"},
	{FlushPersistent, "FLUSH_PERSISTENT"},
	{RelaxedOrdering, "RELAXED_ORDERING"},
}

// String lists the flags as "REMOTE_READ|LOCAL_WRITE"; unknown bits are
// printed in hex, the empty set as "0".
func (a Access) String() string {
	if a == 0 {
		return "0"
	}
	var b strings.Builder
	rest := a
	for _, n := range accessNames {
		if a&n.a != 0 {
			if b.Len() > 0 {
				b.WriteByte('|')
			}
			b.WriteString(n.name)
			rest &^= n.a
		}
	}
	if rest != 0 {
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		b.WriteString("0x")
		b.WriteString(strconv.FormatUint(uint64(rest), 16))
	}
	return b.String()
}

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
