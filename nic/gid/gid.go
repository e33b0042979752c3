// Package gid is the port's GID table, laid out as the Linux RDMA core builds
// it for kernel rxe, so peers' tools find the same indices (-g 1 / -x 1).
//
//   - Index 0 is the default GID: fe80::/64 with the EUI-64 interface ID
//     derived from the MAC. It is always present and never changes.
//   - At the first Sync, index 1.. are the IPv4 addresses as IPv4-mapped
//     GIDs (::ffff:a.b.c.d), in the order given, then the IPv6 addresses.
//     An address equal to the default GID takes no second slot.
//   - Later Syncs (address changes, e.g. followed with netlink in raw mode)
//     keep every surviving entry at its index. A removed address frees its
//     slot (it reads as the zero GID, invalid); a new address takes the
//     lowest free slot, as ib_core's GID cache does.
//
// Every entry has type RoCEv2 (rxe is RoCEv2 only). A Table is safe for
// concurrent use; lookups take a read lock.
package gid

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
)

// GID is a 16-byte RoCEv2 GID: an IPv6 address, or an IPv4 address mapped
// into IPv6.
type GID [16]byte

// FromAddr returns the GID of an IP address (IPv4 → ::ffff:a.b.c.d). Zones
// are dropped.
func FromAddr(a netip.Addr) GID {
	return GID(a.WithZone("").As16())
}

// Addr returns the IP address a GID stands for: IPv4 for an IPv4-mapped
// GID, else IPv6.
func (g GID) Addr() netip.Addr {
	return netip.AddrFrom16(g).Unmap()
}

// IsZero reports the all-zero (invalid) GID.
func (g GID) IsZero() bool { return g == GID{} }

// IsIPv4 reports an IPv4-mapped GID (RoCEv2 over IPv4).
func (g GID) IsIPv4() bool { return netip.AddrFrom16(g).Is4In6() }

// String formats like sysfs gids/N: eight groups of four hex digits.
func (g GID) String() string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x:%04x:%04x:%04x:%04x",
		uint16(g[0])<<8|uint16(g[1]), uint16(g[2])<<8|uint16(g[3]),
		uint16(g[4])<<8|uint16(g[5]), uint16(g[6])<<8|uint16(g[7]),
		uint16(g[8])<<8|uint16(g[9]), uint16(g[10])<<8|uint16(g[11]),
		uint16(g[12])<<8|uint16(g[13]), uint16(g[14])<<8|uint16(g[15]))
}

// LinkLocal returns fe80::/64 with the modified EUI-64 of a 6-byte MAC
// (RFC 4291 appendix A: flip the universal/local bit, insert ff:fe).
func LinkLocal(mac net.HardwareAddr) netip.Addr {
	var a [16]byte
	a[0], a[1] = 0xfe, 0x80
	if len(mac) == 6 {
		a[8] = mac[0] ^ 0x02
		a[9], a[10], a[11], a[12] = mac[1], mac[2], 0xff, 0xfe
		a[13], a[14], a[15] = mac[3], mac[4], mac[5]
	}
	return netip.AddrFrom16(a)
}

// Type is a GID's type (sysfs gid_attrs/types).
type Type uint8

const (
	// RoCEv2 is "RoCE v2": the GID is used over UDP/IP.
	RoCEv2 Type = 2
)

func (t Type) String() string {
	if t == RoCEv2 {
		return "RoCE v2"
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// Entry is one slot of the table.
type Entry struct {
	Index int
	GID   GID
	Type  Type
}

// DefaultSize is kernel rxe's GID table size.
const DefaultSize = 1024

// ErrFull: no free slot for a new address.
var ErrFull = errors.New("gid: table full")

// Table is a port's GID table.
type Table struct {
	mu       sync.RWMutex
	slots    []GID // zero = free (index 0 is never free)
	index    map[GID]int
	synced   bool
	onChange func([]Entry)
	size     int
}

// New returns a table of size slots (DefaultSize if size ≤ 0) holding only
// the default GID of mac at index 0.
func New(mac net.HardwareAddr, size int) *Table {
	if size <= 0 {
		size = DefaultSize
	}
	t := &Table{slots: []GID{FromAddr(LinkLocal(mac))}, index: map[GID]int{}, size: size}
	t.index[t.slots[0]] = 0
	return t
}

// OnChange registers f, called (outside the lock) with the new valid
// entries after every Sync, Add or Remove that changed the table.
func (t *Table) OnChange(f func([]Entry)) {
	t.mu.Lock()
	t.onChange = f
	t.mu.Unlock()
}

// Sync makes the table hold the default GID plus exactly addrs (IPv4 and
// IPv6, any order; zones, duplicates and invalid addresses ignored),
// keeping surviving entries at their indices. Addresses that do not fit are
// left out and reported with ErrFull; the rest are applied.
func (t *Table) Sync(addrs []netip.Addr) error {
	want := map[GID]bool{}
	var v4, v6 []GID
	for _, a := range addrs {
		if !a.IsValid() {
			continue
		}
		g := FromAddr(a)
		if want[g] {
			continue
		}
		want[g] = true
		if g.IsIPv4() {
			v4 = append(v4, g)
		} else {
			v6 = append(v6, g)
		}
	}
	t.mu.Lock()
	changed := !t.synced
	t.synced = true
	for i := 1; i < len(t.slots); i++ {
		if g := t.slots[i]; !g.IsZero() && !want[g] {
			t.free(i)
			changed = true
		}
	}
	var err error
	for _, g := range append(v4, v6...) {
		if _, ok := t.index[g]; ok {
			continue
		}
		if e := t.put(g); e != nil {
			err = e
			continue
		}
		changed = true
	}
	cb, ents := t.changedLocked(changed)
	t.mu.Unlock()
	if cb != nil {
		cb(ents)
	}
	return err
}

// Add inserts one address (if absent) and returns its index.
func (t *Table) Add(a netip.Addr) (int, error) {
	if !a.IsValid() {
		return 0, errors.New("gid: invalid address")
	}
	g := FromAddr(a)
	t.mu.Lock()
	if i, ok := t.index[g]; ok {
		t.mu.Unlock()
		return i, nil
	}
	err := t.put(g)
	i := t.index[g]
	cb, ents := t.changedLocked(err == nil)
	t.mu.Unlock()
	if cb != nil {
		cb(ents)
	}
	return i, err
}

// Remove frees an address's slot; the default GID cannot be removed.
func (t *Table) Remove(a netip.Addr) bool {
	g := FromAddr(a)
	t.mu.Lock()
	i, ok := t.index[g]
	ok = ok && i != 0
	if ok {
		t.free(i)
	}
	cb, ents := t.changedLocked(ok)
	t.mu.Unlock()
	if cb != nil {
		cb(ents)
	}
	return ok
}

func (t *Table) changedLocked(changed bool) (func([]Entry), []Entry) {
	if !changed || t.onChange == nil {
		return nil, nil
	}
	return t.onChange, t.entriesLocked()
}

// put stores g in the lowest free slot. Caller holds mu.
func (t *Table) put(g GID) error {
	for i := 1; i < len(t.slots); i++ {
		if t.slots[i].IsZero() {
			t.slots[i] = g
			t.index[g] = i
			return nil
		}
	}
	if len(t.slots) >= t.size {
		return fmt.Errorf("%w (%d entries): %v not added", ErrFull, t.size, g.Addr())
	}
	t.slots = append(t.slots, g)
	t.index[g] = len(t.slots) - 1
	return nil
}

func (t *Table) free(i int) {
	delete(t.index, t.slots[i])
	t.slots[i] = GID{}
	// Trailing free slots need no storage.
	for len(t.slots) > 1 && t.slots[len(t.slots)-1].IsZero() {
		t.slots = t.slots[:len(t.slots)-1]
	}
}

// Size is the table's capacity (the port's gid_tbl_len).
func (t *Table) Size() int { return t.size }

// Lookup returns the entry at index i; ok is false for a free or
// out-of-range slot.
func (t *Table) Lookup(i int) (Entry, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if i < 0 || i >= len(t.slots) || t.slots[i].IsZero() {
		return Entry{}, false
	}
	return Entry{Index: i, GID: t.slots[i], Type: RoCEv2}, true
}

// GIDAt is Lookup that returns the zero GID for a free slot, as
// ibv_query_gid reads it.
func (t *Table) GIDAt(i int) GID {
	e, _ := t.Lookup(i)
	return e.GID
}

// Index returns the index holding g.
func (t *Table) Index(g GID) (int, bool) {
	t.mu.RLock()
	i, ok := t.index[g]
	t.mu.RUnlock()
	return i, ok
}

// IndexOf returns the index of an IP address's GID.
func (t *Table) IndexOf(a netip.Addr) (int, bool) { return t.Index(FromAddr(a)) }

// Entries returns the valid entries in index order.
func (t *Table) Entries() []Entry {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.entriesLocked()
}

func (t *Table) entriesLocked() []Entry {
	var out []Entry
	for i, g := range t.slots {
		if !g.IsZero() {
			out = append(out, Entry{Index: i, GID: g, Type: RoCEv2})
		}
	}
	return slices.Clip(out)
}
