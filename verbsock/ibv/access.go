package ibv

import (
	"strconv"
	"strings"
)

// Access is a set of memory access rights, with the ibverbs bit values
// (enum ibv_access_flags; the kernel's IB_ACCESS_* use the same bits): an
// MR's, an MW's or a QP's.
type Access uint32

const (
	AccessLocalWrite      Access = 1 << 0 // IBV_ACCESS_LOCAL_WRITE
	AccessRemoteWrite     Access = 1 << 1 // IBV_ACCESS_REMOTE_WRITE
	AccessRemoteRead      Access = 1 << 2 // IBV_ACCESS_REMOTE_READ
	AccessRemoteAtomic    Access = 1 << 3 // IBV_ACCESS_REMOTE_ATOMIC
	AccessMWBind          Access = 1 << 4 // IBV_ACCESS_MW_BIND
	AccessZeroBased       Access = 1 << 5 // IBV_ACCESS_ZERO_BASED
	AccessOnDemand        Access = 1 << 6 // IBV_ACCESS_ON_DEMAND: not supported (EOPNOTSUPP)
	AccessHugeTLB         Access = 1 << 7 // IBV_ACCESS_HUGETLB: accepted, no meaning here
	AccessFlushGlobal     Access = 1 << 8 // IBV_ACCESS_FLUSH_GLOBAL
	AccessFlushPersistent Access = 1 << 9 // IBV_ACCESS_FLUSH_PERSISTENT

	// AccessRelaxedOrdering is the first of the optional bits
	// (IBV_ACCESS_OPTIONAL_FIRST). Optional bits may be ignored by a
	// provider; the kernel accepts them anywhere in AccessOptional, and so
	// does vrnicd (they are dropped).
	AccessRelaxedOrdering Access = 1 << 20
	AccessOptional        Access = (1<<30 - 1) &^ (1<<20 - 1)
)

var accessNames = [...]struct {
	a    Access
	name string
}{
	{AccessLocalWrite, "LOCAL_WRITE"},
	{AccessRemoteWrite, "REMOTE_WRITE"},
	{AccessRemoteRead, "REMOTE_READ"},
	{AccessRemoteAtomic, "REMOTE_ATOMIC"},
	{AccessMWBind, "MW_BIND"},
	{AccessZeroBased, "ZERO_BASED"},
	{AccessOnDemand, "ON_DEMAND"},
	{AccessHugeTLB, "HUGETLB"},
	{AccessFlushGlobal, "FLUSH_GLOBAL"},
	{AccessFlushPersistent, "FLUSH_PERSISTENT"},
	{AccessRelaxedOrdering, "RELAXED_ORDERING"},
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

// MWType is a memory window type, with ibverbs' values.
type MWType uint8

const (
	MWType1  MWType = 1 // IBV_MW_TYPE_1
	MWType2B MWType = 2 // IBV_MW_TYPE_2 (rxe implements 2B)
)

// Keys (lkeys and rkeys) have kernel rxe's layout: index << 8 | key byte.
// The index names the object; the key byte is the consumer's to change
// with each REG_MR or BIND_MW.

// KeyIndex is the object index of a key (key >> 8).
func KeyIndex(key uint32) uint32 { return key >> 8 }

// NextKey bumps the low byte, wrapping within it and keeping the index:
// ibv_inc_rkey, what ULPs do before each REG_MR or BIND_MW.
func NextKey(key uint32) uint32 { return key&^0xFF | (key+1)&0xFF }
